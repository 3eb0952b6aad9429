"""``pregel run --device cuda`` on a machine without CUDA (no driver, no simulator): one line and exit
status 2, printed once, on every rank and before any work; no file, no hang. (The GPU path itself is
tested in tests/cudasim/test_device_run.py.)"""
import os
import shutil
import subprocess
import sys

import pytest

from pregel.generate import generate_graph
from pregel.graph_io import GraphData, write_graph

BIN = os.path.dirname(sys.executable)


@pytest.mark.parametrize("size", [1, 2, 3])
def test_no_cuda_is_one_line_and_exit_2_on_every_rank(tmp_path, size):
    write_graph(tmp_path / "g.h5", GraphData(*generate_graph("er", 50, 3, seed=1)))
    environment = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    environment.update(NUMBA_DISABLE_CUDA="1", OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1")
    result = subprocess.run(
        [shutil.which("mpiexec", path=BIN), "-n", str(size), shutil.which("pregel", path=BIN), "run", "pagerank",
         "--graph", tmp_path / "g.h5", "--out", tmp_path / "pr.h5", "--device", "cuda"],
        capture_output=True, text=True, timeout=60, env=environment)
    assert result.returncode == 2
    line, = result.stderr.strip().splitlines()
    assert line.startswith("pregel run: error: --device cuda: rank 0 on ") and line.endswith(
        "sees no CUDA GPU (no driver or no device; NUMBA_ENABLE_CUDASIM=1 runs Numba's CPU simulator)")
    assert not (tmp_path / "pr.h5").exists()
