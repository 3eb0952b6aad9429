"""Device selection (pregel/device.py) at P = 1, 2 and 3 under mpiexec: the node-local rank against
MPI's own grouping of ranks by processor name, and a rank without a GPU ending the job on every rank.
The exchange of device arrays is tested in tests/cudasim/test_device_comm.py."""
import json
import os
import shutil
import subprocess
import sys

import pytest

SCRIPT = os.path.join(os.path.dirname(__file__), "mpi_scripts", "run_device.py")
MPIEXEC = shutil.which("mpiexec", path=os.path.dirname(sys.executable)) or "mpiexec"
TIMEOUT = 120  # seconds; a hang fails the test instead of the suite


def run_device(mode, size, folder, **env):
    """Run tests/mpi_scripts/run_device.py MODE on ``size`` ranks; every rank's JSON, in rank order."""
    environment = dict(os.environ, OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1", **env)
    result = subprocess.run([MPIEXEC, "-n", str(size), sys.executable, "-m", "mpi4py", SCRIPT, mode,
                             str(folder)], capture_output=True, text=True, timeout=TIMEOUT, env=environment)
    assert result.returncode == 0, result.stderr
    return [json.loads((folder / f"rank{r}.json").read_text()) for r in range(size)]


@pytest.mark.parametrize("size", [1, 2, 3])
def test_local_rank_groups_ranks_by_node(size, tmp_path):
    ranks = run_device("ranks", size, tmp_path)
    for r, entry in enumerate(ranks):
        same_node_before = sum(other["processor"] == entry["processor"] for other in ranks[:r])
        assert entry["rank"] == r
        assert entry["local_rank"] == same_node_before
        assert entry["local_rank"] == r  # the test launches every rank on this one node


@pytest.mark.parametrize("size", [1, 2, 3])
def test_a_rank_without_gpu_stops_every_rank_with_its_message(size, tmp_path):
    messages = run_device("nogpu", size, tmp_path)
    assert len(set(messages)) == 1 and messages[0] is not None
    assert messages[0].startswith(f"`device` cuda: rank {size - 1} on ") and "sees no CUDA GPU" in messages[0]
    assert "\n" not in messages[0]


@pytest.mark.parametrize("size", [1, 2, 3])
def test_ranks_take_the_node_gpus_round_robin(size, tmp_path):
    ranks = run_device("select", size, tmp_path, NUMBA_ENABLE_CUDASIM="1")  # two GPUs pretended
    assert [entry["returned"] for entry in ranks] == [r % 2 for r in range(size)]
    assert [entry["selected"] for entry in ranks] == [[r % 2] for r in range(size)]
