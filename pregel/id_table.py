"""Integer vertex ids numbered through a table over their range, in O(E) with no hashing.

A table's integer ids are often dense: 0..N-1, or offset, or with few gaps. Then a lookup table over
``[lo, hi]`` (``table[v - lo]`` = the position of id v, -1 where v is not an id) numbers every edge
endpoint with one read, where a hash lookup (Arrow's ``index_in``) misses the cache on every id of a
10M-id set. ``pregel.tables`` uses it when the range is at most ``RANGE_PER_ID`` times the ids it
must hold, and Arrow's hashing otherwise (and for string ids); ``unique_inverse`` (the load's ghost ids,
``pregel.fetch``'s requests) when the range is at most ``RANGE_PER_ID`` times the values, and a sort
otherwise.
"""

import numpy as np
from numba import njit

from kernels._numba_start import start as start_numba

start_numba()

#: a table is used when the id range is at most this many times the ids (or edge endpoints) it serves:
#: 4 bytes an entry, so at most 16 bytes a node id, or 4 bytes an edge
RANGE_PER_ID = 4
#: the widest range a table covers: its entries are int32 positions
_MAX_TABLE = 2**31 - 1


@njit(cache=True)
def _bounds(values, lo, hi):
    """(min(lo, values), max(hi, values)). values: [k] int64."""
    for k in range(values.shape[0]):
        v = values[k]
        if v < lo:
            lo = v
        if v > hi:
            hi = v
    return lo, hi


@njit(cache=True)
def _mark(values, lo, table):
    """table[v - lo] = 0 for each v of values [k] int64 (the ids in use). table: [range] int32."""
    for k in range(values.shape[0]):
        table[values[k] - lo] = 0


@njit(cache=True)
def _positions(values, lo, table, out):
    """out[k] = table[values[k] - lo]; returns the first k whose id is not in the table (outside its range,
    or -1 there), else -1. values: [k] int64; table: [range] int32; out: [k] int32."""
    size = table.shape[0]
    for k in range(values.shape[0]):
        i = values[k] - lo
        if i < 0 or i >= size or table[i] < 0:
            return k
        out[k] = table[i]
    return -1


def id_bounds(chunks: list) -> tuple[int, int] | None:
    """(smallest, largest) id over ``chunks`` (int64 arrays), or None when they are all empty."""
    lo, hi = np.iinfo(np.int64).max, np.iinfo(np.int64).min
    for chunk in chunks:
        lo, hi = _bounds(chunk, lo, hi)
    return None if lo > hi else (int(lo), int(hi))


def used_ids_table(chunks: list, max_range: int) -> tuple[np.ndarray, np.ndarray, int] | None:
    """The distinct ids of ``chunks`` (int64 arrays) ascending, [N] int64, numbered 0..N-1 by a table:
    (ids, table [range] int32, lo); None when the range is over ``max_range`` or there are no ids."""
    bounds = id_bounds(chunks)
    if bounds is None or bounds[1] - bounds[0] + 1 > min(max_range, _MAX_TABLE):
        return None
    lo = bounds[0]
    table = np.full(bounds[1] - lo + 1, -1, np.int32)
    for chunk in chunks:
        _mark(chunk, np.int64(lo), table)
    present = np.flatnonzero(table == 0)
    table[present] = np.arange(len(present), dtype=np.int32)
    return present + lo, table, lo


def node_ids_table(node_ids: np.ndarray, max_range: int) -> tuple[np.ndarray, int] | None:
    """(table [range] int32: table[v - lo] = the row of id v in ``node_ids`` [N] int64 (distinct), -1
    where no row; lo); None when the range is over ``max_range``."""
    bounds = id_bounds([node_ids])
    if bounds is None or bounds[1] - bounds[0] + 1 > min(max_range, _MAX_TABLE):
        return None
    lo = bounds[0]
    table = np.full(bounds[1] - lo + 1, -1, np.int32)
    table[node_ids - lo] = np.arange(len(node_ids), dtype=np.int32)
    return table, lo


def positions(chunks: list, table: np.ndarray, lo: int) -> tuple[np.ndarray, int]:
    """(positions [E] int32 of the ids of ``chunks`` (int64 arrays, E ids in all) through ``table``; the
    row of the first id not in it, or -1 when all are)."""
    out = np.empty(sum(len(chunk) for chunk in chunks), np.int32)
    start = 0
    for chunk in chunks:
        bad = _positions(chunk, np.int64(lo), table, out[start:start + len(chunk)])
        if bad >= 0:
            return out, start + int(bad)
        start += len(chunk)
    return out, -1


class DistinctIds:
    """The distinct values of integers ``values`` [E] (``ids``: [U] int64, ascending), then each value's
    label once the ids have one (``labels_of``). Through a table over the values' range (``used_ids_table``,
    one pass to mark, one to look up: O(E + range)) when the range is at most ``RANGE_PER_ID`` times E,
    else by NumPy's sort (``np.unique(return_inverse=True)``, O(E log E))."""

    def __init__(self, values: np.ndarray):
        self.values = values
        built = used_ids_table([values], RANGE_PER_ID * len(values))
        if built is None:
            self.ids, inverse = np.unique(np.asarray(values, dtype=np.int64), return_inverse=True)
            self._inverse, self._table = inverse.reshape(-1), None
        else:
            self.ids, self._table, self._lo = built

    def positions(self) -> np.ndarray:
        """[E] the position of each value in ``ids`` (int32 through the table, else int64)."""
        if self._table is None:
            return self._inverse
        return positions([self.values], self._table, self._lo)[0]

    def labels_of(self, labels: np.ndarray) -> np.ndarray:
        """[E] ``labels[positions()]`` for labels [U] of the ids (integers); int32 through the table when
        the labels fit, else of the labels' dtype. Call it once: it writes the labels into the table."""
        if self._table is None or (len(labels) and int(labels.max()) > _MAX_TABLE):
            return labels[self.positions()]
        self._table[self.ids - self._lo] = labels
        return positions([self.values], self._table, self._lo)[0]


def unique_inverse(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(values, return_inverse=True)`` of integers [E] as (int64 [U], int32 or int64 [E]), by
    ``DistinctIds``."""
    distinct = DistinctIds(values)
    return distinct.ids, distinct.positions()
