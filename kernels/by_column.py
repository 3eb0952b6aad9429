"""The in-edge CSR read by column: the edges that leave a few columns, without a pass over every edge.

A receiver's gather reads its in-edges by row (destination). When only a few columns (sources) sent, a
pass over every row still checks every edge. Once the edge positions are grouped by column (a stable
counting sort of the columns, ``pregel.edge_order.stable_order``, built once), ``column_edges`` lists the
edges of any set of columns in time proportional to their number: the transpose that
direction-switching traversals (Ligra's push direction) keep beside the row-ordered edges. CPU only.
"""

import numpy as np
from numba import njit


@njit(cache=True)
def _copy_column_edges(col_indptr, positions, columns, out):
    """out [k] (in place): the positions of the edges of ``columns`` [m], column after column."""
    k = 0
    for j in range(columns.shape[0]):
        c = columns[j]
        for i in range(col_indptr[c], col_indptr[c + 1]):
            out[k] = positions[i]
            k += 1


@njit(cache=True)
def _rows_of_sorted(indptr, positions, rows):
    """rows [k] (in place): the CSR row of each of ``positions`` [k] (ascending), by a forward walk
    that gallops over rows without edges to look at."""
    num_rows = indptr.shape[0] - 1
    r = 0
    for j in range(positions.shape[0]):
        p = positions[j]
        if indptr[r + 1] <= p:  # find the last row starting at or before p, after r
            step = 1
            low = r + 1
            while low + step < num_rows and indptr[low + step] <= p:
                low += step
                step *= 2
            high = min(low + step, num_rows)  # indptr[high] > p or high == num_rows
            while high - low > 1:
                middle = (low + high) // 2
                if indptr[middle] <= p:
                    low = middle
                else:
                    high = middle
            r = low
        rows[j] = r


def rows_of_positions(indptr: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """[k] int64 the CSR row of each edge position in ``positions`` [k] (ascending, in [0, E));
    ``indptr`` [R + 1]. The same as ``np.searchsorted(indptr, positions, side='right') - 1``, in one
    forward walk."""
    positions = np.ascontiguousarray(positions)
    if len(positions) and (positions[0] < 0 or positions[-1] >= indptr[-1] or np.any(np.diff(positions) < 0)):
        raise ValueError(f"positions must ascend within [0, {int(indptr[-1])})")
    rows = np.empty(len(positions), np.int64)
    _rows_of_sorted(np.ascontiguousarray(indptr), positions, rows)
    return rows


def column_edges(col_indptr: np.ndarray, positions: np.ndarray, columns: np.ndarray) -> np.ndarray:
    """[k] int64 positions, ascending (the CSR's order), of every edge whose column is in ``columns``.

    col_indptr [C + 1] int64: where each column's run of ``positions`` starts; positions [E]: the edge
    positions grouped by column, ascending within each (``stable_order`` of the columns); columns: [m]
    int distinct columns in [0, C). Time O(m + k log k).
    """
    columns = np.ascontiguousarray(columns, dtype=np.int64)
    if len(columns) and (columns.min() < 0 or columns.max() >= len(col_indptr) - 1):
        raise ValueError(f"columns must lie in [0, {len(col_indptr) - 1})")
    out = np.empty(int((col_indptr[columns + 1] - col_indptr[columns]).sum()), np.int64)
    _copy_column_edges(col_indptr, positions, columns, out)
    out.sort()
    return out


def _column_edges(indices, columns):
    """NumPy reference twin of :func:`column_edges`, from the CSR's ``indices`` [E] directly."""
    return np.flatnonzero(np.isin(np.asarray(indices), np.asarray(columns)))
