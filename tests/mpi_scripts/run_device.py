"""Device selection and device-array exchange at this job's size (tests/test_device.py,
tests/cudasim/test_device_comm.py).

Usage: mpiexec -n P python -m mpi4py tests/mpi_scripts/run_device.py MODE OUT_FOLDER
Every rank writes OUT_FOLDER/rank{r}.json (or .npz); modes:
  ranks      local_rank, and MPI's processor name (the oracle groups ranks by it)
  nogpu      the last rank sees no GPU (NUMBA_DISABLE_CUDA=1), the others the simulator; select_gpu
             must raise the same InputError on every rank: the message, or null when none was raised
  select     NUMBA_ENABLE_CUDASIM=1 with two GPUs pretended: the index select_gpu chose on each rank
  badenv     the last rank has PREGEL_CUDA_AWARE_MPI=yes: DeviceComm must fail on every rank
  stage      NUMBA_ENABLE_CUDASIM=1: three alltoallv_known rounds of random float32 [k, F] rows on the
             staging path (the library's own answer), with an allgather-and-slice oracle
  hostarray  rank 1 passes a host array: the job must end with the message, not hang
"""

import json
import os
import sys

from mpi4py import MPI  # imports no numba: the environment set below is still read

MODE, OUT = sys.argv[1], sys.argv[2]
RANK, SIZE = MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_size()
if MODE == "nogpu":  # before numba is imported: it reads these once
    os.environ.pop("NUMBA_ENABLE_CUDASIM", None)
    if RANK == SIZE - 1:
        os.environ["NUMBA_DISABLE_CUDA"] = "1"
    else:
        os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
if MODE == "badenv" and RANK == SIZE - 1:
    os.environ["PREGEL_CUDA_AWARE_MPI"] = "yes"

import numpy as np  # noqa: E402

from pregel import device  # noqa: E402
from pregel.comm import Comm  # noqa: E402
from pregel.device_comm import DeviceComm  # noqa: E402
from pregel.errors import InputError  # noqa: E402

FEATURES = 3
ROUNDS = ((0, 4), (1, 4), (2, 9))  # (seed, most rows in one block): the last round grows the buffers


def write_json(comm, value):
    with open(os.path.join(OUT, f"rank{comm.rank}.json"), "w") as f:
        json.dump(value, f)


def message_of(call):
    try:
        call()
    except InputError as err:
        return str(err)
    return None


def stage(comm):
    from numba import cuda

    transport = DeviceComm(comm)
    received, expected, moved = [], [], 0
    for seed, most in ROUNDS:
        counts = np.random.default_rng(seed).integers(0, most + 1, size=(comm.size, comm.size))
        counts[0, -1] = 0  # always one empty block
        rows = np.random.default_rng(100 * seed + comm.rank).standard_normal(
            (int(counts[comm.rank].sum()), FEATURES)).astype(np.float32)
        everyone = comm.allgather(rows)  # the oracle: every rank's rows, sliced per destination
        starts = [np.concatenate([[0], np.cumsum(counts[s])]) for s in range(comm.size)]
        expected.append(np.concatenate([everyone[s][starts[s][comm.rank]:starts[s][comm.rank + 1]]
                                        for s in range(comm.size)]))
        got = transport.alltoallv_known(cuda.to_device(rows), counts[comm.rank], counts[:, comm.rank])
        received.append(got.copy_to_host())
        moved += (len(rows) + int(counts[:, comm.rank].sum())) * FEATURES * 4
    np.savez(os.path.join(OUT, f"rank{comm.rank}.npz"), expected=np.concatenate(expected),
             received=np.concatenate(received), bytes_staged=transport.bytes_staged, bytes_moved=moved,
             path=transport.path, attributes=json.dumps(transport.attributes()),
             allocations=[transport.send_host.allocations, transport.recv_host.allocations])


def main():
    comm = Comm()
    if MODE == "ranks":
        write_json(comm, {"rank": comm.rank, "local_rank": device.local_rank(comm),
                          "processor": MPI.Get_processor_name()})
    elif MODE == "nogpu":
        write_json(comm, message_of(lambda: device.select_gpu(comm)))
    elif MODE == "select":
        from numba import cuda

        chosen = []
        device.visible_gpus = lambda: 2
        cuda.select_device = chosen.append
        write_json(comm, {"returned": device.select_gpu(comm), "selected": chosen})
    elif MODE == "badenv":
        write_json(comm, message_of(lambda: DeviceComm(comm)))
    elif MODE == "stage":
        stage(comm)
    elif MODE == "hostarray":
        from numba import cuda

        rows = np.ones((comm.size, FEATURES), np.float32)
        counts = np.ones(comm.size, np.int64)
        DeviceComm(comm, cuda_aware=False).alltoallv_known(rows if comm.rank == 1 else cuda.to_device(rows),
                                                          counts, counts)


if __name__ == "__main__":
    main()
