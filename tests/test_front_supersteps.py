"""Supersteps on a small front: the in-edges read by column (``kernels.by_column``) against their NumPy
twins and NumPy's own functions, and row-wise programs run on their front's rows alone
(``VertexProgram.rowwise``, ``HostPath.front``) against networkx, on graphs whose searches take
hundreds of supersteps. The same programs at P = 1, 2 and 3, and one whose state is a dict of which
the rows outside the front keep theirs (``compute_counter``), run in tests/test_engine.py (its ladder)."""

import networkx as nx
import numpy as np
import pytest

from kernels.by_column import _column_edges, column_edges, rows_of_positions
from mpi_scripts.engine_programs import ShortestPathsPerEdge
from pregel.comm import Comm
from pregel.convert import from_networkx
from pregel.edge_order import stable_order
from pregel.job import run_job
from pregel.rows import RowMask
from vertex_programs import BreadthFirst, ShortestPaths

NEVER = 10 ** 9  # supersteps before sssp relaxes locally: these tests count its supersteps on fronts


def _by_column(indices, num_columns):
    """(col_indptr, positions) of ``indices`` grouped by column, as ``EdgeIds.sent_positions`` builds them."""
    positions, counts = stable_order(indices, num_columns)
    return np.concatenate([[0], np.cumsum(counts)]), positions


@pytest.mark.parametrize("num_columns", [1, 63, 64, 1000])
def test_column_edges_match_their_twin_and_numpy(num_columns):
    rng = np.random.default_rng(num_columns)
    indices = rng.integers(0, num_columns, 5000)
    indices[:300] = 0  # a column with many edges
    col_indptr, positions = _by_column(indices, num_columns)
    for count in (0, 1, num_columns // 2, num_columns):
        columns = rng.choice(num_columns, count, replace=False)
        got = column_edges(col_indptr, positions, columns)
        assert np.array_equal(got, _column_edges(indices, columns))
        sent = np.zeros(num_columns, bool)
        sent[columns] = True
        assert np.array_equal(got, np.flatnonzero(sent[indices]))  # numpy's own: the edges whose column sent


def test_column_edges_refuse_columns_out_of_range():
    col_indptr, positions = _by_column(np.array([0, 2, 1]), 3)
    with pytest.raises(ValueError, match=r"columns must lie in \[0, 3\)"):
        column_edges(col_indptr, positions, np.array([3]))


def test_rows_of_positions_match_searchsorted():
    rng = np.random.default_rng(4)
    degrees = rng.poisson(3, 2000)
    degrees[[0, 1, 500, 1999]] = 0  # empty rows, the last among them
    degrees[7] = 400  # a long row
    indptr = np.concatenate([[0], np.cumsum(degrees)])
    for count in (0, 1, 10, 3000, int(indptr[-1])):
        positions = np.sort(rng.choice(int(indptr[-1]), count, replace=False))
        assert np.array_equal(rows_of_positions(indptr, positions), np.searchsorted(indptr, positions, side="right") - 1)
    with pytest.raises(ValueError, match="must ascend"):
        rows_of_positions(indptr, np.array([5, 3]))


def test_a_row_mask_holds_exactly_the_rows_of_its_last_call():
    rng = np.random.default_rng(2)
    mask = RowMask(500)
    for count in (10, 0, 300, 499, 1, 40):
        rows = np.sort(rng.choice(500, count, replace=False))
        got = mask.of(rows)
        assert got.shape == (500,) and got.dtype == bool
        assert np.array_equal(got, np.isin(np.arange(500), rows))


def _grid(side: int, seed: int) -> nx.Graph:
    """A side x side grid with ids shuffled (vertex 0 at a corner) and float32 weights."""
    rng = np.random.default_rng(seed)
    order = np.concatenate([[0], 1 + rng.permutation(side * side - 1)])
    grid = nx.Graph()
    grid.add_nodes_from(range(side * side))  # in id order: the file numbers them in the graph's order
    for u, v in nx.grid_2d_graph(side, side).edges:
        grid.add_edge(int(order[u[0] * side + u[1]]), int(order[v[0] * side + v[1]]),
                      weight=float(np.float32(rng.uniform(0.1, 2.0))))
    return grid


class _Recorded:
    """Mixed into a program: records how many rows each ``apply`` call saw."""

    def apply(self, ctx, state, gathered):
        self.rows_seen.append(ctx.num_local)
        assert len(ctx.global_ids) == ctx.num_local == len(ctx.received)
        return super().apply(ctx, state, gathered)


class _SomeStop(BreadthFirst):
    """BFS in which the vertices whose id is 3 modulo 7 never forward: senders chosen from ``ctx.global_ids``."""

    def message(self, ctx, dist):
        return dist + 1.0, ctx.global_ids % 7 != 3


@pytest.mark.parametrize("program, oracle", [
    (BreadthFirst(0, local_after=NEVER), lambda g: nx.single_source_shortest_path_length(g, 0)),
    (ShortestPaths(0, local_after=NEVER), lambda g: nx.single_source_dijkstra_path_length(g, 0, weight="weight")),
    (ShortestPaths(0, delta=np.inf, local_after=NEVER),
     lambda g: nx.single_source_dijkstra_path_length(g, 0, weight="weight")),
    (ShortestPathsPerEdge(0), lambda g: nx.single_source_dijkstra_path_length(g, 0, weight="weight")),
    (_SomeStop(0), lambda g: nx.single_source_shortest_path_length(
        g.edge_subgraph([(u, v) for u, v in g.edges if u % 7 != 3]).copy(), 0)),
], ids=["bfs", "sssp", "sssp_bellman_ford", "sssp_per_edge", "some_stop"])
def test_rowwise_programs_run_on_their_front_and_match_networkx(tmp_path, program, oracle):
    grid = _grid(40, 1)
    grid.add_edge(1600, 1601, weight=1.0)  # a second component
    n = len(grid)
    recorded = type(type(program).__name__, (_Recorded, type(program)), {"rows_seen": []})
    program.__class__ = recorded
    report = run_job(Comm(), from_networkx(grid), program, tmp_path / "out.h5", algorithm="x")
    lengths = oracle(grid.to_directed())
    expected = np.array([lengths.get(v, np.inf) for v in range(n)])
    if isinstance(program, BreadthFirst):
        expected = np.where(np.isinf(expected), -1, expected).astype(np.int64)
    assert np.array_equal(report.values, expected)
    fronts = sum(rows < n for rows in program.rows_seen)  # supersteps that ran on their front's rows
    assert min(program.rows_seen) < n / 10 and max(program.rows_seen) <= n
    assert fronts > report.result.supersteps / 2 and report.result.supersteps > 70



def test_a_front_superstep_counts_the_edges_it_read(tmp_path):
    """``edges_processed`` of a superstep on its front is the number of the senders' edges (a BFS's
    senders at superstep s are the vertices at level s: networkx's levels and degrees); a superstep
    over every row counts every edge."""
    grid = _grid(40, 3)
    report = run_job(Comm(), from_networkx(grid), BreadthFirst(0, local_after=NEVER), tmp_path / "out.h5",
                     algorithm="bfs")
    level = nx.single_source_shortest_path_length(grid, 0)
    senders_edges = np.zeros(report.result.supersteps, np.int64)
    for v, s in level.items():
        senders_edges[s] += grid.degree(v)
    counted = np.array([step.edges_processed for step in report.result.stats])
    every_edge = 2 * grid.number_of_edges()
    front = counted != every_edge
    assert front.sum() > report.result.supersteps / 2
    assert np.array_equal(counted[front], senders_edges[front])


class _CountedSenders(ShortestPaths):
    """sssp that records how many vertices relax their edges in each superstep."""

    def message(self, ctx, dist):
        values, senders = super().message(ctx, dist)
        self.senders.append(int(np.count_nonzero(senders)))
        return values, senders


def _delta_stepping(matrix, source: int, delta: float) -> tuple[np.ndarray, list[int]]:
    """NumPy twin of sssp's supersteps on ``matrix`` (scipy CSR [N, N] of weights): the distances [N]
    and, per superstep, how many vertices relaxed their edges (the pending ones within ``delta`` of
    the nearest pending distance)."""
    n = matrix.shape[0]
    dist, pending, senders = np.full(n, np.inf), np.zeros(n, bool), []
    dist[source], pending[source] = 0.0, True
    rows = np.repeat(np.arange(n), np.diff(matrix.indptr))
    while pending.any():
        sending = pending & (dist <= dist[pending].min() + delta)
        senders.append(int(sending.sum()))
        relaxed = sending[rows]
        new = dist.copy()
        np.minimum.at(new, matrix.indices[relaxed], dist[rows[relaxed]] + matrix.data[relaxed])
        pending = (pending & ~sending) | (new < dist)
        dist = new
    return dist, senders


def test_sssp_relaxes_the_edges_of_the_vertices_within_its_window_as_delta_stepping_does(tmp_path):
    """Superstep by superstep, the vertices that relax their edges are those of a NumPy twin of
    delta-stepping with a sliding window; all windows give Dijkstra's distances; and the default
    window (5 mean weights) relaxes far fewer edges than Bellman-Ford in about as many supersteps."""
    import scipy.sparse as sp
    from scipy.sparse.csgraph import dijkstra

    grid = _grid(100, 5)  # Bellman-Ford's waste grows with the distances: 4.2 relaxations a vertex here
    matrix = sp.csr_matrix(nx.to_scipy_sparse_array(grid.to_directed(), nodelist=range(len(grid)), weight="weight",
                                                     dtype=np.float64))
    expected = dijkstra(matrix, indices=0)
    relaxed = {}
    for delta in (0.0, 0.3, 2.0, np.inf):
        program = _CountedSenders(0, delta=delta, local_after=NEVER)
        program.senders = []
        report = run_job(Comm(), from_networkx(grid), program, tmp_path / "out.h5", algorithm="sssp")
        window = 5 * matrix.data.mean() if delta == 0 else delta
        assert program.window == pytest.approx(window, rel=1e-12)
        twin_dist, twin_senders = _delta_stepping(matrix, 0, window)
        assert np.array_equal(report.values, expected) and np.array_equal(twin_dist, expected)
        assert program.senders == twin_senders and report.result.supersteps == len(twin_senders)
        relaxed[delta] = (sum(twin_senders), report.result.supersteps)
    bellman_ford, default = relaxed[np.inf], relaxed[0.0]
    assert default[0] < bellman_ford[0] / 2 and default[1] <= 1.1 * bellman_ford[1], relaxed
