"""Checkpoint and restart: a rank killed for real with SIGKILL ends the job promptly, with no
result file and the last complete checkpoint intact; resuming (at the same or another number of
ranks) gives the uninterrupted run's /values (bitwise), which networkx confirms. Mismatched and
corrupted checkpoints are refused with one line and exit status 2."""

import os
import shutil
import signal
import subprocess
import sys
import time

import h5py
import networkx as nx
import numpy as np
import pytest
import torch
from torch_geometric.nn import SAGEConv

from job_checks import assert_nothing_written, intact, kill_and_end, one_line_error, stop, wait_for
from pregel.generate import generate_graph, random_features
from pregel.graph_io import GraphData, write_graph
from vertex_programs.gnn import save_model

BIN = os.path.dirname(sys.executable)
MPIEXEC = shutil.which("mpiexec", path=BIN) or "mpiexec"
PREGEL = shutil.which("pregel", path=BIN) or "pregel"
ENV = dict(os.environ, OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1")
SIDE = 12  # grid side: sssp needs 2 (SIDE - 1) supersteps from a corner

# Programs run through FILE.py:CLASS; with PREGEL_TEST_PIDFILE set, the last rank writes its pid
# there and sleeps in apply of superstep 5 (supersteps 2 and 4 are checkpointed by then).
PROGRAMS = '''
import os, time
from vertex_programs import PageRank, ShortestPaths

def _maybe_hang(ctx):
    pidfile = os.environ.get("PREGEL_TEST_PIDFILE")
    if pidfile and ctx.rank == ctx.size - 1 and ctx.superstep == 5:
        with open(pidfile + ".tmp", "w") as f:
            f.write(str(os.getpid()))
        os.replace(pidfile + ".tmp", pidfile)
        time.sleep(600)

class SlowPageRank(PageRank):
    def apply(self, ctx, rank, gathered):
        _maybe_hang(ctx)
        return super().apply(ctx, rank, gathered)

class SlowShortestPaths(ShortestPaths):
    def __init__(self):
        super().__init__(0, delta=0.2)  # narrow: most pending vertices wait on the saved nearest distance

    def apply(self, ctx, dist, gathered):
        _maybe_hang(ctx)
        return super().apply(ctx, dist, gathered)

class SlowLocalShortestPaths(SlowShortestPaths):
    def __init__(self):  # relaxes each rank's own edges from superstep 4 on, the one a resume starts at
        ShortestPaths.__init__(self, 0, delta=0.2, local_after=4)
'''


def _pregel(ranks, *args, env=ENV, **kw):
    command = [PREGEL, *map(str, args)]
    if ranks > 1:
        command = [MPIEXEC, "-n", str(ranks)] + command
    return subprocess.run(command, capture_output=True, text=True, timeout=120, env=env, **kw)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("ckpt")
    indptr, indices = generate_graph("grid", SIDE * SIDE, 4, seed=0)
    weights = (1.0 - np.random.default_rng(3).random(len(indices))).astype(np.float32)
    write_graph(folder / "g.h5", GraphData(indptr, indices, weights, directed=False))
    (folder / "programs.py").write_text(PROGRAMS)
    return folder


def _oracle(files, cls):
    with h5py.File(files / "g.h5") as f:
        indptr, indices, weights = f["graph/indptr"][:], f["graph/indices"][:], f["graph/weights"][:]
    g = nx.DiGraph()
    g.add_nodes_from(range(len(indptr) - 1))
    src = np.repeat(np.arange(len(indptr) - 1), np.diff(indptr))
    g.add_weighted_edges_from(zip(src.tolist(), indices.tolist(), weights.astype(float).tolist()))
    if cls == "SlowPageRank":
        ranks = nx.pagerank(g, alpha=0.85, tol=1e-6, weight=None)
        return np.array([ranks[v] for v in range(len(indptr) - 1)]), 1e-6
    dist = nx.single_source_dijkstra_path_length(g, 0)
    return np.array([dist.get(v, np.inf) for v in range(len(indptr) - 1)]), 1e-9


def _values(path):
    with h5py.File(path) as f:
        return f["values"][:], int(f.attrs["supersteps"])


def _kill_during_run(files, tmp_path, cls, ranks, extra=()):
    """Start a checkpointed run that hangs in superstep 5, SIGKILL the hanging rank, wait."""
    pidfile, ck, out = tmp_path / "pid", tmp_path / "ck", tmp_path / "out.h5"
    env = dict(ENV, PREGEL_TEST_PIDFILE=str(pidfile))
    job = subprocess.Popen([MPIEXEC, "-n", str(ranks), PREGEL, "run", f"{files / 'programs.py'}:{cls}",
                            "--graph", files / "g.h5", "--out", out, "--checkpoint-dir", ck,
                            "--checkpoint-every", "2", "--quiet", *extra],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        wait_for(pidfile, job, 90, "the program never reached superstep 5")
        kill_and_end(job, int(pidfile.read_text()))
    finally:
        stop(job)
    assert_nothing_written(job, out, tmp_path)
    return ck


@pytest.mark.parametrize("cls,ranks,resume_ranks", [
    ("SlowPageRank", 2, 2),
    ("SlowShortestPaths", 3, 3),
    ("SlowShortestPaths", 2, 3),
    ("SlowLocalShortestPaths", 2, 3),
    ("SlowPageRank", 3, 2),
])
def test_killed_rank_then_resume_matches_uninterrupted_run(files, tmp_path, cls, ranks, resume_ranks):
    ck = _kill_during_run(files, tmp_path, cls, ranks)
    steps = sorted(p.name for p in ck.iterdir())
    assert steps == ["step-000000002", "step-000000004"]
    assert all(intact(ck / s) for s in steps)

    program = f"{files / 'programs.py'}:{cls}"
    resumed = _pregel(resume_ranks, "run", program, "--graph", files / "g.h5", "--out",
                      tmp_path / "resumed.h5", "--resume", ck, "--quiet")
    assert resumed.returncode == 0, resumed.stderr
    full = _pregel(resume_ranks, "run", program, "--graph", files / "g.h5", "--out", tmp_path / "full.h5",
                   "--quiet")
    assert full.returncode == 0, full.stderr
    values, supersteps = _values(tmp_path / "resumed.h5")
    expected, full_supersteps = _values(tmp_path / "full.h5")
    assert supersteps == full_supersteps > 5
    if cls == "SlowLocalShortestPaths":  # it did switch: a search in supersteps alone takes 2 (SIDE - 1) or more
        assert full_supersteps < 2 * (SIDE - 1)
    oracle, tol = _oracle(files, cls)
    np.testing.assert_allclose(values, oracle, rtol=0, atol=tol)
    if ranks == resume_ranks or "ShortestPaths" in cls:  # min-plus is exact at any size
        assert np.array_equal(values, expected), "resumed run is bitwise the uninterrupted one"
    else:  # PageRank's aggregators sum over ranks, so another size rounds differently
        np.testing.assert_allclose(values, expected, rtol=1e-12, atol=1e-15)


def test_only_the_last_two_checkpoints_are_kept(files, tmp_path):
    ck = tmp_path / "ck"
    result = _pregel(2, "run", "sssp", "--graph", files / "g.h5", "--out", tmp_path / "o.h5",
                     "--checkpoint-dir", ck, "--checkpoint-every", "3")
    assert result.returncode == 0, result.stderr
    supersteps = _values(tmp_path / "o.h5")[1]
    last = (supersteps - 1) // 3 * 3  # the final superstep ends the run: not checkpointed
    assert sorted(p.name for p in ck.iterdir()) == [f"step-{last - 3:09d}", f"step-{last:09d}"]


@pytest.fixture
def checkpointed(files, tmp_path):
    """A checkpoint folder of an sssp run stopped after 4 supersteps on 2 ranks."""
    ck = tmp_path / "ck"
    result = _pregel(2, "run", "sssp", "--graph", files / "g.h5", "--out", tmp_path / "first.h5",
                     "--checkpoint-dir", ck, "--checkpoint-every", "2", "--max-supersteps", "4")
    assert result.returncode == 0, result.stderr
    return ck


def test_mismatched_checkpoint_is_refused(files, tmp_path, checkpointed):
    other = _pregel(2, "run", "sssp", "--source", "5", "--graph", files / "g.h5", "--out",
                    tmp_path / "o.h5", "--resume", checkpointed)
    one_line_error(other, "does not match this job", "source")
    indptr, indices = generate_graph("grid", SIDE * SIDE, 4, seed=0)
    write_graph(tmp_path / "unweighted.h5", GraphData(indptr, indices, directed=False))
    graph = _pregel(2, "run", "sssp", "--graph", tmp_path / "unweighted.h5", "--out", tmp_path / "o.h5",
                    "--resume", checkpointed)
    one_line_error(graph, "does not match this job", "graph")
    assert not (tmp_path / "o.h5").exists()


def test_corrupted_or_missing_checkpoints_are_refused(files, tmp_path, checkpointed):
    part = checkpointed / "step-000000004" / "part-00001.npz"
    data = bytearray(part.read_bytes())
    data[len(data) // 2] ^= 0xFF
    part.write_bytes(bytes(data))
    corrupted = _pregel(3, "run", "sssp", "--graph", files / "g.h5", "--out", tmp_path / "o.h5",
                        "--resume", checkpointed)
    one_line_error(corrupted, "part-00001.npz", "corrupted")
    empty = tmp_path / "empty"
    empty.mkdir()
    none = _pregel(2, "run", "sssp", "--graph", files / "g.h5", "--out", tmp_path / "o.h5", "--resume", empty)
    one_line_error(none, "holds no complete checkpoint")
    reused = _pregel(2, "run", "sssp", "--graph", files / "g.h5", "--out", tmp_path / "o.h5",
                     "--checkpoint-dir", checkpointed)
    one_line_error(reused, "already holds checkpoints")
    assert not (tmp_path / "o.h5").exists()


def test_incomplete_newest_checkpoint_is_skipped(files, tmp_path, checkpointed):
    (checkpointed / "step-000000004" / "manifest.json").unlink()  # as if killed while writing it
    resumed = _pregel(3, "run", "sssp", "--graph", files / "g.h5", "--out", tmp_path / "o.h5",
                      "--resume", checkpointed)
    assert resumed.returncode == 0, resumed.stderr
    oracle, _ = _oracle(files, "SlowShortestPaths")
    assert np.array_equal(_values(tmp_path / "o.h5")[0], oracle)


# ---------------------------------------------------------------- pregel infer

LAYERS = 4


@pytest.fixture(scope="module")
def gnn_files(tmp_path_factory):
    """A graph big enough that a layer takes a while, and a 4-layer GraphSAGE saved from PyG."""
    folder = tmp_path_factory.mktemp("ckpt_gnn")
    n, width = 20_000, 64
    indptr, indices = generate_graph("powerlaw", n, 20, seed=2)
    features = random_features(None, n, width, np.random.default_rng(2))
    write_graph(folder / "g.h5", GraphData(indptr, indices, features=features))
    torch.manual_seed(0)
    layers = [SAGEConv(width, width) for _ in range(LAYERS)]
    save_model(folder / "m.pt", layers)
    return folder, layers


def _pyg(folder, layers):
    with h5py.File(folder / "g.h5") as f:
        indptr, indices = f["graph/indptr"][:], f["graph/indices"][:]
        x = torch.from_numpy(f["nodes/features"][:])
    edge_index = torch.from_numpy(np.stack([np.repeat(np.arange(len(indptr) - 1), np.diff(indptr)),
                                            indices.astype(np.int64)]))
    with torch.no_grad():
        for i, conv in enumerate(layers):
            x = conv(x, edge_index)
            x = x.relu() if i < len(layers) - 1 else x
    return x.numpy()


def _ranks_of(job_pid):
    """Process ids of the ranks that mpiexec ``job_pid`` started (its descendants running pregel)."""
    found = subprocess.run(["pgrep", "-f", "-P", ",".join(_descendants(job_pid)), "pregel"],
                           capture_output=True, text=True).stdout.split()
    return [int(p) for p in found]


def _started_ranks(job, ranks: int) -> list:
    """The process ids of the job's ``ranks`` ranks, ascending, once they have all started (before the
    first layer ends, so that seeing a checkpoint and freezing the job need no new process)."""
    deadline = time.time() + 120
    while len(found := sorted(_ranks_of(job.pid))) < ranks:
        assert job.poll() is None and time.time() < deadline, "the ranks never started"
        time.sleep(0.01)
    return found


def _descendants(pid):
    pids, frontier = [str(pid)], [str(pid)]
    while frontier:
        children = subprocess.run(["pgrep", "-P", ",".join(frontier)], capture_output=True,
                                  text=True).stdout.split()
        pids += children
        frontier = children
    return pids


@pytest.mark.parametrize("ranks,resume_ranks", [(2, 2), (3, 2)])
def test_infer_killed_in_a_layer_resumes_at_that_layer(gnn_files, tmp_path, ranks, resume_ranks):
    folder, layers = gnn_files
    ck, out = tmp_path / "ck", tmp_path / "out.h5"
    args = ["--graph", folder / "g.h5", "--model", folder / "m.pt", "--quiet"]
    job = subprocess.Popen([MPIEXEC, "-n", str(ranks), PREGEL, "infer", *map(str, args), "--out", str(out),
                            "--checkpoint-dir", str(ck)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, env=ENV)
    try:
        victims = _started_ranks(job, ranks)
        wait_for(ck / "step-000000001" / "manifest.json", job, 300, "layer 1 was never checkpointed")
        for pid in victims:  # freeze the job at once (no process is started between seeing and freezing)
            os.kill(pid, signal.SIGSTOP)
        assert job.poll() is None, "the job ended before it could be killed"
        for pid in victims[:-1]:  # the others run on and must notice the lost rank
            os.kill(pid, signal.SIGCONT)
        kill_and_end(job, victims[-1])
    finally:
        stop(job)
    assert_nothing_written(job, out, tmp_path)
    complete = sorted(p.name for p in ck.iterdir() if (p / "manifest.json").exists())
    assert complete[-1] in ("step-000000001", "step-000000002") and all(intact(ck / s) for s in complete)

    resumed = _pregel(resume_ranks, "infer", *args, "--out", tmp_path / "resumed.h5", "--resume", ck)
    assert resumed.returncode == 0, resumed.stderr
    full = _pregel(resume_ranks, "infer", *args, "--out", tmp_path / "full.h5")
    assert full.returncode == 0, full.stderr
    values, expected = _values(tmp_path / "resumed.h5")[0], _values(tmp_path / "full.h5")[0]
    if ranks == resume_ranks:
        assert np.array_equal(values, expected), "resumed inference is bitwise the uninterrupted one"
    else:  # hubs' partial sums are split differently over another number of ranks (float32)
        np.testing.assert_allclose(values, expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(values, _pyg(folder, layers), rtol=1e-4, atol=1e-4)
