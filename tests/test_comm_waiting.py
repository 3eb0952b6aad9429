"""How ranks wait (pregel.comm): inside MPI when each has a processor, asleep between looks when the
ranks outnumber the processors, so that waiting ranks leave the processors to computing ones.

The policy is tested directly: which wait ``Comm`` chooses for which rank and processor counts (oracle:
the launcher's rank count on the node against ``os.sched_getaffinity``), and that the sharing wait
sleeps between looks until the message is there while the other never sleeps. How much processor time
each wait uses depends on the machine's load, so it is measured by benchmarks/comm_waiting.py.
"""
import os

import numpy as np
import pytest
from mpi4py import MPI

from pregel import comm as comm_module
from pregel.comm import Comm, ranks_outnumber_cores

CORES = len(os.sched_getaffinity(0))
LAUNCHER_VARIABLES = ("MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE")


@pytest.mark.parametrize("variable", LAUNCHER_VARIABLES)
def test_ranks_outnumber_cores_reads_the_launchers_count(monkeypatch, variable):
    for name in LAUNCHER_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    assert not ranks_outnumber_cores()  # no launcher: MPI's own waiting
    monkeypatch.setenv(variable, str(CORES))
    assert not ranks_outnumber_cores()
    monkeypatch.setenv(variable, str(CORES + 1))
    assert ranks_outnumber_cores()


class _World:
    """The size of a job of ``size`` ranks, as ``Comm`` reads it."""

    def __init__(self, size):
        self.size = size

    def Get_rank(self):
        return 0

    def Get_size(self):
        return self.size


@pytest.mark.parametrize("size, local", [(1, 1), (1, CORES + 1), (2, 2), (CORES, CORES), (CORES + 1, CORES + 1),
                                         (2 * CORES + 2, CORES + 1), (2 * CORES, CORES)])
def test_ranks_share_cores_exactly_when_more_than_one_runs_and_they_outnumber_the_processors(monkeypatch, size,
                                                                                             local):
    for name in LAUNCHER_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MPI_LOCALNRANKS", str(local))
    assert Comm(_World(size)).shares_cores == (size > 1 and local > CORES)


def one_message_during_nap(monkeypatch, shares_cores: bool, nap_number: int):
    """(comm on COMM_SELF with ``shares_cores``, the buffer to receive into, the values sent, the sends, the
    naps taken): ``time.sleep`` recorded instead of slept, sending the message during nap ``nap_number``."""
    comm = Comm(MPI.COMM_SELF)
    comm.shares_cores = shares_cores
    received, sent = np.zeros(4, np.float32), np.arange(4, dtype=np.float32)
    sends, naps = [], []

    def nap(seconds):
        naps.append(seconds)
        if len(naps) == nap_number:
            sends.append(comm.isend(sent, 0, 5))

    monkeypatch.setattr(comm_module.time, "sleep", nap)
    return comm, received, sent, sends, naps


@pytest.mark.parametrize("shares_cores", [False, True])
def test_a_rank_that_shares_cores_sleeps_between_looks_and_one_that_does_not_never_sleeps(monkeypatch, shares_cores):
    comm, received, sent, sends, naps = one_message_during_nap(monkeypatch, shares_cores, 1)
    request = comm.irecv(received, 0, 5)
    if not shares_cores:  # MPI's own wait blocks until the message is there: send it first
        sends.append(comm.isend(sent, 0, 5))
    assert comm.waitsome([request]) == [0]
    comm.waitall(sends)
    np.testing.assert_array_equal(received, sent)
    assert naps == ([comm_module.IDLE_POLL_SECONDS] if shares_cores else [])


@pytest.mark.parametrize("shares_cores", [False, True])
def test_an_idle_waitall_sleeps_twice_as_long_each_time_up_to_the_cap_whatever_the_cores(monkeypatch, shares_cores):
    comm, received, sent, sends, naps = one_message_during_nap(monkeypatch, shares_cores, 7)
    monkeypatch.setattr(comm_module, "IDLE_POLL_SECONDS", 1e-4)
    monkeypatch.setattr(comm_module, "IDLE_POLL_MAX_SECONDS", 2e-3)
    comm.waitall([comm.irecv(received, 0, 5)], idle=True)
    comm.waitall(sends)
    np.testing.assert_array_equal(received, sent)
    assert naps == pytest.approx([1e-4, 2e-4, 4e-4, 8e-4, 1.6e-3, 2e-3, 2e-3])
