"""``pregel.column_slices``: which supersteps go a slice of columns at a time, and in which slices.

The slicing itself (exchange and gather per slice, equal to whole rows bit for bit) runs under
mpiexec in tests/test_engine.py (``WideMessages``) and tests/test_gnn_distributed.py (the ``sliced``
layout); here, the plan against slices worked out by hand, with a stand-in for the other ranks' votes.
"""

from types import SimpleNamespace

import numpy as np
import pytest

from pregel.column_slices import column_slices, default_ghost_memory
from pregel.exchange import Outgoing
from pregel.memory import available_memory, physical_memory


class VotingComm:
    """Two ranks: this one, and another whose (slices wanted, width) vote is ``other``."""

    size = 2

    def __init__(self, other):
        self.other = other

    def allgather(self, value):
        return [value, self.other]


def plan(ghosts, width, ghost_memory, other=(0, 0), combiner="sum", per_edge=False, dtype=np.float32):
    graph = SimpleNamespace(comm=VotingComm(other), num_ghosts=ghosts, num_local=3)
    program = SimpleNamespace(combiner=combiner, per_edge=per_edge)
    values = np.zeros((3, width), dtype)
    out = Outgoing(values, None, np.zeros(0, np.int64), values[:0], None)
    slices = column_slices(graph, program, out, ghost_memory)
    return None if slices is None else [(s.start, s.stop) for s in slices]


def test_rows_that_fit_go_whole():
    assert plan(1000, 10, 40_000) is None  # 1000 rows x 10 float32 columns: exactly 40,000 bytes


def test_rows_over_the_bound_go_in_nearly_equal_slices():
    assert plan(1000, 10, 39_999) == [(0, 5), (5, 10)]
    assert plan(1000, 10, 15_000) == [(0, 4), (4, 7), (7, 10)]  # 40,000 bytes in 3 slices of at most 16,000
    assert plan(1000, 10, 1) == [(c, c + 1) for c in range(10)]  # never narrower than a column
    assert plan(1000, 10, 16_000, dtype=np.float64) == [(0, 2), (2, 4), (4, 6), (6, 8), (8, 10)]  # 80,000 bytes


def test_every_rank_takes_the_most_slices_any_rank_asks_for():
    assert plan(10, 10, 40_000, other=(4, 10)) == [(0, 3), (3, 6), (6, 8), (8, 10)]
    # a rank without ghost rows or messages of its own still takes the others' slices of their width
    assert plan(0, 0, 40_000, other=(2, 6)) == [(0, 3), (3, 6)]


@pytest.mark.parametrize("combiner, per_edge", [("softmax", False), (None, False), ("sum", True)])
def test_combiners_that_mix_columns_are_never_sliced(combiner, per_edge):
    assert plan(1000, 10, 1, combiner=combiner, per_edge=per_edge) is None


def test_one_rank_never_slices():
    graph = SimpleNamespace(comm=SimpleNamespace(size=1), num_ghosts=0)
    values = np.zeros((3, 10), np.float32)
    out = Outgoing(values, None, np.zeros(0, np.int64), values[:0], None)
    assert column_slices(graph, SimpleNamespace(combiner="sum", per_edge=False), out, 1) is None


def test_the_default_bound_is_what_nine_tenths_of_the_available_memory_leaves_after_the_gathered_rows(
        monkeypatch):
    assert 0 < available_memory() <= physical_memory()
    for name in ("MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr("pregel.column_slices.available_memory", lambda: 40_000)
    assert default_ghost_memory(4, 1_000) == 8_000  # no launcher says: all 4 ranks on this machine
    monkeypatch.setenv("MPI_LOCALNRANKS", "2")
    assert default_ghost_memory(8, 1_000) == 17_000
    # 2 ranks here with 18,000 bytes each: 3 rows of 10 float32 columns gathered (120 bytes) leave 17,880
    # for 1000 ghost rows (40,000 bytes): 3 slices
    assert plan(1000, 10, None) == [(0, 4), (4, 7), (7, 10)]
    monkeypatch.setattr("pregel.column_slices.available_memory", lambda: 1_000)
    assert plan(1000, 10, None) == [(c, c + 1) for c in range(10)]  # nothing left: a column at a time
    monkeypatch.setattr("pregel.column_slices.available_memory", lambda: 1 / 0)
    assert plan(0, 10, None) is None  # no ghost rows: the memory is not read
