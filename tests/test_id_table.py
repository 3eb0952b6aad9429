"""Numbering integer ids through a table over their range (``pregel.id_table``) against NumPy's
``np.unique(return_inverse=True)`` and a dict of the node ids."""

import numpy as np
import pytest

from pregel.id_table import DistinctIds, id_bounds, node_ids_table, positions, unique_inverse, used_ids_table


def test_used_ids_are_numpy_s_unique_and_positions_its_inverse():
    rng = np.random.default_rng(1)
    chunks = [rng.integers(-40, 60, size) for size in (0, 17, 300, 1)]
    joined = np.concatenate(chunks)
    expected_ids, inverse = np.unique(joined, return_inverse=True)
    ids, table, lo = used_ids_table(chunks, max_range=100)
    assert ids.dtype == np.int64 and np.array_equal(ids, expected_ids)
    found, bad = positions(chunks, table, lo)
    assert bad == -1 and found.dtype == np.int32 and np.array_equal(found, inverse)
    assert used_ids_table(chunks, max_range=99) is None  # the range is 100 ids wide
    assert used_ids_table([np.zeros(0, np.int64)], max_range=10) is None and id_bounds([]) is None


def test_node_ids_number_by_row_and_the_first_unknown_id_is_found():
    node_ids = np.array([30, -5, 7, 12, 0], np.int64)
    row_of = {v: i for i, v in enumerate(node_ids.tolist())}
    table, lo = node_ids_table(node_ids, max_range=36)
    edges = [np.array([7, 30, -5]), np.array([0, 12, 12, 30])]
    found, bad = positions(edges, table, lo)
    assert bad == -1 and found.tolist() == [row_of[v] for v in np.concatenate(edges).tolist()]
    for unknown in (8, 31, -6, 10**12):  # a gap, past either end, far outside
        _, bad = positions([np.array([7, 30]), np.array([12, unknown, 8])], table, lo)
        assert bad == 3
    assert node_ids_table(node_ids, max_range=35) is None


# keys within the table's range (from 0, or far from it), and spread far beyond it
@pytest.mark.parametrize("spread, offset", [(1, 0), (1, 10**12), (1000, 0)])
def test_unique_inverse_matches_numpy(spread, offset):
    # the remote sources of a symmetric program's (wcc's) edges arrive in no order: a table over their
    # range numbers them as np.unique does, in O(E + range); spread far beyond it, NumPy's sort does
    rng = np.random.default_rng(9)
    for dtype in (np.int32, np.int64) if offset == 0 else (np.int64,):
        keys = (rng.integers(0, 500, size=2000) * spread + offset).astype(dtype)
        unique, inverse = unique_inverse(keys)
        expected_unique, expected_inverse = np.unique(keys, return_inverse=True)
        assert unique.dtype == np.int64 and np.array_equal(unique, expected_unique)
        assert np.array_equal(inverse, expected_inverse.reshape(-1))
    assert len(unique_inverse(np.zeros(0, np.int64))[0]) == 0


@pytest.mark.parametrize("spread", [1, 1000], ids=["table", "sort"])
def test_labels_of_the_distinct_ids_reach_every_value(spread):
    # the load labels each distinct ghost source once (its column), then every edge through the table
    rng = np.random.default_rng(4)
    values = (rng.integers(0, 300, size=1000) * spread).astype(np.int32)
    expected_ids, inverse = np.unique(values, return_inverse=True)
    for labels in (rng.permutation(len(expected_ids)).astype(np.int32),  # fits the table's int32 entries
                   np.arange(len(expected_ids), dtype=np.int64) + 2**31):  # wider: looked up by position
        distinct = DistinctIds(values)
        assert np.array_equal(distinct.ids, expected_ids)
        labelled = distinct.labels_of(labels)
        assert np.array_equal(labelled, labels[inverse.reshape(-1)])
        assert labelled.dtype == (np.int64 if labels.max() >= 2**31 else labels.dtype if spread > 1 else np.int32)
