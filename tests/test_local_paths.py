"""``kernels.local_paths``: the out-edges among a rank's rows, and Dijkstra from seeds over them, against
their NumPy twin (Bellman-Ford rounds), scipy's ``dijkstra`` and a brute-force transpose."""

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.sparse.csgraph import dijkstra

from kernels.local_paths import _relax_locally, local_edge_count, local_out_edges, relax_locally


def _in_csr(rng, rows: int, ghosts: int, edges: int, weighted: bool = True):
    """A random in-edge CSR over ``rows`` destinations whose columns are rows or ghosts: (indptr
    [R + 1], indices [E] int32, weights [E] float32 or None)."""
    dst = np.sort(rng.integers(0, rows, edges))
    indices = rng.integers(0, rows + ghosts, edges).astype(np.int32)
    indptr = np.searchsorted(dst, np.arange(rows + 1)).astype(np.int64)
    weights = rng.uniform(0.1, 2.0, edges).astype(np.float32) if weighted else None
    return indptr, indices, weights


@pytest.mark.parametrize("weighted", [True, False], ids=["weighted", "unit"])
def test_local_out_edges_are_the_edges_between_rows_by_source(weighted):
    rng = np.random.default_rng(0)
    indptr, indices, weights = _in_csr(rng, 50, 20, 400, weighted)
    out_indptr, targets, out_weights = local_out_edges(indptr, indices, weights, 50)
    local = np.flatnonzero(indices < 50)
    by_source = local[np.argsort(indices[local], kind="stable")]  # edges in CSR order within a source
    np.testing.assert_array_equal(np.repeat(np.arange(50), np.diff(out_indptr)), indices[by_source])
    np.testing.assert_array_equal(targets, np.repeat(np.arange(50), np.diff(indptr))[by_source])
    if weights is not None:
        np.testing.assert_array_equal(out_weights, weights[by_source])
    assert targets.dtype == np.int32 and (out_weights is None) == (weights is None)
    assert local_edge_count(indices, 50) == len(local) > 0 and local_edge_count(indices, 0) == 0


@pytest.mark.parametrize("weighted", [True, False], ids=["weighted", "unit"])
def test_relax_locally_reaches_the_fixed_point_of_its_twin_bit_for_bit(weighted):
    """Seeds with distances already lowered (as a superstep leaves them), the rest relaxed: the
    same distances as Bellman-Ford rounds over every edge."""
    rng = np.random.default_rng(1)
    indptr, indices, weights = _in_csr(rng, 300, 30, 1500, weighted)
    local = local_out_edges(indptr, indices, weights, 300)
    dist = np.full(300, np.inf)
    dist[[4, 17]] = 0.0
    _relax_locally(*local, dist, None)  # a fixed point: every edge relaxed
    seeds = np.array([9, 120, 250])
    dist[seeds] = dist[seeds] / 4  # dropped (inf stays inf: 9 may be unreachable)
    dist[250] = 0.5
    twin = dist.copy()
    assert _relax_locally(*local, twin, None) > 2  # the twin needs several rounds
    settled = relax_locally(*local, dist, seeds)
    np.testing.assert_array_equal(dist, twin)
    assert 0 < settled < 300


def test_relax_locally_from_one_source_gives_scipys_dijkstra():
    rng = np.random.default_rng(2)
    indptr, indices, weights = _in_csr(rng, 500, 0, 4000)
    dist = np.full(500, np.inf)
    dist[0] = 0.0
    relax_locally(*local_out_edges(indptr, indices, weights, 500), dist, np.array([0]))
    dst = np.repeat(np.arange(500), np.diff(indptr))
    order = np.lexsort((dst, indices))  # by source: a CSR that keeps parallel edges (COO would add them)
    by_source = np.searchsorted(indices[order], np.arange(501))
    matrix = sp.csr_matrix((weights[order].astype(np.float64), dst[order], by_source), shape=(500, 500))
    np.testing.assert_array_equal(dist, dijkstra(matrix, indices=0))


def test_relax_locally_grows_its_heap():
    """More rows waiting than the first heap holds (1,024): a star whose centre reaches 5,000 rows,
    then a path on from each of them."""
    n = 10000
    # rows 1..5000 have an in-edge from 0; row 5000 + k one from row k
    indptr = np.concatenate([[0], np.arange(n)]).astype(np.int64)
    indices = np.concatenate([np.zeros(5000), np.arange(1, 5000)]).astype(np.int32)
    weights = np.linspace(1.0, 2.0, n - 1).astype(np.float32)
    local = local_out_edges(indptr, indices, weights, n)
    dist = np.full(n, np.inf)
    dist[0] = 0.0
    twin = dist.copy()
    _relax_locally(*local, twin, None)
    assert relax_locally(*local, dist, np.array([0])) == n
    np.testing.assert_array_equal(dist, twin)
    assert np.isfinite(dist).all()
