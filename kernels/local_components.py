"""Connected components of the edges among a rank's own rows: union-find over a CSR, once per run.

Weak components by min-label propagation take as many supersteps as the graph's diameter (1,999 on a
1000 x 1000 grid). Merging each rank's own block first, as block-centric systems do (Blogel, Giraph++),
leaves only the hops between blocks to supersteps. CPU only.
"""

import numpy as np
from numba import njit


@njit(cache=True, inline="always")
def _find(parent, i):
    """The root of ``i``, halving the path on the way."""
    while parent[i] != i:
        parent[i] = parent[parent[i]]
        i = parent[i]
    return i


@njit(cache=True)
def _union_rows(indptr, indices, parent, both_ways):
    """parent [R] (in place, starting as 0..R-1): each row's component root, the smallest row of its
    component, joining row r and column c for every edge whose column is a row (c < R); with
    ``both_ways`` only for c < r (each such edge is stored again at row c)."""
    num_rows = parent.shape[0]
    for r in range(num_rows):
        limit = r if both_ways else num_rows
        for e in range(indptr[r], indptr[r + 1]):
            c = indices[e]
            if c < limit:
                a, b = _find(parent, r), _find(parent, c)
                if a < b:
                    parent[b] = a
                elif b < a:
                    parent[a] = b
    for r in range(num_rows):
        parent[r] = _find(parent, r)


def local_components(indptr: np.ndarray, indices: np.ndarray, num_rows: int, both_ways: bool = False) -> np.ndarray:
    """[R] int64: for each row, the smallest row of its weakly connected component in the graph of
    the CSR's edges between rows (columns ≥ ``num_rows``, a rank's ghost rows, are left out).
    ``both_ways``: every edge between rows is stored in both directions (a symmetric program's
    in-edges), so each is read once, at its larger row: half the finds.

    indptr: [R + 1] int, indices: [E] int ≥ 0; R = ``num_rows``. Union-find with path halving, the
    smaller root kept: O(E α(R)), nothing of size E allocated.
    """
    indptr, indices = np.ascontiguousarray(indptr), np.ascontiguousarray(indices)
    if len(indptr) != num_rows + 1:
        raise ValueError(f"indptr must have num_rows + 1 = {num_rows + 1} entries; got {len(indptr)}")
    if len(indices) and indices.min() < 0:
        raise ValueError("indices must be non-negative")
    parent = np.arange(num_rows, dtype=np.int64)
    _union_rows(indptr, indices, parent, both_ways)
    return parent


def _local_components(indptr, indices, num_rows):
    """Reference twin of :func:`local_components`: ``scipy.sparse.csgraph.connected_components``
    of the edges between rows, then the smallest row of each component."""
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import connected_components

    indptr, indices = np.asarray(indptr), np.asarray(indices)
    rows = np.repeat(np.arange(num_rows), np.diff(indptr))
    keep = indices < num_rows
    graph = csr_matrix((np.ones(int(keep.sum())), (rows[keep], indices[keep])), shape=(num_rows, num_rows))
    _, labels = connected_components(graph, directed=True, connection="weak")
    smallest = np.full(labels.max() + 1 if num_rows else 0, num_rows, np.int64)
    np.minimum.at(smallest, labels, np.arange(num_rows))
    return smallest[labels]
