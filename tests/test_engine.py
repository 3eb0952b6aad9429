"""The superstep engine at P = 1, 2 and 3 with both partitioners and with the hub strategies
(partial gather, shadow nodes on/off), against networkx and NumPy oracles.

One module-scoped fixture writes the test graphs and runs tests/mpi_scripts/run_programs.py once
per P under mpiexec (each run covers every graph, partitioner and program), so the suite pays
for three MPI launches, not hundreds.
"""

import os
import shutil
import subprocess
import sys

import networkx as nx
import numpy as np
import pytest

from mpi_scripts.engine_programs import wide_rows
from pregel.convert import from_networkx
from pregel.generate import generate_graph, random_features
from pregel.graph_io import GraphData, read_graph, write_graph

SIZES = (1, 2, 3)
LAYOUTS = ("range", "hash", "hubs", "noshadow")  # see tests/mpi_scripts/run_programs.py
SCRIPT = os.path.join(os.path.dirname(__file__), "mpi_scripts", "run_programs.py")
MPIEXEC = shutil.which("mpiexec", path=os.path.dirname(sys.executable)) or "mpiexec"


def _weighted(graph: nx.Graph, seed: int) -> nx.Graph:
    rng = np.random.default_rng(seed)
    for u, v in graph.edges:
        graph[u][v]["weight"] = float(np.float32(rng.uniform(0.1, 2.0)))
    return graph


def _graphs() -> dict[str, nx.Graph]:
    rng = np.random.default_rng(0)
    powerlaw = nx.DiGraph()
    powerlaw.add_nodes_from(range(400))
    indptr, indices = generate_graph("powerlaw", 400, 4, seed=1)
    powerlaw.add_edges_from(zip(np.repeat(np.arange(400), np.diff(indptr)).tolist(), indices.tolist()))
    components = nx.gnm_random_graph(120, 90, seed=2)  # undirected, many components
    components.add_edges_from([(0, 0), (7, 7)])
    dangling = nx.gnp_random_graph(150, 0.02, seed=3, directed=True)
    dangling.add_edges_from([(3, 3), (0, 0)])  # self-loops, and many sinks at this density
    hub = nx.DiGraph()  # vertex 5 holds most of the edges, in both directions
    hub.add_nodes_from(range(200))
    hub.add_edges_from((5, v) for v in range(200) if v != 5)
    hub.add_edges_from((v, 5) for v in range(0, 200, 3) if v != 5)
    hub.add_edges_from(zip(rng.integers(0, 200, 40).tolist(), rng.integers(0, 200, 40).tolist()))
    isolated = nx.DiGraph()
    isolated.add_nodes_from(range(10))
    isolated.add_edge(0, 1)
    # a long ladder with shuffled ids, vertex 0 at one end: searches from 0 take hundreds of supersteps
    # with fronts of a few vertices, which run on their rows alone (HostPath.front)
    order = np.concatenate([[0], 1 + rng.permutation(599)])
    ladder = nx.Graph()  # vertices in id order: the file numbers them in the graph's order
    ladder.add_nodes_from(range(600))
    ladder.add_edges_from((order[u], order[v]) for u, v in nx.ladder_graph(300).edges)
    return {name: _weighted(g, i) for i, (name, g) in enumerate(
        {"powerlaw": powerlaw, "components": components, "dangling": dangling, "hub": hub,
         "isolated": isolated, "ladder": ladder}.items())}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("engine")
    graphs = _graphs()
    for name, graph in graphs.items():
        write_graph(folder / f"{name}.h5", from_networkx(graph))
    indptr, indices = generate_graph("er", 60, 3, seed=9)
    rng = np.random.default_rng(9)
    write_graph(folder / "features.h5", GraphData(
        indptr, indices, rng.random(len(indices)).astype(np.float32),
        random_features(None, 60, 5, rng)))
    env = dict(os.environ, OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1")
    for size in SIZES:
        subprocess.run([MPIEXEC, "-n", str(size), sys.executable, "-m", "mpi4py", SCRIPT, str(folder)],
                       check=True, timeout=600, env=env)
    results = {size: dict(np.load(folder / f"results_{size}.npz")) for size in SIZES}
    graphs["features"] = read_graph(folder / "features.h5")
    return graphs, results


def _each(runs, name, key):
    """(P, layout, values) for every run of program ``key`` on graph ``name``."""
    _, results = runs
    for size in SIZES:
        for layout in LAYOUTS:
            yield size, layout, results[size][f"{name}/{layout}/{key}"]


GRAPHS = ("powerlaw", "components", "dangling", "hub", "isolated", "ladder")


@pytest.mark.parametrize("name", GRAPHS)
def test_pagerank_matches_networkx(runs, name):
    graph = runs[0][name]
    expected = nx.pagerank(graph, alpha=0.85, tol=1e-12, max_iter=300, weight=None)
    expected = np.array([expected[v] for v in range(len(graph))])
    for size, partitioner, values in _each(runs, name, "pagerank"):
        assert np.abs(values - expected).sum() < 1e-8, (size, partitioner)
    for key in ("pagerank", "pagerank_nocombiner"):
        reference = runs[1][1][f"{name}/range/pagerank"]
        for size, partitioner, values in _each(runs, name, key):
            assert np.abs(values - reference).sum() < 1e-12, (key, size, partitioner)


@pytest.mark.parametrize("name", GRAPHS)
def test_sssp_matches_dijkstra_exactly(runs, name):
    """With the default window, Bellman-Ford's (every pending vertex sends) and a narrow one: the
    same distances; an explicit window relaxes the same vertices in every layout, so the supersteps
    agree too. The weights added in the fused gather or by a message per edge (``edge_message``):
    the same distances and supersteps. Relaxing each rank's own edges after 2 supersteps: the same
    distances; at P = 1 by range (every edge local) the search then ends in one more superstep."""
    graph = runs[0][name]
    lengths = nx.single_source_dijkstra_path_length(graph, 0, weight="weight")
    expected = np.array([lengths.get(v, np.inf) for v in range(len(graph))])
    for key in ("sssp", "sssp_bellman_ford", "sssp_narrow", "sssp_per_edge", "sssp_local"):
        for size, partitioner, values in _each(runs, name, key):
            assert np.array_equal(values, expected), (key, size, partitioner)
    for key in ("sssp_bellman_ford", "sssp_narrow"):
        supersteps = {int(runs[1][size][f"{name}/{layout}/{key}/supersteps"]) for size in SIZES for layout in LAYOUTS}
        assert len(supersteps) == 1, (key, supersteps)
    for size in SIZES:
        for layout in LAYOUTS:
            per_edge, fused = (runs[1][size][f"{name}/{layout}/{key}/supersteps"]
                               for key in ("sssp_per_edge", "sssp_narrow"))
            assert per_edge == fused, (size, layout)
    one_rank = runs[1][1]
    assert one_rank[f"{name}/range/sssp_local/supersteps"] <= 3  # 2, then one that relaxes every edge
    if name == "ladder":
        assert one_rank[f"{name}/range/sssp_bellman_ford/supersteps"] > 100


@pytest.mark.parametrize("name", ["hub", "powerlaw", "ladder"])
def test_sssp_without_weights_matches_networkx_hop_counts_exactly(runs, name):
    """Without /graph/weights every edge adds 1.0: sssp then sends dist + 1 through the fused gather
    (no message per edge), and gives networkx's unweighted shortest-path lengths."""
    lengths = nx.single_source_shortest_path_length(runs[0][name], 0)
    expected = np.array([float(lengths.get(v, np.inf)) for v in range(len(runs[0][name]))])
    assert np.isfinite(expected).sum() > 10
    for size, partitioner, values in _each(runs, name, "sssp_unweighted"):
        assert values.dtype == np.float64 and np.array_equal(values, expected), (size, partitioner)


def test_sssp_adds_the_weights_in_the_fused_gather_with_or_without_weights(tmp_path):
    import scipy.sparse as sp
    from scipy.sparse.csgraph import dijkstra

    from pregel.comm import Comm
    from pregel.job import run_job
    from vertex_programs import ShortestPaths

    indptr, indices = generate_graph("powerlaw", 200, 3, seed=4)
    rng = np.random.default_rng(4)
    for weights in (None, rng.uniform(0.5, 2.0, len(indices)).astype(np.float32)):
        program = ShortestPaths(0)
        report = run_job(Comm(), GraphData(indptr, indices, weights), program, tmp_path / "d.h5", algorithm="sssp")
        assert not program.per_edge
        data = np.ones(len(indices)) if weights is None else weights.astype(np.float64)
        expected = dijkstra(sp.csr_matrix((data, indices, indptr), shape=(200, 200)), indices=0)
        assert np.isfinite(expected).sum() > 10 and np.array_equal(report.values, expected)


def test_a_program_with_an_unknown_weight_op_is_refused_before_a_gather(tmp_path):
    from pregel.comm import Comm
    from pregel.job import run_job
    from vertex_programs import ShortestPaths

    class MaxPlus(ShortestPaths):
        weight_op = "max"

    indptr, indices = generate_graph("powerlaw", 50, 3, seed=1)
    with pytest.raises(ValueError, match="weight_op must be one of 'mul', 'add'; got 'max'"):
        run_job(Comm(), GraphData(indptr, indices), MaxPlus(0), tmp_path / "d.h5", algorithm="sssp")
    assert not (tmp_path / "d.h5").exists()


@pytest.mark.parametrize("name", GRAPHS)
def test_bfs_matches_networkx_exactly(runs, name):
    graph = runs[0][name]
    hops = nx.single_source_shortest_path_length(graph, 0)
    expected = np.array([hops.get(v, -1) for v in range(len(graph))])
    for key in ("bfs", "bfs_local"):  # the second relaxes each rank's own edges after 2 supersteps
        for size, partitioner, values in _each(runs, name, key):
            assert values.dtype == np.int64 and np.array_equal(values, expected), (key, size, partitioner)
    assert runs[1][1][f"{name}/range/bfs_local/supersteps"] <= 3


@pytest.mark.parametrize("name", GRAPHS)
def test_wcc_matches_networkx_exactly(runs, name):
    graph = runs[0][name]
    parts = nx.weakly_connected_components(graph) if graph.is_directed() else nx.connected_components(graph)
    expected = np.empty(len(graph), dtype=np.int64)
    for part in parts:
        expected[list(part)] = min(part)
    for key in ("wcc", "wcc_nocombiner"):
        for size, partitioner, values in _each(runs, name, key):
            assert np.array_equal(values, expected), (key, size, partitioner)
            # labels jump along their pointers: about log2 of the component's size, where min-labels
            # alone take its diameter (the ladder's: 300)
            assert runs[1][size][f"{name}/{partitioner}/{key}/supersteps"] <= 20, (key, size, partitioner)


@pytest.mark.parametrize("name", GRAPHS)
def test_halted_vertices_compute_again_when_a_message_arrives(runs, name):
    """A vertex computes in superstep s iff it is active (first reached: BFS level s) or some
    in-neighbour sends in s (in-neighbours send exactly at their own BFS level)."""
    graph = runs[0][name]
    digraph = graph if graph.is_directed() else graph.to_directed()
    level = nx.single_source_shortest_path_length(digraph, 0)
    expected = np.zeros(len(graph))
    for v in digraph:
        steps = {level[u] for u in digraph.predecessors(v) if u in level}
        if v in level:
            steps.add(level[v])
        expected[v] = len(steps)
    for size, partitioner, values in _each(runs, name, "compute_counter"):
        assert np.array_equal(values, expected), (size, partitioner)


@pytest.mark.parametrize("name", GRAPHS)
def test_edge_message_reads_the_global_ids_of_the_senders_edges(runs, name):
    """In a superstep in which only some vertices send, ``edge_message`` gets the senders' edges only,
    and ``ctx.edge_src``/``ctx.edge_dst`` name exactly those edges (hub and ghost edges included)."""
    graph = runs[0][name]
    expected = np.full(len(graph), np.inf)
    for u, v in (graph if graph.is_directed() else graph.to_directed()).edges:  # the file has both ways
        if u % 2 == 0:
            expected[v] = min(expected[v], u * 1e6 + v)
    assert np.isfinite(expected).any() and np.isinf(expected).any()
    for size, partitioner, values in _each(runs, name, "senders_edge_ids"):
        assert np.array_equal(values, expected), (size, partitioner)


def test_aggregators_and_master_stop(runs):
    graph = runs[0]["powerlaw"]
    edges, n = graph.number_of_edges(), len(graph)
    for size, partitioner, values in _each(runs, "powerlaw", "aggregates"):
        # rows: [degree sum, max id, min id, superstep]; the master stops after superstep 2
        assert values.shape == (n, 4)
        assert np.all(values[:, :3] == [edges, n - 1, 0]), (size, partitioner)
        assert np.all(values[:, 3] == 2)
        assert runs[1][size][f"powerlaw/{partitioner}/aggregates/supersteps"] == 3


@pytest.mark.parametrize("combiner", ["sum", "min", "max", "mean", "none"])
def test_messages_to_arbitrary_vertices(runs, combiner):
    n = len(runs[0]["hub"])
    ids = np.arange(n)
    target, value = (7 * ids + 3) % n, ids + 1.0
    expected = np.full(n, np.nan)
    reduce = {"sum": np.add, "none": np.add, "min": np.fmin, "max": np.fmax}.get(combiner)
    if combiner == "mean":
        expected = np.bincount(target, value, n) / np.bincount(target, minlength=n)
        expected[np.bincount(target, minlength=n) == 0] = np.nan
    else:
        start = np.where(combiner in ("sum", "none"), 0.0, np.nan)
        expected[np.unique(target)] = start
        reduce.at(expected, target, value)
    for size, partitioner, values in _each(runs, "hub", f"send_{combiner}"):
        np.testing.assert_allclose(values, expected, rtol=1e-12, err_msg=f"{size} {partitioner}")


@pytest.mark.parametrize("name", ("hub", "powerlaw"))
@pytest.mark.parametrize("combiner", ("sum", "mean", "max", "min"))
def test_wide_messages_a_column_at_a_time_equal_whole_rows(runs, name, combiner):
    """[n, 5] rows from some senders along the edges and from everyone by send_to, combined per
    column: against NumPy over the edges, and a superstep sliced a column at a time
    (``pregel.column_slices``) equal to the whole rows bit for bit, at every P and layout."""
    graph = runs[0][name]
    n = graph.number_of_nodes()
    ids = np.arange(n)
    rows = wide_rows(ids).astype(np.float64)
    edges = np.array(list(graph.edges()), dtype=np.int64).reshape(-1, 2)
    edges = edges[edges[:, 0] % 3 != 0]  # only these sources send along their edges
    receivers = np.concatenate([edges[:, 1], (7 * ids + 3) % n])
    values = np.concatenate([rows[edges[:, 0]], 2 * rows[ids]])
    counts = np.bincount(receivers, minlength=n)
    if combiner in ("sum", "mean"):
        expected = np.zeros((n, 5))
        np.add.at(expected, receivers, values)
        if combiner == "mean":
            expected /= np.maximum(counts, 1)[:, None]
    else:
        expected = np.full((n, 5), -np.inf if combiner == "max" else np.inf)
        (np.maximum if combiner == "max" else np.minimum).at(expected, receivers, values)
    for size, layout, whole in _each(runs, name, f"wide_{combiner}"):
        np.testing.assert_allclose(whole, expected, rtol=1e-5, atol=1e-5, err_msg=f"{size} {layout}")
        sliced = runs[1][size][f"{name}/{layout}/wide_{combiner}_sliced"]
        assert np.array_equal(sliced, whole), (size, layout)


@pytest.mark.parametrize("name", GRAPHS)
def test_fetch_reads_rows_from_their_owners(runs, name):
    n = len(runs[0][name])
    ids = np.arange(n)
    state = np.stack([3.0 * ids, ids + 0.5], axis=1)
    last = np.where(ids % 5 == 0, state[(n - 1 - ids), 1], np.nan)
    expected = np.column_stack([state[(7 * ids + 3) % n], state[ids // 2, 0], last])
    for size, partitioner, values in _each(runs, name, "fetch"):
        assert np.array_equal(values, expected, equal_nan=True), (size, partitioner)


@pytest.mark.parametrize("name", GRAPHS)
def test_mean_combiner(runs, name):
    graph = runs[0][name]
    digraph = graph if graph.is_directed() else graph.to_directed()
    expected = np.array([np.mean(list(digraph.predecessors(v))) if digraph.in_degree(v) else 0.0
                         for v in range(len(graph))])
    # networkx merges parallel edges; the test graphs have none except undirected self-loops,
    # which the file stores once
    for size, partitioner, values in _each(runs, name, "mean_neighbours"):
        np.testing.assert_allclose(values, expected, rtol=1e-12, err_msg=f"{size} {partitioner}")


def test_float32_matrix_state_with_edge_weights(runs):
    graph = runs[0]["features"]
    n = graph.num_nodes
    src = np.repeat(np.arange(n), np.diff(graph.indptr))
    expected = np.zeros((n, 5))
    np.add.at(expected, graph.indices, graph.weights[:, None].astype(np.float64) * graph.features[src])
    for size, partitioner, values in _each(runs, "features", "feature_sum"):
        assert values.dtype == np.float32 and values.shape == (n, 5)
        np.testing.assert_allclose(values, expected, rtol=1e-5, atol=1e-5, err_msg=f"{size} {partitioner}")


def test_softmax_combiner_partial_attention(runs):
    graph = runs[0]["features"]
    n, x = graph.num_nodes, graph.features[:, :4].astype(np.float64)
    src = np.repeat(np.arange(n), np.diff(graph.indptr))

    def leaky(v):
        return np.where(v > 0, v, 0.2 * v)

    expected = np.zeros((n, 4))
    for i in range(n):  # the oracle loops over receivers: plain softmax per head
        senders = src[(graph.indices == i) & (src != i)]
        logits = np.vstack([leaky(x[senders, :2] + x[i, 2:]), leaky(x[i, :2] + x[i, 2:])])
        values = np.vstack([x[senders], x[i][None]]).reshape(-1, 2, 2)
        weights = np.exp(logits - logits.max(axis=0))
        weights /= weights.sum(axis=0)
        expected[i] = (weights[:, :, None] * values).sum(axis=0).reshape(4)
    for size, layout, values in _each(runs, "features", "attention"):
        np.testing.assert_allclose(values, expected, rtol=1e-10, atol=1e-12, err_msg=f"{size} {layout}")


def test_in_memory_graph_equals_file(runs):
    _, results = runs
    for size in SIZES:
        np.testing.assert_allclose(results[size]["hub/memory/pagerank"],
                                   results[size]["hub/range/pagerank"], rtol=0, atol=1e-15)


def test_integer_results_identical_across_ranks_and_partitioners(runs):
    _, results = runs
    for name in GRAPHS:
        for key in ("sssp", "bfs", "wcc", "compute_counter"):
            reference = results[1][f"{name}/range/{key}"]
            for size, partitioner, values in _each(runs, name, key):
                assert np.array_equal(values, reference), (name, key, size, partitioner)


def test_built_in_analytics_do_not_load_node_features(tmp_path):
    # PageRank, SSSP, BFS and WCC never read ctx.features, yet /nodes/features were loaded for them:
    # 0.6 GB of PageRank's 2.5 GB peak on a 10M-vertex graph with 16 features. A program that reads
    # them (the default, uses_features = True) still gets them; results match networkx either way
    from pregel.comm import Comm
    from pregel.job import run_job
    from pregel.program import VertexProgram
    from vertex_programs import PageRank

    seen = {}

    class Recording(PageRank):
        def init(self, ctx):
            seen[type(self).__name__] = ctx.features
            return super().init(ctx)

    class ReadsFeatures(Recording):
        uses_features = True

    indptr, indices = generate_graph("powerlaw", 300, 4, seed=2)
    features = np.random.default_rng(0).normal(size=(300, 3)).astype(np.float32)
    graph = GraphData(indptr, indices, features=features)
    reference = nx.DiGraph()
    reference.add_nodes_from(range(300))
    reference.add_edges_from(zip(np.repeat(np.arange(300), np.diff(indptr)).tolist(), indices.tolist()))
    expected = nx.pagerank(reference, tol=1e-10)
    for cls in (Recording, ReadsFeatures):
        report = run_job(Comm(), graph, cls(tol=1e-10), tmp_path / f"{cls.__name__}.h5", algorithm="pagerank")
        assert np.allclose(report.values, [expected[v] for v in range(300)], rtol=0, atol=1e-12)
    assert seen["Recording"] is None
    assert np.array_equal(seen["ReadsFeatures"], features)
    assert VertexProgram.uses_features and not any(
        cls.uses_features for cls in (PageRank, __import__("vertex_programs").ShortestPaths,
                                      __import__("vertex_programs").BreadthFirst,
                                      __import__("vertex_programs").WeakComponents))
