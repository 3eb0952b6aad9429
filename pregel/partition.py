"""Which rank owns which vertex.

Two partitioners, chosen by name (``PARTITIONERS``):

* ``range`` (default) — contiguous id ranges balanced by edge count (each vertex weighs
  ``1 + out-degree``), found by binary search over ``indptr`` without reading it whole;
* ``hash`` — a multiplicative (Fibonacci) hash of the id, for graphs whose ids cluster hubs.

Each rank reads a contiguous, balanced slice of the file (``read_ranges``); edges and vertex
data then move to their owners, so any partitioner can be plugged in by giving ``owner`` and
``owned``.
"""

import numpy as np
from numba import njit

from kernels._numba_start import start as start_numba
from kernels.bits import bit_words_of, bits_at

start_numba()

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def balanced_ranges(indptr_at, num_nodes: int, num_edges: int, parts: int) -> np.ndarray:
    """Boundaries [parts + 1] of contiguous vertex ranges with about equal ``vertices + edges``.

    ``indptr_at(v)`` returns ``indptr[v]`` (an HDF5 dataset or an array both work); it is called
    O(parts · log N) times, so a billion-vertex ``indptr`` is never read whole.
    """
    total = num_nodes + num_edges
    bounds = np.zeros(parts + 1, dtype=np.int64)
    bounds[parts] = num_nodes
    for k in range(1, parts):
        target = total * k // parts
        lo, hi = int(bounds[k - 1]), num_nodes
        while lo < hi:  # smallest v with v + indptr[v] >= target
            mid = (lo + hi) // 2
            if mid + int(indptr_at(mid)) >= target:
                hi = mid
            else:
                lo = mid + 1
        bounds[k] = lo
    return bounds


class RangePartition:
    """Rank ``r`` owns the vertices ``[bounds[r], bounds[r + 1])``."""

    name = "range"

    def __init__(self, bounds: np.ndarray):
        self.bounds = np.asarray(bounds, dtype=np.int64)  # [size + 1]
        self.size = len(self.bounds) - 1

    def owner(self, ids: np.ndarray) -> np.ndarray:
        """Owning rank of each global id in ``[0, bounds[-1])``: [k] int32/int64 -> [k] int32
        (``np.searchsorted(bounds, ids, side="right") - 1`` in one pass, without converting ids)."""
        out = np.empty(len(ids), dtype=np.int32)
        _range_owner(np.ascontiguousarray(ids), self.bounds, out)
        return out

    def owned(self, rank: int) -> np.ndarray:
        """Global ids owned by ``rank``, ascending: [n_r] int64."""
        return np.arange(self.bounds[rank], self.bounds[rank + 1], dtype=np.int64)

    def owns(self, ids: np.ndarray, rank: int) -> np.ndarray:
        """[k] bool: whether ``rank`` owns each of the global ids [k]."""
        lo, hi = int(self.bounds[rank]), int(self.bounds[rank + 1])
        ids = np.asarray(ids)
        return (ids >= lo) & (ids < hi)

    def local_index(self, ids: np.ndarray, rank: int) -> np.ndarray:
        """Positions [k] in ``owned(rank)`` of global integer ids [k] that ``rank`` owns: ``ids``
        itself (any integer dtype) when ``rank`` owns from 0, do not write into it; else of the ids' dtype."""
        ids = np.asarray(ids)
        return ids if self.bounds[rank] == 0 else ids - int(self.bounds[rank])  # keeps int32 ids int32


class HashPartition:
    """Rank of vertex ``v`` = high bits of ``v · φ·2^64`` (Fibonacci hashing) modulo the ranks."""

    name = "hash"

    def __init__(self, num_nodes: int, size: int):
        self.num_nodes = num_nodes
        self.size = size
        self._owned = {}
        self._rank_index = {}

    def owner(self, ids: np.ndarray) -> np.ndarray:
        """Owning rank of each global id: [k] int32/int64 -> [k] int32, in one pass (the NumPy expression
        made an 8-byte temporary of the ids and four passes over it: 3.1 s of a 19 s load of 100M edges)."""
        out = np.empty(len(ids), dtype=np.int32)
        _hash_owner(np.ascontiguousarray(ids), np.uint64(self.size), out)
        return out

    def owned(self, rank: int, chunk: int = 1 << 22) -> np.ndarray:
        """Global ids owned by ``rank``, ascending: [n_r] int64 (computed once, in chunks of ids)."""
        if rank not in self._owned:
            parts = [np.zeros(0, dtype=np.int64)]
            for start in range(0, self.num_nodes, chunk):
                ids = np.arange(start, min(start + chunk, self.num_nodes), dtype=np.int64)
                parts.append(ids[self.owner(ids) == rank])
            self._owned[rank] = np.concatenate(parts)
        return self._owned[rank]

    def local_index(self, ids: np.ndarray, rank: int) -> np.ndarray:
        """Positions [k] in ``owned(rank)`` of global ids [k] that ``rank`` owns (int32 while the rank
        owns fewer than 2**31 ids, else int64): how many of its ids lie below each, from a bit per vertex
        (owned or not) and a count per 64 vertices (N / 4 bytes in all), in O(1) an id.
        (``np.searchsorted(owned(rank), ids)``, which it replaces, made a binary search over a table far
        larger than the cache per id: 132 s of a 156 s PageRank at 10M vertices and 100M edges, P = 2.)"""
        words, before = self._index(rank)
        out = np.empty(len(ids), dtype=np.int32 if len(self.owned(rank)) < 2**31 else np.int64)
        _rank_of_ids(np.ascontiguousarray(ids), words, before, out)
        return out

    def owns(self, ids: np.ndarray, rank: int) -> np.ndarray:
        """[k] bool: whether ``rank`` owns each of the global ids [k] (``owner(ids) == rank`` from the
        bit per vertex of ``local_index``, without ``owner``'s 8-byte temporary per id)."""
        return bits_at(self._index(rank)[0], ids)

    def _index(self, rank: int) -> tuple:
        """(words [ceil(N / 64)] uint64: a bit per vertex, set where ``rank`` owns it; before
        [ceil(N / 64)] int64: the ids it owns below each word), built once per rank."""
        if rank not in self._rank_index:
            owned = self.owned(rank)
            words = bit_words_of(owned, self.num_nodes)
            blocks = len(words)
            before = np.zeros(blocks, dtype=np.int64)
            np.cumsum(np.bincount(owned >> 6, minlength=blocks)[:-1], out=before[1:])
            self._rank_index[rank] = words, before
        return self._rank_index[rank]


@njit(cache=True)
def _rank_of_ids(ids, words, before, out):
    """out[k] = before[v >> 6] + the set bits of words[v >> 6] below bit v & 63, v = ids[k] (the number of
    owned ids below v). ids: [k] int32/int64; words: [blocks] uint64; before: [blocks] int64; out: [k] int32/int64."""
    m1, m2, m4 = np.uint64(0x5555555555555555), np.uint64(0x3333333333333333), np.uint64(0x0F0F0F0F0F0F0F0F)
    h01, one = np.uint64(0x0101010101010101), np.uint64(1)
    for k in range(ids.shape[0]):
        v = np.int64(ids[k])
        x = words[v >> 6] & ((one << np.uint64(v & 63)) - one)
        x = x - ((x >> one) & m1)  # popcount (SWAR)
        x = (x & m2) + ((x >> np.uint64(2)) & m2)
        x = (x + (x >> np.uint64(4))) & m4
        out[k] = before[v >> 6] + np.int64((x * h01) >> np.uint64(56))


@njit(cache=True)
def _hash_owner(ids, size, out):
    """out[k] = the high 32 bits of ``ids[k] · φ·2^64`` (mod 2^64) modulo ``size`` (uint64), for ids [k]."""
    for k in range(ids.shape[0]):
        out[k] = ((np.uint64(ids[k]) * _GOLDEN) >> np.uint64(32)) % size


@njit(cache=True)
def _range_owner(ids, bounds, out):
    """out[k] = the r with bounds[r] <= ids[k] < bounds[r + 1] (a binary search over the P + 1 bounds).
    ids: [k] int32/int64; bounds: [P + 1] int64 ascending; out: [k] int32."""
    last = bounds.shape[0] - 2
    for k in range(ids.shape[0]):
        v = ids[k]
        lo, hi = 0, last
        while lo < hi:  # the largest r <= last with bounds[r] <= v
            mid = (lo + hi + 1) // 2
            if bounds[mid] <= v:
                lo = mid
            else:
                hi = mid - 1
        out[k] = lo


PARTITIONERS = ("range", "hash")


def make_partition(name: str, read_bounds: np.ndarray, num_nodes: int, size: int):
    """The partitioner called ``name`` for ``size`` ranks and ``num_nodes`` vertices; ``range`` reuses the
    balanced read boundaries ``read_bounds`` [size + 1] (``balanced_ranges``)."""
    if name == "range":
        return RangePartition(read_bounds)
    if name == "hash":
        return HashPartition(num_nodes, size)
    raise ValueError(f"unknown partitioner {name!r}; choose one of {', '.join(PARTITIONERS)}")
