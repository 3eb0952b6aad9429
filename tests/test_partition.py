"""Range partition owners (a numba pass) against np.searchsorted over the bounds."""

import numpy as np
import pytest

from pregel.partition import HashPartition, RangePartition


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@pytest.mark.parametrize("bounds", [[0, 100], [0, 40, 100], [0, 10, 10, 55, 55, 100], [0, 0, 0, 100]])
def test_range_owner_matches_searchsorted(bounds, dtype):
    ids = np.random.default_rng(7).integers(0, 100, 2000).astype(dtype)
    ids[:3] = [0, 99, min(bounds[1], 99)]  # the ends and a boundary
    partition = RangePartition(np.array(bounds))
    owners = partition.owner(ids)
    np.testing.assert_array_equal(owners, np.searchsorted(np.array(bounds), ids, side="right") - 1)
    for rank in range(len(bounds) - 1):  # every id lies in its owner's range
        mine = ids[owners == rank]
        assert np.all((mine >= bounds[rank]) & (mine < bounds[rank + 1]))
    assert owners.dtype == np.int32


def test_local_index_keeps_int32_ids():
    partition = RangePartition(np.array([0, 40, 100]))
    ids = np.array([40, 41, 99], np.int32)
    local = partition.local_index(ids, 1)
    np.testing.assert_array_equal(local, [0, 1, 59])
    assert local.dtype == np.int32


def test_hash_owner_owned_agree():
    partition = HashPartition(1000, 3)
    owners = partition.owner(np.arange(1000))
    for rank in range(3):
        np.testing.assert_array_equal(partition.owned(rank), np.flatnonzero(owners == rank))


@pytest.mark.parametrize("num_nodes,size", [(1, 2), (63, 3), (64, 2), (65, 3), (1000, 1), (100_003, 3)])
def test_hash_local_index_is_the_position_among_the_owned_ids(num_nodes, size):
    # local_index counts the owned ids below each id (a bit per vertex and a count per 64) instead of a
    # binary search per id, which at 10M vertices took 132 s of a PageRank's load; the answer is the same
    partition = HashPartition(num_nodes, size)
    for rank in range(size):
        owned = partition.owned(rank)
        rng = np.random.default_rng(rank)
        for dtype in (np.int32, np.int64):
            ids = owned[rng.integers(0, len(owned), 3 * len(owned))].astype(dtype) if len(owned) else owned
            positions = partition.local_index(ids, rank)
            assert positions.dtype == np.int32  # a rank owns fewer than 2**31 ids: half the bytes of int64
            assert np.array_equal(positions, np.searchsorted(owned, ids))
            assert np.array_equal(owned[positions], ids)


@pytest.mark.parametrize("partition", [HashPartition(100_003, 3), RangePartition(np.array([0, 30_000, 30_000, 100_003]))],
                         ids=["hash", "range"])
def test_owns_is_owner_equal_to_the_rank(partition):
    """``owns`` reads the hash's bit per vertex (no 8-byte temporary per id, as ``owner`` needs)."""
    ids = np.random.default_rng(5).integers(0, 100_003, 50_000)
    ids[:2] = [0, 100_002]
    owners = partition.owner(ids)
    for rank in range(3):
        for dtype in (np.int32, np.int64):
            mask = partition.owns(ids.astype(dtype), rank)
            assert mask.dtype == bool and np.array_equal(mask, owners == rank)


def test_hash_owner_is_fibonacci_hashing_without_temporaries():
    # the documented hash, in Python's exact integers: the high 32 of the low 64 bits of v * φ·2^64, mod P
    ids = np.concatenate([np.arange(1000), np.random.default_rng(3).integers(0, 2**40, 1000)])
    want = [((int(v) * 0x9E3779B97F4A7C15) % 2**64 >> 32) % 5 for v in ids]
    assert HashPartition(2**40, 5).owner(ids).tolist() == want
    small = ids[ids < 2**31]
    assert HashPartition(2**31, 5).owner(small.astype(np.int32)).tolist() == [w for v, w in zip(ids, want) if v < 2**31]
    # at load time it runs over a rank's every edge: the int32 result is all it allocates (the NumPy
    # expression held a uint64 copy of the ids beside it)
    import tracemalloc

    many = np.arange(1_000_000, dtype=np.int64)
    tracemalloc.start()
    HashPartition(10**6, 3).owner(many)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak <= 4 * len(many) + 65536, peak
