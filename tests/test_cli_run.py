"""`mpiexec -n 2 pregel run ...` end to end: the result file's values and attributes."""
import os
import shutil
import subprocess
import sys

import h5py
import networkx as nx
import numpy as np

from pregel.convert import to_networkx
from pregel.generate import generate_graph
from pregel.graph_io import GraphData, read_graph, write_graph

BIN = os.path.dirname(sys.executable)


def test_pagerank_file_with_attributes_and_stats(tmp_path):
    indptr, indices = generate_graph("powerlaw", 1000, 5, seed=4)
    graph_path, out = tmp_path / "g.h5", tmp_path / "pr.h5"
    write_graph(graph_path, GraphData(indptr, indices))
    result = subprocess.run(
        [shutil.which("mpiexec", path=BIN), "-n", "2", shutil.which("pregel", path=BIN), "run", "pagerank",
         "--graph", graph_path, "--out", out, "--tol", "1e-10", "--stats", "--partition", "hash"],
        capture_output=True, text=True, timeout=120,
        env=dict(os.environ, OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1"))
    assert result.returncode == 0, result.stderr
    expected = nx.pagerank(to_networkx(read_graph(graph_path)), tol=1e-10)
    with h5py.File(out) as f:
        values = f["values"][:]
        attrs = dict(f.attrs)
        per_superstep = f["stats/per_superstep"][:]
        fields = list(f["stats/per_superstep"].attrs["fields"])
    assert np.abs(values - np.array([expected[v] for v in range(1000)])).sum() < 1e-8
    assert attrs["algorithm"] == "pagerank" and attrs["ranks"] == 2 and attrs["partitioner"] == "hash"
    assert attrs["stopped_by"] == "master" and attrs["supersteps"] == per_superstep.shape[1]
    assert attrs["load_seconds"] > 0 and attrs["compute_seconds"] > 0
    edges = per_superstep[:, :, fields.index("edges_processed")]
    assert edges[:, 0].sum() == len(indices), "every edge is processed once per superstep"
    assert attrs["stats_edges_processed_total"] == edges.sum()
    assert attrs["stats_edges_processed_imbalance"] == edges.sum(axis=1).max() / edges.sum(axis=1).mean()
    top = int(np.argmax(values))
    assert f"{top} " in result.stdout.split("top vertices")[1].splitlines()[0]
    assert "superstep  compute_s" in result.stdout


def test_pagerank_whose_tolerance_cannot_fail_says_so(tmp_path):
    # ranks sum to 1, so their L1 change is at most 2: with N x tol >= 2 the test "change < N x tol" (networkx's)
    # passes after the first superstep whatever the graph, as it did silently at the default tol 1e-6 on any
    # graph of 2M vertices or more. 34 x 0.1 = 3.4 shows it on the karate club
    graph_path = tmp_path / "g.h5"
    karate = nx.karate_club_graph()
    from pregel.convert import from_networkx
    write_graph(graph_path, from_networkx(karate, weight=None))
    pregel = [shutil.which("mpiexec", path=BIN), "-n", "2", shutil.which("pregel", path=BIN), "run", "pagerank",
              "--graph", graph_path, "--quiet"]
    env = dict(os.environ, OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1")
    for tol, warned in ((0.1, True), (1e-3, False)):
        out = tmp_path / f"pr-{tol}.h5"
        result = subprocess.run([*pregel, "--tol", str(tol), "--out", out], capture_output=True, text=True,
                                timeout=120, env=env)
        assert result.returncode == 0, result.stderr
        expected = nx.pagerank(karate, tol=tol, weight=None)  # the same stopping rule
        with h5py.File(out) as f:
            assert np.allclose(f["values"][:], [expected[v] for v in range(34)], rtol=0, atol=1e-12)
            supersteps = int(f.attrs["supersteps"])
        assert ("PageRank stopped after one superstep" in result.stderr) == warned, result.stderr
        assert (supersteps == 1) == warned
        if warned:
            assert "N x --tol = 34 x 0.1 = 3.4" in result.stderr and "below 2 / N = 0.059" in result.stderr


MAX_VALUE = '''
import numpy as np
from pregel.program import Option, VertexProgram

class ScaledMax(VertexProgram):
    combiner = "max"
    options = (Option("alpha", float, 1.0, "scale of the ids"),)

    def __init__(self, alpha=1.0):
        self.alpha = alpha

    def init(self, ctx):
        return ctx.global_ids.astype(float) * self.alpha

    def message(self, ctx, state):
        return state

    def apply(self, ctx, state, gathered):
        new = np.maximum(state, gathered)
        return new, new > state
'''


def test_run_flags_reach_the_program_that_takes_them_and_are_refused_elsewhere(tmp_path):
    # a user program declaring Option("alpha") gets --alpha (it was constructed without arguments, so
    # --alpha 2 was ignored), and a flag the program does not take is refused rather than ignored
    graph = nx.gnp_random_graph(40, 0.06, seed=3, directed=True)
    graph_path = tmp_path / "g.h5"
    from pregel.convert import from_networkx
    write_graph(graph_path, from_networkx(graph, weight=None))
    (tmp_path / "prog.py").write_text(MAX_VALUE)
    env = dict(os.environ, OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1")
    mpi = [shutil.which("mpiexec", path=BIN), "-n", "2", shutil.which("pregel", path=BIN), "run"]
    out = tmp_path / "out.h5"
    done = subprocess.run([*mpi, f"{tmp_path / 'prog.py'}:ScaledMax", "--graph", graph_path, "--out", out,
                           "--alpha", "2", "--quiet"], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    expected = [2.0 * max(nx.ancestors(graph, v) | {v}) for v in range(40)]  # the largest id reaching v
    with h5py.File(out) as f:
        assert f["values"][:].tolist() == expected
    for algorithm, flag in (("pagerank", ["--source", "3"]), ("sssp", ["--tol", "5"]), ("bfs", ["--delta", "1"]),
                            (f"{tmp_path / 'prog.py'}:ScaledMax", ["--source", "1"])):
        refused = tmp_path / "refused.h5"
        done = subprocess.run([*mpi, algorithm, "--graph", graph_path, "--out", refused, *flag, "--quiet"],
                              capture_output=True, text=True, timeout=120, env=env)
        assert done.returncode == 2, done.stderr
        assert done.stderr.strip().count("\n") == 0 and f"{flag[0]} does not apply to" in done.stderr, done.stderr
        assert not refused.exists()


def test_a_flag_given_its_default_value_is_still_refused_by_a_program_without_it(tmp_path):
    # `--source 0` equals sssp's default: it was taken for "not given" and pagerank ran past it
    from pregel.cli import main
    from pregel.generate import generate_graph
    from pregel.graph_io import GraphData, write_graph

    indptr, indices = generate_graph("er", 20, 2, seed=1)
    write_graph(tmp_path / "g.h5", GraphData(indptr, indices))
    for algorithm, flag in (("pagerank", ["--source", "0"]), ("sssp", ["--alpha", "0.85"]), ("wcc", ["--max-iter", "100"])):
        assert main(["run", algorithm, "--graph", str(tmp_path / "g.h5"), "--out", str(tmp_path / "o.h5"), "--quiet",
                     *flag]) == 2, (algorithm, flag)
        assert not (tmp_path / "o.h5").exists()


def test_sssp_and_bfs_refuse_a_window_or_a_switch_below_zero_in_one_line(tmp_path, capsys):
    from pregel.cli import main
    from pregel.generate import generate_graph
    from pregel.graph_io import GraphData, write_graph

    indptr, indices = generate_graph("er", 20, 2, seed=1)
    write_graph(tmp_path / "g.h5", GraphData(indptr, indices, np.ones(len(indices), np.float32)))
    for delta in ("-1", "nan"):
        capsys.readouterr()
        assert main(["run", "sssp", "--graph", str(tmp_path / "g.h5"), "--out", str(tmp_path / "o.h5"), "--quiet",
                     "--delta", delta]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "--delta must be 0 (its default) or more" in err, err
        assert not (tmp_path / "o.h5").exists()
    for algorithm in ("sssp", "bfs"):
        capsys.readouterr()
        assert main(["run", algorithm, "--graph", str(tmp_path / "g.h5"), "--out", str(tmp_path / "o.h5"), "--quiet",
                     "--local-after", "-1"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "--local-after must be 0 or more, got -1" in err, err
        assert not (tmp_path / "o.h5").exists()
    assert main(["run", "wcc", "--graph", str(tmp_path / "g.h5"), "--out", str(tmp_path / "o.h5"), "--quiet",
                 "--local-after", "5"]) == 2  # not wcc's flag


def test_hub_flags_reach_the_load_and_the_result_file(tmp_path):
    # wcc follows edges both ways: with --hub-threshold 3, vertex 0 (20 in-edges) and vertex 1 (20 out-edges,
    # the in-edges of the reverse direction) are in-hubs, whose reverse edges travel to their sources' owners
    # while the others stay as each rank's own rows; the components are networkx's all the same
    graph = nx.gnp_random_graph(60, 0.02, seed=5, directed=True)
    graph.add_edges_from((v, 0) for v in range(10, 30))
    graph.add_edges_from((1, v) for v in range(30, 50))
    graph_path, out = tmp_path / "g.h5", tmp_path / "wcc.h5"
    from pregel.convert import from_networkx
    write_graph(graph_path, from_networkx(graph, weight=None))
    mpi = [shutil.which("mpiexec", path=BIN), "-n", "2", shutil.which("pregel", path=BIN), "run", "wcc",
           "--graph", graph_path, "--quiet"]
    env = dict(os.environ, OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1")
    done = subprocess.run([*mpi, "--out", out, "--hub-threshold", "3"], capture_output=True, text=True,
                          timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    expected = np.empty(60, np.int64)
    for part in nx.weakly_connected_components(graph):
        expected[list(part)] = min(part)
    with h5py.File(out) as f:
        assert f["values"][:].tolist() == expected.tolist()
        attrs = dict(f.attrs)
    assert attrs["hub_threshold"] == 3 and attrs["hub_partial_gather"] and attrs["hub_shadow_nodes"]
    assert attrs["hub_in_hubs"] >= 2
    refused = tmp_path / "refused.h5"
    done = subprocess.run([*mpi, "--out", refused, "--hub-threshold", "-1"], capture_output=True, text=True,
                          timeout=120, env=env)
    assert done.returncode == 2 and done.stderr.strip().count("\n") == 0, done.stderr
    assert "--hub-threshold must be non-negative" in done.stderr and not refused.exists()
