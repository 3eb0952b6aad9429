"""Load-time edge layout in O(E): row ids of a CSR's edges, grouping edges into a CSR by row with a
stable counting sort, and merging two CSRs over the same rows (a symmetric program's in-edges and its
own file rows) by global id.

At load time each rank turns its in-edges (parallel arrays, in no particular order) into a CSR over
its owned vertices whose rows list their edges by ascending global source id. A comparison sort of
(row, source) keys costs O(E log E); a counting sort by row is O(E + n) and stable, so edges already
in source order (as they come from the file's out-edge CSR, slice after slice) keep that order
within each row.
"""

import numpy as np
from numba import njit

from kernels._numba_start import start as start_numba

start_numba()


@njit(cache=True)
def _fill_row_ids(indptr, first, out):
    """out[e] = first + r for every edge e of row r. indptr: [R + 1] int64; out: [E] int32/int64."""
    for r in range(indptr.shape[0] - 1):
        for e in range(indptr[r], indptr[r + 1]):
            out[e] = first + r


def row_ids(indptr: np.ndarray, first: int = 0, dtype=np.int64) -> np.ndarray:
    """[E] ``dtype``: ``first + r`` for each edge of row ``r`` of a CSR with ``indptr`` [R + 1] int64
    starting at 0 (``np.repeat(np.arange(first, first + R), np.diff(indptr))``, without its
    per-row copies)."""
    out = np.empty(int(indptr[-1]), dtype=dtype)
    _fill_row_ids(np.ascontiguousarray(indptr, dtype=np.int64), np.int64(first), out)
    return out


@njit(cache=True)
def _count_rows(rows, counts):
    """counts[r] += number of entries of rows [E] (int32/int64) equal to r; counts: [n] int64."""
    for e in range(rows.shape[0]):
        counts[rows[e]] += 1


def indptr_of(counts: np.ndarray) -> np.ndarray:
    """[n + 1] int64 from 0: the CSR row bounds of rows with ``counts`` [n] edges each."""
    indptr = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    return indptr


def count_rows(rows: np.ndarray, num_rows: int) -> np.ndarray:
    """[num_rows] int64 occurrences of each row id in ``rows`` [E] int32/int64 in [0, num_rows)
    (``np.bincount`` without converting int32 ids to int64 first)."""
    counts = np.zeros(num_rows, dtype=np.int64)
    _count_rows(np.ascontiguousarray(rows), counts)
    return counts


def is_ascending(keys: np.ndarray) -> bool:
    """Whether ``keys`` [E] (any integer dtype) never decrease."""
    return bool(_ascending(np.ascontiguousarray(keys)))


@njit(cache=True)
def _ascending(keys):
    """Whether keys [E] never decrease (stops at the first descent)."""
    for e in range(1, keys.shape[0]):
        if keys[e] < keys[e - 1]:
            return False
    return True


def pairs_ascending(rows: np.ndarray, columns: np.ndarray) -> bool:
    """Whether the pairs (rows[e], columns[e]) of [E] integer arrays never decrease (rows first)."""
    return bool(_pairs_ascending(np.ascontiguousarray(rows), np.ascontiguousarray(columns)))


@njit(cache=True)
def _pairs_ascending(rows, columns):
    """Whether (rows[e], columns[e]) [E] never decrease in lexicographic order (stops at the first descent)."""
    for e in range(1, rows.shape[0]):
        if rows[e] < rows[e - 1] or (rows[e] == rows[e - 1] and columns[e] < columns[e - 1]):
            return False
    return True


def both_directions(src: np.ndarray, dst: np.ndarray, weights: np.ndarray | None) -> tuple:
    """The edges src -> dst [E] (weights [E] or None) followed by their reverses, a self-loop's but once:
    (src [E + r], dst [E + r], weights [E + r] or None), one pass, no masked copies."""
    count = len(src) + int(np.count_nonzero(src != dst))
    out_src = np.empty(count, dtype=np.result_type(src, dst))
    out_dst = np.empty_like(out_src)
    out_weights = None if weights is None else np.empty(count, dtype=weights.dtype)
    _append_reverses(src, dst, weights, out_src, out_dst, out_weights)
    return out_src, out_dst, out_weights


@njit(cache=True)
def _append_reverses(src, dst, weights, out_src, out_dst, out_weights):
    """The edges [E] at [0, E) of the outputs and the reverses of those that are not self-loops after them
    (``weights`` and ``out_weights`` may be None: that branch is pruned at compile time)."""
    count = src.shape[0]
    k = count
    for e in range(count):
        s, d = src[e], dst[e]
        out_src[e], out_dst[e] = s, d
        if weights is not None:
            out_weights[e] = weights[e]
        if s != d:
            out_src[k], out_dst[k] = d, s
            if weights is not None:
                out_weights[k] = weights[e]
            k += 1


@njit(cache=True, inline="always")
def _copy_edge(source, columns, weights, keys, target, out_columns, out_weights, out_keys):
    """Edge ``source`` of (columns, weights, keys) to position ``target`` of the outputs (weights and
    keys may be None, with their outputs: the branches are pruned at compile time)."""
    out_columns[target] = columns[source]
    if weights is not None:
        out_weights[target] = weights[source]
    if keys is not None:
        out_keys[target] = keys[source]


@njit(cache=True, inline="always")
def _skipped(later, e, sweep):
    """Whether edge ``e`` waits for another sweep: with ``later`` [E] bool, the edges flagged go in the
    second sweep (1), the others in the first (0); without (None, pruned), every edge in the one sweep."""
    return later is not None and later[e] != (sweep == 1)


@njit(cache=True)
def _scatter_to_rows(rows, indptr, columns, weights, keys, later, out_columns, out_weights, out_keys):
    """Place edge ``e`` at the next free position of row ``rows[e]``, in edge order (the edges flagged
    in ``later`` after the others).

    rows: [E] int32/int64 in [0, n); indptr: [n + 1] int64 row starts; columns: [E]; weights, keys,
    later: [E] or None (the branches are pruned at compile time); out_columns, out_weights, out_keys: [E]
    (or None with their input), written in place.
    """
    next_free = indptr[:-1].copy()
    for sweep in range(1 if later is None else 2):
        for e in range(rows.shape[0]):
            if _skipped(later, e, sweep):
                continue
            r = rows[e]
            position = next_free[r]
            next_free[r] = position + 1
            _copy_edge(e, columns, weights, keys, position, out_columns, out_weights, out_keys)


@njit(cache=True)
def _scatter_by_buckets(rows, indptr, columns, weights, keys, later, out_columns, out_weights, out_keys, shift,
                        offsets, scratch_columns, scratch_weights, scratch_keys):
    """``_scatter_to_rows`` in two stable passes, each with few places to write at once: the edges go
    to buckets of ``2**shift`` consecutive rows (each bucket's span of the output), remembering their
    row within the bucket in ``offsets`` [E] (uint16 up to ``shift`` 16), then bucket by bucket, through
    the scratch arrays (as long as the largest bucket), to their rows. The same result; on 100M edges
    over 10M rows 1.0 s instead of 3.5, where each edge's row and place in the output missed the cache.
    """
    num_rows = indptr.shape[0] - 1
    num_buckets = ((num_rows - 1) >> shift) + 1 if num_rows else 0
    next_free = np.empty(num_buckets, np.int64)
    for b in range(num_buckets):
        next_free[b] = indptr[b << shift]
    for sweep in range(1 if later is None else 2):
        for e in range(rows.shape[0]):
            if _skipped(later, e, sweep):
                continue
            r = rows[e]
            b = r >> shift
            position = next_free[b]
            next_free[b] = position + 1
            offsets[position] = r - (b << shift)
            _copy_edge(e, columns, weights, keys, position, out_columns, out_weights, out_keys)
    row_next = np.empty(1 << shift, np.int64)
    for b in range(num_buckets):
        first = b << shift
        last = min(first + (1 << shift), num_rows)
        start, end = indptr[first], indptr[last]
        for i in range(end - start):
            _copy_edge(start + i, out_columns, out_weights, out_keys, i, scratch_columns, scratch_weights,
                       scratch_keys)
        for r in range(first, last):
            row_next[r - first] = indptr[r]
        for i in range(end - start):
            o = offsets[start + i]
            position = row_next[o]
            row_next[o] = position + 1
            _copy_edge(i, scratch_columns, scratch_weights, scratch_keys, position, out_columns, out_weights,
                       out_keys)


#: the two-pass scatter (``_scatter_by_buckets``) from this many edges, with about this many buckets:
#: on 100M edges over 10M rows, 1,221 buckets took 1.0 s, 9,766 took 5.2 s, one pass 3.5 s
BUCKETED_FROM_EDGES = 1 << 22
BUCKETS = 2048


def _bucket_shift(num_rows: int, num_edges: int) -> int | None:
    """log2 of the rows per bucket of the two-pass scatter, or None for one pass (a small graph)."""
    if num_edges < BUCKETED_FROM_EDGES or num_rows <= BUCKETS:
        return None
    return int(np.ceil(np.log2(num_rows / BUCKETS)))


def _scatter(rows, indptr, columns, weights, keys, later, out_columns, out_weights, out_keys, shift) -> None:
    """Place each edge at the next free position of its row, in edge order (arguments as
    ``_scatter_to_rows``): in one pass, or in two through buckets of ``2**shift`` rows."""
    if shift is None:
        _scatter_to_rows(rows, indptr, columns, weights, keys, later, out_columns, out_weights, out_keys)
        return
    bounds = np.append(indptr[:-1:1 << shift], indptr[-1])  # each bucket's first edge, then the end
    largest = int(np.diff(bounds).max(initial=0))
    offsets = np.empty(len(rows), np.uint16 if shift <= 16 else np.uint32)

    def scratch(like):
        return None if like is None else np.empty(largest, like.dtype)

    _scatter_by_buckets(rows, indptr, columns, weights, keys, later, out_columns, out_weights, out_keys, shift,
                        offsets, scratch(out_columns), scratch(out_weights), scratch(out_keys))


#: rows of at most this many edges are sorted by insertion (no allocation), longer ones by merge sort
_INSERTION_ROWS = 32


@njit(cache=True)
def _sort_rows(indptr, keys, columns, weights):
    """Sort each row's edges by key, stably, in place (rows already in order are only read).

    indptr: [n + 1] int64; keys: [E]; columns, weights: [E] or None (pruned at compile time).
    """
    for r in range(indptr.shape[0] - 1):
        start, end = indptr[r], indptr[r + 1]
        in_order = True
        for e in range(start + 1, end):
            if keys[e] < keys[e - 1]:
                in_order = False
                break
        if in_order:
            continue
        if end - start <= _INSERTION_ROWS:
            for e in range(start + 1, end):
                key = keys[e]
                column = columns[e] if columns is not None else 0
                weight = weights[e] if weights is not None else 0.0
                j = e
                while j > start and keys[j - 1] > key:
                    keys[j] = keys[j - 1]
                    if columns is not None:
                        columns[j] = columns[j - 1]
                    if weights is not None:
                        weights[j] = weights[j - 1]
                    j -= 1
                keys[j] = key
                if columns is not None:
                    columns[j] = column
                if weights is not None:
                    weights[j] = weight
        else:
            order = np.argsort(keys[start:end], kind="mergesort") + start
            keys[start:end] = keys[order]
            if columns is not None:
                columns[start:end] = columns[order]
            if weights is not None:
                weights[start:end] = weights[order]


def sort_rows(indptr: np.ndarray, keys: np.ndarray, weights: np.ndarray | None) -> None:
    """Sort each row of a CSR by its keys, stably, in place, the weights moving with them.

    indptr: [n + 1] int64 from 0; keys: [E] integers (e.g. a file's out-edge targets); weights: [E]
    or None."""
    _sort_rows(np.ascontiguousarray(indptr, dtype=np.int64), keys, None, weights)


def drop_rows(indptr: np.ndarray, columns: np.ndarray, weights: np.ndarray | None, dropped: np.ndarray) -> tuple:
    """Empty the rows where ``dropped`` [n] bool is set of a CSR, in place: the other rows' edges move to
    the front of ``columns`` [E] and ``weights`` [E] (or None), in order. indptr: [n + 1] int64 from 0.
    Returns (indptr [n + 1] int64, columns [E_k], weights [E_k] or None): the kept rows, views of the given
    arrays."""
    indptr = np.ascontiguousarray(indptr, dtype=np.int64)
    lengths = np.diff(indptr)
    kept_indptr = indptr_of(np.where(dropped, 0, lengths))
    # the kept rows ascending, written over the same arrays: each edge moves to a place at or before its own
    _rows_in_order(indptr, columns, weights, np.flatnonzero(~np.asarray(dropped, dtype=bool)), lengths,
                   columns, weights)
    kept = int(kept_indptr[-1])
    return kept_indptr, columns[:kept], None if weights is None else weights[:kept]


@njit(cache=True)
def _rows_in_order(indptr, columns, weights, order, lengths, out_columns, out_weights):
    """Rows ``order`` [k] of a CSR one after another, the first ``lengths[r]`` edges of row r."""
    out = 0
    for i in range(order.shape[0]):
        r = order[i]
        start = indptr[r]
        for e in range(start, start + lengths[r]):
            _copy_edge(e, columns, weights, None, out, out_columns, out_weights, None)
            out += 1


def rows_in_order(indptr: np.ndarray, columns: np.ndarray, weights: np.ndarray | None, order: np.ndarray,
                  lengths: np.ndarray) -> tuple:
    """The edges of rows ``order`` [k] of a CSR, one row after another, each row's first ``lengths[r]``
    (at most its own) edges: (columns [sum], weights [sum] or None), new arrays. indptr: [n + 1] int64;
    columns, weights: [E] (weights may be None); lengths: [n] int64."""
    lengths = np.ascontiguousarray(lengths, dtype=np.int64)
    order = np.ascontiguousarray(order)
    total = int(lengths[order].sum())
    out_columns = np.empty(total, dtype=columns.dtype)
    out_weights = None if weights is None else np.empty(total, dtype=weights.dtype)
    _rows_in_order(np.ascontiguousarray(indptr, dtype=np.int64), columns, weights, order, lengths,
                   out_columns, out_weights)
    return out_columns, out_weights


@njit(cache=True, inline="always")
def _id_order(column, num_owned, ghosts_below):
    """A key of extended column ``column`` in the order of global ids, for ghosts ascending by id and
    a contiguous owned range: the ``ghosts_below`` ghosts with smaller ids than the owned vertices
    first (negative keys), then the owned columns, then the other ghosts (with no owned columns and no
    ghosts below, ``num_owned`` = ``ghosts_below`` = 0: the column itself, a global id)."""
    if num_owned <= column < num_owned + ghosts_below:
        return column - num_owned - ghosts_below
    return column


@njit(cache=True)
def _merge_rows(indptr_a, columns_a, weights_a, indptr_b, columns_b, weights_b, num_owned, ghosts_below,
                indptr, columns, weights):
    """Row r of the output = rows r of a and b merged by their columns' global ids (``_id_order``; ties: a
    first); arguments as ``merge_rows``, outputs written in place (weights None with both inputs')."""
    for r in range(indptr.shape[0] - 1):
        i, i_end, j, j_end = indptr_a[r], indptr_a[r + 1], indptr_b[r], indptr_b[r + 1]
        out = indptr[r]
        key_a = _id_order(columns_a[i], num_owned, ghosts_below) if i < i_end else 0
        key_b = _id_order(columns_b[j], num_owned, ghosts_below) if j < j_end else 0
        while i < i_end and j < j_end:  # each side's key read once per edge
            if key_b < key_a:
                _copy_edge(j, columns_b, weights_b, None, out, columns, weights, None)
                j += 1
                key_b = _id_order(columns_b[j], num_owned, ghosts_below) if j < j_end else 0
            else:
                _copy_edge(i, columns_a, weights_a, None, out, columns, weights, None)
                i += 1
                key_a = _id_order(columns_a[i], num_owned, ghosts_below) if i < i_end else 0
            out += 1
        for e in range(i, i_end):
            _copy_edge(e, columns_a, weights_a, None, out + e - i, columns, weights, None)
        out += i_end - i
        for e in range(j, j_end):
            _copy_edge(e, columns_b, weights_b, None, out + e - j, columns, weights, None)


def merge_rows(indptr_a: np.ndarray, columns_a: np.ndarray, weights_a: np.ndarray | None, indptr_b: np.ndarray,
               columns_b: np.ndarray, weights_b: np.ndarray | None, first_id: int | None = None,
               ghost_ids: np.ndarray | None = None) -> tuple:
    """Two CSRs over the same n rows merged row by row into one, in O(E_a + E_b).

    With ``first_id``, columns index the extended space ``[owned | ghosts]`` of a rank whose owned rows
    are the global ids ``first_id, first_id + 1, ...``: column c < n is vertex ``first_id + c``, column
    ``n + j`` is ``ghost_ids[j]`` ([g] int64, ascending, none in the owned range). Without (None), the
    columns are global ids. Each input row must ascend by global id; the output rows do too, with a's
    edges before b's on equal ids. indptr_a, indptr_b: [n + 1] int64 from 0; columns_a, columns_b:
    [E_a], [E_b] of one dtype; weights_a, weights_b: [E_a], [E_b] float32, or both None.
    Returns (indptr [n + 1] int64, columns [E_a + E_b], weights [E_a + E_b] or None).
    """
    indptr = np.asarray(indptr_a, dtype=np.int64) + np.asarray(indptr_b, dtype=np.int64)
    columns = np.empty(int(indptr[-1]), dtype=columns_a.dtype)
    weights = None if weights_a is None else np.empty(len(columns), dtype=weights_a.dtype)
    num_owned, ghosts_below = 0, 0
    if first_id is not None:
        num_owned, ghosts_below = len(indptr) - 1, int(np.searchsorted(ghost_ids, first_id))
    _merge_rows(indptr_a, columns_a, weights_a, indptr_b, columns_b, weights_b, np.int64(num_owned),
                np.int64(ghosts_below), indptr, columns, weights)
    return indptr, columns, weights


@njit(cache=True)
def _count_outside(ids, lo, hi):
    """How many of ids [E] lie outside [lo, hi)."""
    count = 0
    for e in range(ids.shape[0]):
        if ids[e] < lo or ids[e] >= hi:
            count += 1
    return count


@njit(cache=True)
def _split_ids(ids, lo, hi, columns, outside):
    """columns[e] = ids[e] - lo inside [lo, hi), else hi - lo + k for the k-th id outside, which goes
    to outside[k]."""
    k = 0
    for e in range(ids.shape[0]):
        v = ids[e]
        if lo <= v < hi:
            columns[e] = v - lo
        else:
            columns[e] = hi - lo + k
            outside[k] = v
            k += 1


def split_ids(ids: np.ndarray, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """Global ids [E] as columns of a rank owning [lo, hi), each id outside a ghost of its own
    (repeated ids too, for ``renumber_ghosts`` to join): (columns [E] int32 (int64 from 2**31
    columns): ``ids - lo`` inside, ``hi - lo + k`` for the k-th id outside; outside [k] of the ids'
    dtype, those ids in order). Two passes, no [E] mask."""
    ids = np.ascontiguousarray(ids)
    outside = np.empty(_count_outside(ids, np.int64(lo), np.int64(hi)), dtype=ids.dtype)
    columns = np.empty(len(ids), dtype=np.int32 if hi - lo + len(outside) < 2**31 else np.int64)
    _split_ids(ids, np.int64(lo), np.int64(hi), columns, outside)
    return columns, outside


@njit(cache=True)
def _renumber_ghosts(columns, num_owned, new_column):
    """columns[e] = new_column[columns[e] - num_owned] for each ghost column, in place."""
    for e in range(columns.shape[0]):
        c = columns[e]
        if c >= num_owned:
            columns[e] = new_column[c - num_owned]


def renumber_ghosts(columns: np.ndarray, num_owned: int, new_column: np.ndarray) -> None:
    """Move the ghost columns of ``columns`` [E] (those >= ``num_owned``) in place: ghost ``j`` (column
    ``num_owned + j``) becomes column ``new_column[j]`` ([g], of ``columns``' dtype)."""
    _renumber_ghosts(columns, np.int64(num_owned), np.asarray(new_column, dtype=columns.dtype))


@njit(cache=True)
def _stable_order(keys, starts, order):
    """order[next free position of key k] = e for each e, in edge order (a counting sort)."""
    next_free = starts.copy()
    for e in range(keys.shape[0]):
        k = keys[e]
        order[next_free[k]] = e
        next_free[k] += 1


def stable_order(keys: np.ndarray, num_keys: int) -> tuple[np.ndarray, np.ndarray]:
    """(order [E] int32 (int64 from 2**31 keys), counts [num_keys] int64): ``np.argsort(keys,
    kind="stable")`` in O(E) for small non-negative integer keys [E] in [0, num_keys) (e.g. destination
    ranks), and how many keys each value has. (int32 halves the order of a rank's edges at load time:
    200 MB instead of 400 at 50M edges.)"""
    counts = count_rows(keys, num_keys)
    starts = np.zeros(num_keys, dtype=np.int64)
    np.cumsum(counts[:-1], out=starts[1:])
    order = np.empty(len(keys), dtype=np.int32 if len(keys) < 2**31 else np.int64)
    _stable_order(np.ascontiguousarray(keys), starts, order)
    return order, counts


def group_by_row(rows: np.ndarray, num_rows: int, columns: np.ndarray, weights: np.ndarray | None,
                 keys: np.ndarray, bucket_shift: int | None = -1, later: np.ndarray | None = None,
                 row_counts: np.ndarray | None = None) -> tuple:
    """A CSR of edges grouped by row, each row's edges in ascending ``keys`` order (ties: input order,
    the edges flagged in ``later`` after the others).

    rows: [E] int32/int64 in [0, num_rows); columns: [E] any integer dtype; weights: [E] float32 or None;
    keys: [E] int32/int64 the within-row order (the global source ids), or ``columns`` itself (sorted
    as their own keys, no copy of them); later: [E] bool or None (a symmetric program's reverse edges);
    row_counts: [num_rows] int64 the edges of each row, when already known (the in-degrees), else
    counted here.
    Returns (indptr [num_rows + 1] int64, columns [E] as given, weights [E] or None).
    Edges are placed in their rows in input order (a counting sort by row), so edges read from an
    out-edge CSR, whose keys ascend, are in order; otherwise (the reverse edges of a symmetric
    program such as wcc) each row whose keys do not ascend is then sorted on its own: O(E log d) for
    rows of d edges, where one stable sort of all the keys first (and the permuted copies of rows,
    columns and weights it needs) took twice as long. ``bucket_shift``: the scatter's buckets of
    ``2**bucket_shift`` rows (``_scatter_by_buckets``), None for one pass, -1 (default) chosen by size.
    """
    indptr = indptr_of(count_rows(rows, num_rows) if row_counts is None else row_counts)
    out_columns = np.empty_like(columns)
    out_weights = None if weights is None else np.empty_like(weights)
    if later is not None and not later.any():
        later = None
    ordered = _ascending(keys) and later is None
    own_keys = keys is columns  # the columns move as the keys: sorted by themselves
    out_keys = None if ordered or own_keys else np.empty_like(keys)
    shift = _bucket_shift(num_rows, len(rows)) if bucket_shift == -1 else bucket_shift
    _scatter(np.ascontiguousarray(rows), indptr, columns, weights, None if ordered or own_keys else keys, later,
             out_columns, out_weights, out_keys, shift)
    if own_keys and not ordered:
        _sort_rows(indptr, out_columns, None, out_weights)
    elif not ordered:
        _sort_rows(indptr, out_keys, out_columns, out_weights)
    return indptr, out_columns, out_weights


@njit(cache=True)
def _count_remote(src, lo, hi):
    """Distinct ids of ascending src [E] outside [lo, hi)."""
    count, previous = 0, -1
    for e in range(src.shape[0]):
        s = src[e]
        if (s < lo or s >= hi) and s != previous:
            count += 1
            previous = s
    return count


@njit(cache=True)
def _fill_columns(src, lo, hi, columns, remote_ids):
    """columns[e] = src[e] - lo inside [lo, hi), else hi - lo + (rank of src[e] among the distinct
    outside ids, which are written to remote_ids in ascending order). src: [E] ascending."""
    n, k, previous = hi - lo, -1, -1
    for e in range(src.shape[0]):
        s = src[e]
        if lo <= s < hi:
            columns[e] = s - lo
        else:
            if s != previous:
                k += 1
                remote_ids[k] = s
                previous = s
            columns[e] = n + k


def ascending_columns(src: np.ndarray, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """Columns of edges with ascending global sources ``src`` [E] (int32/int64) in the extended space
    of a rank owning ``[lo, hi)``: ``src - lo`` for owned sources, ``hi - lo + j`` for the ``j``-th
    distinct other source; one pass, no sort (``np.unique`` of the other sources, ``return_inverse``).
    Returns (columns [E] int32, int64 beyond 2**31 columns; remote_ids [g] int64 ascending)."""
    src = np.ascontiguousarray(src)
    remote_ids = np.empty(_count_remote(src, lo, hi), dtype=np.int64)
    columns = np.empty(len(src), dtype=np.int32 if hi - lo + len(remote_ids) < 2**31 else np.int64)
    _fill_columns(src, np.int64(lo), np.int64(hi), columns, remote_ids)
    return columns, remote_ids


def sorted_unique(values: np.ndarray) -> np.ndarray:
    """The distinct values [u] of ``values`` [n] (integers), ascending: ``np.unique`` by a sort and a
    mask (NumPy 2's ``np.unique`` hashes integers, tens of times slower on edge keys of millions)."""
    values = np.sort(np.asarray(values).ravel())
    keep = np.ones(len(values), bool)
    np.not_equal(values[1:], values[:-1], out=keep[1:])
    return values[keep]
