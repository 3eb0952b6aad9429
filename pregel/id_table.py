"""Integer vertex ids numbered through a table over their range, in O(E) with no hashing.

A table's integer ids are often dense: 0..N-1, or offset, or with few gaps. Then a lookup table over
``[lo, hi]`` (``table[v - lo]`` = the position of id v, -1 where v is not an id) numbers every edge
endpoint with one read, where a hash lookup (Arrow's ``index_in``) misses the cache on every id of a
10M-id set. ``pregel.tables`` uses it when the range is at most ``RANGE_PER_ID`` times the ids it
must hold, and Arrow's hashing otherwise (and for string ids).
"""

import numpy as np
from numba import njit

from kernels._numba_start import start as start_numba

start_numba()

#: a table is used when the id range is at most this many times the ids (or edge endpoints) it serves:
#: 4 bytes an entry, so at most 16 bytes a node id, or 4 bytes an edge
RANGE_PER_ID = 4


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
    if bounds is None or bounds[1] - bounds[0] + 1 > max_range:
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
    if bounds is None or bounds[1] - bounds[0] + 1 > max_range:
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
