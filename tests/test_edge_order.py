"""group_by_row (the load-time counting sort) against a lexsort by (row, key), and the other edge-order
helpers against NumPy."""

import numpy as np
import pytest

from pregel.edge_order import (ascending_columns, count_rows, drop_rows, group_by_row, rows_in_order, is_ascending, merge_rows, renumber_ghosts,
                               row_ids, sort_rows, sorted_unique, split_ids, stable_order)


@pytest.mark.parametrize("num_rows", [50, 1000], ids=["long-rows", "short-rows"])
@pytest.mark.parametrize("sorted_keys", [True, False])
@pytest.mark.parametrize("weighted", [True, False])
@pytest.mark.parametrize("bucket_shift", [-1, None, 0, 3, 17], ids=["by-size", "one-pass", "rows", "8-rows", "wide"])
@pytest.mark.parametrize("flagged", [False, True], ids=["", "later"])
def test_group_by_row_matches_lexsort(sorted_keys, weighted, num_rows, bucket_shift, flagged):
    """Rows of 40 edges on average (sorted by merge sort) or of 2 (by insertion), keys with many ties;
    the scatter in one pass or through buckets of 1, 8 or 2**17 rows (uint32 row offsets); with
    ``later``, flagged edges after the others on equal keys."""
    rng = np.random.default_rng(3)
    num_edges = 2000
    keys = rng.integers(0, 300, num_edges)
    if sorted_keys:
        keys.sort()
    rows = rng.integers(0, num_rows - 5, num_edges)  # the last rows stay empty
    columns = rng.integers(0, 10**6, num_edges).astype(np.int32)
    weights = rng.random(num_edges).astype(np.float32) if weighted else None
    later = rng.random(num_edges) < 0.5 if flagged else None
    indptr, out_columns, out_weights = group_by_row(rows, num_rows, columns, weights, keys=keys,
                                                    bucket_shift=bucket_shift, later=later)
    tie = np.zeros(num_edges, bool) if later is None else later
    order = np.lexsort((np.arange(num_edges), tie, keys, rows))  # ties: unflagged first, then input order
    np.testing.assert_array_equal(indptr, np.searchsorted(rows[order], np.arange(num_rows + 1)))
    _assert_edges_at(out_columns, out_weights, columns, weights, order)


def _assert_edges_at(got_columns, got_weights, columns, weights, index):
    """``got_columns`` (int32, as given) and ``got_weights`` (None without ``weights``) are the given
    ``columns`` and ``weights`` [E] at ``index`` (any NumPy index)."""
    np.testing.assert_array_equal(got_columns, columns[index])
    assert got_columns.dtype == np.int32
    if weights is None:
        assert got_weights is None
    else:
        np.testing.assert_array_equal(got_weights, weights[index])


def test_row_ids_and_count_rows_match_numpy():
    rng = np.random.default_rng(4)
    degrees = rng.integers(0, 6, 40)
    indptr = np.concatenate([[0], np.cumsum(degrees)])
    np.testing.assert_array_equal(row_ids(indptr, 7), np.repeat(np.arange(7, 47), degrees))
    rows = rng.integers(0, 30, 500).astype(np.int32)
    np.testing.assert_array_equal(count_rows(rows, 33), np.bincount(rows, minlength=33))


def test_stable_order_matches_stable_argsort():
    keys = np.random.default_rng(5).integers(0, 4, 300)
    keys[keys == 2] = 1  # a key without entries
    order, counts = stable_order(keys, 4)
    assert order.dtype == np.int32  # half of int64's bytes: the order of a rank's edges at load time
    np.testing.assert_array_equal(order, np.argsort(keys, kind="stable"))
    np.testing.assert_array_equal(counts, np.bincount(keys, minlength=4))


def test_ascending_columns_match_unique_inverse():
    """The one-pass columns of ascending sources against np.unique(return_inverse) of the others."""
    rng = np.random.default_rng(6)
    src = np.sort(rng.integers(0, 1000, 5000)).astype(np.int32)
    lo, hi = 300, 550
    columns, remote_ids = ascending_columns(src, lo, hi)
    owned = (src >= lo) & (src < hi)
    expected_ids, inverse = np.unique(src[~owned].astype(np.int64), return_inverse=True)
    np.testing.assert_array_equal(remote_ids, expected_ids)
    np.testing.assert_array_equal(columns[owned], src[owned] - lo)
    np.testing.assert_array_equal(columns[~owned], hi - lo + inverse)
    assert columns.dtype == np.int32 and remote_ids.dtype == np.int64
    empty_columns, empty_ids = ascending_columns(np.zeros(0, np.int64), 0, 5)
    assert empty_columns.shape == (0,) and empty_ids.shape == (0,)


def test_is_ascending():
    assert is_ascending(np.array([1, 1, 2, 7], np.int32)) and is_ascending(np.zeros(0, np.int64))
    assert not is_ascending(np.array([1, 3, 2]))


def test_sorted_unique_equals_numpy_unique():
    rng = np.random.default_rng(3)
    for values in (rng.integers(0, 50, 1000), rng.integers(-2**40, 2**40, 500), np.array([], np.int64),
                   np.array([7, 7, 7])):
        assert np.array_equal(sorted_unique(values), np.unique(values))


def test_placing_edges_releases_the_slice_it_sent():
    # the load's peak at P > 1 held every edge twice: the slice read and the edges received. The
    # exchange drops each array of the slice once it is sent (a comm of two ranks that sends to itself)
    from pregel.dgraph import _Edges, _place_edges
    from pregel.partition import RangePartition

    class Loopback:
        size, rank = 2, 0

        def alltoallv(self, values, counts):
            return values.copy(), counts

        def alltoallv_known(self, values, counts, received):
            return values.copy()

    src = np.array([0, 1, 2, 3], np.int32)
    dst = np.array([3, 2, 1, 0], np.int32)
    edges = _Edges(src, dst, np.arange(4, dtype=np.float32), np.zeros(4, bool))
    placed = _place_edges(Loopback(), RangePartition(np.array([0, 2, 4])), edges, np.zeros(0, np.int64),
                          send_out_hub=False)
    assert edges.src is None and edges.dst is None and edges.weight is None
    # grouped by the destination's owner (rank 0 owns 0, 1), each group in slice order
    assert placed.src.tolist() == [2, 3, 0, 1] and placed.dst.tolist() == [1, 0, 3, 2]
    assert placed.weight.tolist() == [2.0, 3.0, 0.0, 1.0]


@pytest.mark.parametrize("num_rows", [50, 1000], ids=["long-rows", "short-rows"])
def test_sort_rows_matches_lexsort(num_rows):
    """Rows sorted by insertion (short) or merge sort (long), ties in input order, weights moving along."""
    rng = np.random.default_rng(8)
    rows = np.sort(rng.integers(0, num_rows, 2000))
    indptr = np.searchsorted(rows, np.arange(num_rows + 1)).astype(np.int64)
    keys = rng.integers(0, 40, 2000).astype(np.int32)
    weights = rng.random(2000).astype(np.float32)
    order = np.lexsort((np.arange(2000), keys, rows))
    want_keys, want_weights = keys[order], weights[order]
    sort_rows(indptr, keys, weights)
    np.testing.assert_array_equal(keys, want_keys)
    np.testing.assert_array_equal(weights, want_weights)


@pytest.mark.parametrize("weighted", [True, False])
def test_drop_rows_keeps_the_other_rows_in_place_as_a_mask_would(weighted):
    """Dropped rows (empty ones, the first and the last among them) against NumPy's boolean mask over the
    edges: the kept edges at the front of the same arrays, in order, and each dropped row empty."""
    rng = np.random.default_rng(11)
    counts = rng.integers(0, 6, 40)
    counts[[3, 17]] = 0
    indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    columns = rng.integers(0, 1000, int(indptr[-1])).astype(np.int32)
    weights = rng.random(len(columns)).astype(np.float32) if weighted else None
    dropped = rng.random(40) < 0.3
    dropped[[0, 3, 39]] = True
    given_columns, given_weights = columns.copy(), None if weights is None else weights.copy()
    got_indptr, got_columns, got_weights = drop_rows(indptr, columns, weights, dropped)
    np.testing.assert_array_equal(got_indptr, np.concatenate([[0], np.cumsum(np.where(dropped, 0, counts))]))
    _assert_edges_at(got_columns, got_weights, given_columns, given_weights, np.repeat(~dropped, counts))
    assert np.shares_memory(got_columns, columns)  # moved in place, not copied
    assert not weighted or np.shares_memory(got_weights, weights)


@pytest.mark.parametrize("weighted", [True, False])
def test_rows_in_order_matches_concatenated_slices(weighted):
    """Rows taken in a shuffled order, some cut short (zero edges: rows whose edges left), against NumPy
    slices of each row concatenated."""
    rng = np.random.default_rng(12)
    counts = rng.integers(0, 6, 30)
    indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    columns = rng.integers(0, 1000, int(indptr[-1])).astype(np.int32)
    weights = rng.random(len(columns)).astype(np.float32) if weighted else None
    order = rng.permutation(30)
    lengths = counts.copy()
    lengths[rng.random(30) < 0.3] = 0
    got_columns, got_weights = rows_in_order(indptr, columns, weights, order, lengths)
    pieces = [np.arange(indptr[r], indptr[r] + lengths[r]) for r in order]
    _assert_edges_at(got_columns, got_weights, columns, weights, np.concatenate(pieces).astype(np.int64))


@pytest.mark.parametrize("weighted", [True, False])
@pytest.mark.parametrize("columns_are", ["extended", "global ids"])
def test_merge_rows_matches_a_stable_sort_by_global_id(weighted, columns_are):
    """Two CSRs over 30 rows, each row ascending by global id, merged against a lexsort by (row, global id,
    input: a before b): columns of the extended space of rows owned from global id 100 (30 owned, then 25
    ghosts on both sides of the owned ids), or global ids themselves (``first_id`` None); renumber_ghosts
    against a lookup table."""
    rng = np.random.default_rng(9)
    num_owned, first_id = 30, 100
    ghost_ids = np.sort(rng.choice(np.r_[0:100, 130:300], 25, replace=False))
    global_of = np.concatenate([np.arange(first_id, first_id + num_owned), ghost_ids])
    if columns_are == "global ids":
        global_of, first_id = np.arange(num_owned + len(ghost_ids)), None

    def csr(num_edges):
        rows = rng.integers(0, num_owned, num_edges)
        columns = rng.integers(0, num_owned + len(ghost_ids), num_edges).astype(np.int32)
        order = np.lexsort((global_of[columns], rows))
        weights = rng.random(num_edges).astype(np.float32) if weighted else None
        indptr = np.searchsorted(rows[order], np.arange(num_owned + 1)).astype(np.int64)
        return rows[order], indptr, columns[order], None if weights is None else weights[order]

    rows_a, *a = csr(400)
    rows_b, *b = csr(300)
    indptr, columns, weights = merge_rows(*a, *b, first_id, ghost_ids)
    rows = np.concatenate([rows_a, rows_b])
    all_columns = np.concatenate([a[1], b[1]])
    order = np.lexsort((np.arange(len(rows)), global_of[all_columns], rows))
    np.testing.assert_array_equal(indptr, np.searchsorted(rows[order], np.arange(num_owned + 1)))
    np.testing.assert_array_equal(columns, all_columns[order])
    if weighted:
        np.testing.assert_array_equal(weights, np.concatenate([a[2], b[2]])[order])
    else:
        assert weights is None
    new_column = rng.permutation(len(ghost_ids)).astype(np.int32) + 7
    lookup = np.concatenate([np.arange(num_owned), new_column])
    renumbered = columns.copy()
    renumber_ghosts(renumbered, num_owned, new_column)
    np.testing.assert_array_equal(renumbered, lookup[columns])


def test_split_ids_against_numpy():
    """Ids inside [lo, hi) become ``id - lo``; each id outside its own ghost column, in order."""
    ids = np.random.default_rng(10).integers(0, 100, 500).astype(np.int32)
    columns, outside = split_ids(ids, 40, 70)
    inside = (ids >= 40) & (ids < 70)
    np.testing.assert_array_equal(outside, ids[~inside])
    np.testing.assert_array_equal(columns[inside], ids[inside] - 40)
    np.testing.assert_array_equal(columns[~inside], 30 + np.arange(np.count_nonzero(~inside)))
    assert columns.dtype == np.int32 and outside.dtype == np.int32


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_both_directions_appends_every_reverse_but_a_self_loop_s(dtype):
    from pregel.edge_order import both_directions

    rng = np.random.default_rng(2)
    src, dst = rng.integers(0, 6, 200).astype(dtype), rng.integers(0, 6, 200).astype(dtype)  # loops too
    weights = rng.random(200).astype(np.float32)
    keep = src != dst  # the NumPy expression as the oracle
    got_src, got_dst, got_weights = both_directions(src, dst, weights)
    np.testing.assert_array_equal(got_src, np.concatenate([src, dst[keep]]))
    np.testing.assert_array_equal(got_dst, np.concatenate([dst, src[keep]]))
    np.testing.assert_array_equal(got_weights, np.concatenate([weights, weights[keep]]))
    assert got_src.dtype == dtype and both_directions(src, dst, None)[2] is None
    empty = both_directions(src[:0], dst[:0], None)
    assert len(empty[0]) == len(empty[1]) == 0
