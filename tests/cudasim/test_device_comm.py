"""Exchanging device arrays (pregel/device_comm.py).

The CUDA-aware path runs on simulated ranks in threads, each with a fake MPI library that records
the buffers it is handed and performs the exchange in-process: it must be given the device arrays
themselves. The staging path runs under mpiexec at P = 1, 2 and 3 (tests/mpi_scripts/run_device.py).
The oracle of every exchange slices every rank's rows per destination.
"""
import json
import os
import shutil
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from numba import cuda

from kernels._device import is_device_array
from pregel.comm import Comm
from pregel.device_comm import DeviceComm, cuda_aware_mpi, library_cuda_support
from pregel.errors import InputError

SCRIPT = os.path.join(os.path.dirname(os.path.dirname(__file__)), "mpi_scripts", "run_device.py")
MPIEXEC = shutil.which("mpiexec", path=os.path.dirname(sys.executable)) or "mpiexec"
TIMEOUT = 120  # seconds; a hang fails the test instead of the suite


def host_bytes(buffer) -> np.ndarray:
    """A flat uint8 copy (device) or view (host) of a buffer."""
    host = buffer.copy_to_host() if is_device_array(buffer) else buffer
    return np.ascontiguousarray(host).reshape(-1).view(np.uint8)


class FakeWorld:
    """``size`` simulated ranks meeting in threads: each fake MPI posts what it sends, then reads."""

    def __init__(self, size):
        self.size = size
        self.barrier = threading.Barrier(size, timeout=30)
        self.posted = [None] * size


class FakeMPI:
    """The part of an mpi4py communicator that Comm and DeviceComm use, in-process, recording the
    buffers every ``Alltoallv`` is given."""

    def __init__(self, world, rank):
        self.world, self.rank, self.given = world, rank, []

    def Get_rank(self):
        return self.rank

    def Get_size(self):
        return self.world.size

    def allgather(self, value):
        self.world.barrier.wait()
        self.world.posted[self.rank] = value
        self.world.barrier.wait()
        return list(self.world.posted)

    def Alltoallv(self, send, received):
        send_buffer, (send_counts, send_displ), _ = send
        recv_buffer, (recv_counts, recv_displ), _ = received
        self.given.append((send_buffer, recv_buffer))
        everyone = self.allgather((host_bytes(send_buffer), send_counts, send_displ))
        out = host_bytes(recv_buffer).copy()
        for source, (data, counts, displ) in enumerate(everyone):
            assert counts[self.rank] == recv_counts[source]
            out[recv_displ[source]:recv_displ[source] + recv_counts[source]] = \
                data[displ[self.rank]:displ[self.rank] + counts[self.rank]]
        if is_device_array(recv_buffer):
            recv_buffer.copy_to_device(out.view(recv_buffer.dtype).reshape(recv_buffer.shape))
        else:
            recv_buffer.reshape(-1).view(np.uint8)[:] = out
        self.world.barrier.wait()  # nobody reuses its send buffer before everyone has read it


def random_exchange(size, seed, most_rows, features=3):
    """Counts [size, size] (rows from rank s to rank d), each rank's rows [k, features] float32, and
    what each rank must receive: the blocks addressed to it, in source order."""
    counts = np.random.default_rng(seed).integers(0, most_rows + 1, size=(size, size))
    rows = [np.random.default_rng([seed, r]).standard_normal((counts[r].sum(), features)).astype(np.float32)
            for r in range(size)]
    starts = [np.concatenate([[0], np.cumsum(counts[s])]) for s in range(size)]
    expected = [np.concatenate([rows[s][starts[s][d]:starts[s][d + 1]] for s in range(size)])
                for d in range(size)]
    return counts, rows, expected


def on_fake_ranks(size, cuda_aware, rounds):
    """Each simulated rank makes a DeviceComm over a fake MPI and runs ``alltoallv_known`` for every
    (seed, most_rows) round; returns per rank (transport, fake MPI, [(rows sent, result)] per round)."""
    world = FakeWorld(size)
    exchanges = [random_exchange(size, seed, most) for seed, most in rounds]

    def rank_main(rank):
        fake = FakeMPI(world, rank)
        transport = DeviceComm(Comm(fake), cuda_aware=cuda_aware)
        results = []
        for counts, rows, _ in exchanges:
            send = cuda.to_device(rows[rank])
            results.append((send, transport.alltoallv_known(send, counts[rank], counts[:, rank])))
        return transport, fake, results

    with ThreadPoolExecutor(size) as pool:
        ranks = [job.result() for job in [pool.submit(rank_main, r) for r in range(size)]]
    for rank, (_, _, results) in enumerate(ranks):
        for (_, _, expected), (_, received) in zip(exchanges, results):
            np.testing.assert_array_equal(received.copy_to_host(), expected[rank])
    return exchanges, ranks


@pytest.mark.parametrize("size", [1, 2, 3])
def test_cuda_aware_mpi_is_handed_the_device_arrays_themselves(size):
    _, ranks = on_fake_ranks(size, cuda_aware=True, rounds=[(0, 4), (1, 6)])
    for transport, fake, results in ranks:
        assert transport.path == "cuda-aware"
        assert transport.attributes() == {"cuda_aware_mpi": True, "bytes_staged": 0}
        if size == 1:  # one rank: no MPI call, the rows are already where they belong
            assert fake.given == [] and all(received is send for send, received in results)
            continue
        assert len(fake.given) == len(results)
        for (send_buffer, recv_buffer), (send, received) in zip(fake.given, results):
            assert send_buffer is send and recv_buffer is received
            assert is_device_array(send_buffer) and is_device_array(recv_buffer)
        assert transport.send_host.allocations == transport.recv_host.allocations == 0


@pytest.mark.parametrize("size", [2, 3])
def test_staging_hands_mpi_host_buffers_and_counts_the_bytes(size):
    exchanges, ranks = on_fake_ranks(size, cuda_aware=False, rounds=[(2, 5)])
    counts = exchanges[0][0]
    for rank, (transport, fake, _) in enumerate(ranks):
        (send_buffer, recv_buffer), = fake.given
        assert not is_device_array(send_buffer) and not is_device_array(recv_buffer)
        moved_rows = counts[rank].sum() + counts[:, rank].sum()
        assert transport.attributes() == {"cuda_aware_mpi": False, "bytes_staged": moved_rows * 3 * 4}


def test_pinned_buffers_are_reused_until_an_exchange_outgrows_them():
    # rounds 0-2 fit the first buffers (the minimum allocation); round 3 sends 40,000 rows of 12 bytes
    _, ranks = on_fake_ranks(2, cuda_aware=False, rounds=[(3, 5), (4, 5), (5, 2), (6, 20_000)])
    for transport, fake, results in ranks:
        storages = [(send.__array_interface__["data"][0], received.__array_interface__["data"][0])
                    for send, received in fake.given]
        assert len(set(storages[:3])) == 1 and storages[3] != storages[0]
        assert transport.send_host.allocations == transport.recv_host.allocations == 2
        sent = results[3][0]
        assert transport.send_host.storage.nbytes >= sent.nbytes


def test_a_host_array_is_refused():
    transport = DeviceComm(Comm(FakeMPI(FakeWorld(1), 0)), cuda_aware=True)
    with pytest.raises(ValueError, match="send must be a device array"):
        transport.alltoallv_known(np.zeros((2, 3), np.float32), [2], [2])


def test_environment_override_and_the_library_answer(monkeypatch):
    monkeypatch.setenv("PREGEL_CUDA_AWARE_MPI", "1")
    assert cuda_aware_mpi() is True
    monkeypatch.setenv("PREGEL_CUDA_AWARE_MPI", "0")
    assert cuda_aware_mpi() is False
    monkeypatch.setenv("PREGEL_CUDA_AWARE_MPI", "yes")
    with pytest.raises(InputError, match=r"^PREGEL_CUDA_AWARE_MPI='yes': must be 1 .* or 0 .*\)$"):
        cuda_aware_mpi()
    monkeypatch.delenv("PREGEL_CUDA_AWARE_MPI")
    from mpi4py import MPI

    if "pypi.org/p/mpich" not in MPI.Get_library_version():
        pytest.skip("the library's answer is known only for the PyPI mpich wheel")
    assert library_cuda_support() is False  # found MPIX_Query_cuda_support (not None); it says no
    assert cuda_aware_mpi() is False


def run_device(mode, size, folder, check=True):
    environment = dict(os.environ, OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1", PREGEL_CUDA_AWARE_MPI="0")
    result = subprocess.run([MPIEXEC, "-n", str(size), sys.executable, "-m", "mpi4py", SCRIPT, mode,
                             str(folder)], capture_output=True, text=True, timeout=TIMEOUT, env=environment)
    assert result.returncode == 0 or not check, result.stderr
    return result


@pytest.mark.parametrize("size", [1, 2, 3])
def test_staging_under_mpiexec_matches_the_sliced_oracle(size, tmp_path):
    run_device("stage", size, tmp_path)
    for rank in range(size):
        with np.load(tmp_path / f"rank{rank}.npz") as result:
            np.testing.assert_array_equal(result["received"], result["expected"])
            assert json.loads(str(result["attributes"])) == {
                "cuda_aware_mpi": False, "bytes_staged": 0 if size == 1 else int(result["bytes_moved"])}
            assert list(result["allocations"]) == ([0, 0] if size == 1 else [1, 1])


@pytest.mark.parametrize("size", [2, 3])
def test_a_bad_override_on_one_rank_stops_every_rank(size, tmp_path):
    run_device("badenv", size, tmp_path)
    messages = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(size)]
    assert messages == [messages[0]] * size
    assert messages[0].startswith("PREGEL_CUDA_AWARE_MPI='yes'")


def test_a_failing_rank_ends_the_job_with_its_message(tmp_path):
    result = run_device("hostarray", 2, tmp_path, check=False)
    assert result.returncode != 0
    assert "send must be a device array" in result.stderr
