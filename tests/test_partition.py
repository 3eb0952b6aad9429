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
