"""Numbering integer ids through a table over their range (``pregel.id_table``) against NumPy's
``np.unique(return_inverse=True)`` and a dict of the node ids."""

import numpy as np

from pregel.id_table import id_bounds, node_ids_table, positions, used_ids_table


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
