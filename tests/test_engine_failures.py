"""Failures end the whole MPI job promptly with the message and a non-zero exit, never a hang."""
import os
import shutil
import subprocess
import sys

import h5py
import numpy as np
import pytest

from pregel.errors import InputError
from pregel.generate import generate_graph
from pregel.graph_io import GraphData, write_graph

BIN = os.path.dirname(sys.executable)
MPIEXEC = shutil.which("mpiexec", path=BIN) or "mpiexec"
PREGEL = shutil.which("pregel", path=BIN) or "pregel"
TIMEOUT = 60  # seconds; a hang fails the test instead of the suite


def mpirun(ranks, *args):
    env = dict(os.environ, OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1")
    return subprocess.run([MPIEXEC, "-n", str(ranks), PREGEL, *map(str, args)], capture_output=True,
                          text=True, timeout=TIMEOUT, env=env)


@pytest.fixture
def graph_file(tmp_path):
    indptr, indices = generate_graph("er", 200, 4, seed=1)
    weights = np.ones(len(indices), np.float32)
    path = tmp_path / "g.h5"
    write_graph(path, GraphData(indptr, indices, weights))
    return path


def test_bad_values_in_one_ranks_slice_stop_every_rank(tmp_path, graph_file):
    with h5py.File(graph_file, "r+") as f:  # the last edge belongs to the last rank's slice only
        f["graph/weights"][-1] = np.nan
    out = tmp_path / "out.h5"
    out.write_text("an earlier result")
    result = mpirun(2, "run", "sssp", "--graph", graph_file, "--out", out)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and str(graph_file) in lines[0] and "/graph/weights" in lines[0]
    assert "NaN" in lines[0]
    assert out.read_text() == "an earlier result", "a failed run leaves the old file untouched"


def test_exception_on_one_rank_aborts_the_job(tmp_path, graph_file):
    program = tmp_path / "fails.py"
    program.write_text(
        "from vertex_programs import PageRank\n"
        "class FailsOnRankOne(PageRank):\n"
        "    def apply(self, ctx, rank, gathered):\n"
        "        if ctx.rank == 1 and ctx.superstep == 2:\n"
        "            raise RuntimeError('deliberate failure on rank one')\n"
        "        return super().apply(ctx, rank, gathered)\n")
    out = tmp_path / "out.h5"
    result = mpirun(2, "run", f"{program}:FailsOnRankOne", "--graph", graph_file, "--out", out)
    assert result.returncode != 0
    assert "deliberate failure on rank one" in result.stderr and "[rank 1]" in result.stderr
    assert not out.exists()


@pytest.mark.parametrize("args,message", [
    (["run", "sssp", "--source", "500"], "--source 500 is not a vertex"),
    (["run", "nosuch"], "unknown algorithm 'nosuch'"),
    (["run", "pagerank", "--alpha", "1.5"], "--alpha must lie in [0, 1]"),
])
def test_bad_options_are_one_line(tmp_path, graph_file, args, message):
    result = mpirun(3, *args, "--graph", graph_file, "--out", tmp_path / "out.h5")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pregel run: error: ") and message in lines[0]


def test_missing_graph_and_missing_output_folder(tmp_path, graph_file):
    missing = mpirun(2, "run", "wcc", "--graph", tmp_path / "none.h5", "--out", tmp_path / "o.h5")
    assert missing.returncode == 2 and "none.h5: no such file" in missing.stderr
    no_folder = mpirun(2, "run", "wcc", "--graph", graph_file, "--out", tmp_path / "no" / "o.h5")
    assert no_folder.returncode == 2 and "cannot write: its folder" in no_folder.stderr


@pytest.mark.parametrize("error, code", [(InputError("bad rows in one slice"), 2),
                                         (RuntimeError("deliberate failure"), 1)])
def test_a_rank_whose_abort_returns_still_exits_non_zero(tmp_path, monkeypatch, graph_file, error, code):
    """MPICH may return from ``MPI_Abort`` while it tears the job down: the rank must not then exit 0."""
    import pregel.cli as cli
    import pregel.cli.launch as launch
    import pregel.cli.run_command as run_command

    def run(args):
        raise error

    monkeypatch.setattr(run_command, "_run_run", run)
    monkeypatch.setattr(launch, "_mpi_world", lambda command: (1, 2))  # rank 1 of 2, its error not collective
    monkeypatch.setattr(launch, "_abort", lambda code: None)  # the abort returned
    argv = ["run", "pagerank", "--graph", str(graph_file), "--out", str(tmp_path / "pr.h5")]
    assert cli.main(argv) == code
