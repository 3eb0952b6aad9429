"""A thin layer over mpi4py: buffer (upper-case) methods for data, pickling only for control values.

With one rank every method returns early without calling MPI, so a single process works without
``mpiexec``; one that no MPI launcher started does not even initialise MPI (``world``: importing
mpi4py and ``MPI_Init`` cost about 0.06 s of every command's start-up), unless something asks it for
more than its rank and size.
"""

import math
import os
import sys
import time

import numpy as np

from pregel.errors import InputError


#: how long a waiting rank sleeps between looks at its pending messages (see ``Comm.waitsome``)
IDLE_POLL_SECONDS = 1e-4
#: the longest sleep between looks of an idle wait (``Comm.barrier(idle=True)``), which doubles from
#: ``IDLE_POLL_SECONDS``: a rank waiting seconds for another (rank 0 writing the outputs) wakes a few
#: hundred times a second at most, and notices the end at most this late
IDLE_POLL_MAX_SECONDS = 2e-3
#: where MPI launchers state how many ranks they started on this node (MPICH's Hydra, Open MPI)
LOCAL_RANKS_VARIABLES = ("MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE")
#: how MPI launchers' environment variables begin (MPICH's Hydra and Intel MPI: PMI_*, PMIx launchers
#: as Open MPI 5 and Slurm's srun: PMIX_*, Open MPI: OMPI_*, Slurm: SLURM_PROCID, MVAPICH: MV2_*,
#: HPE Cray: PALS_* and ALPS_*); a process with none of them was started alone
LAUNCHER_PREFIXES = ("PMI_", "PMIX_", "OMPI_", "MPI_LOCALNRANKS", "SLURM_PROCID", "MV2_", "PALS_", "ALPS_")


#: where MPI launchers state this process's rank (Hydra and Intel MPI, Open MPI, PMIx, Slurm, MVAPICH,
#: HPE Cray PALS and ALPS)
RANK_VARIABLES = ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID", "MV2_COMM_WORLD_RANK",
                  "PALS_RANKID", "ALPS_APP_PE")


def launched_rank() -> int:
    """This process's rank as its MPI launcher's environment states it, without initialising MPI (0 for a
    process started alone)."""
    for name in RANK_VARIABLES:
        value = os.environ.get(name, "")
        if value.isdigit():
            return int(value)
    return 0


def started_by_launcher() -> bool:
    """Whether an MPI launcher (``mpiexec``, ``srun``, ...) started this process, as its environment says."""
    return any(name.startswith(LAUNCHER_PREFIXES) for name in os.environ)


def world():
    """``MPI.COMM_WORLD``; or, in a process that no launcher started and that has not initialised MPI,
    an ``AloneWorld`` (rank 0 of 1) that initialises MPI only if asked for more than that."""
    mpi = sys.modules.get("mpi4py.MPI")
    if started_by_launcher() or (mpi is not None and mpi.Is_initialized()):
        from mpi4py import MPI

        return MPI.COMM_WORLD
    return AloneWorld()


class AloneWorld:
    """The world of a process started alone: rank 0 of 1, with MPI not initialised (``Comm`` at one rank
    calls nothing else). Any other attribute initialises MPI (a singleton world of one process, as
    MPICH and Open MPI start one without a launcher) and is ``MPI.COMM_WORLD``'s."""

    @staticmethod
    def Get_rank() -> int:  # noqa: N802 (mpi4py's name)
        return 0

    @staticmethod
    def Get_size() -> int:  # noqa: N802
        return 1

    def __getattr__(self, name):
        from mpi4py import MPI

        return getattr(MPI.COMM_WORLD, name)


def local_ranks() -> int | None:
    """How many ranks the launcher started on this node, or None when no launcher says."""
    for name in LOCAL_RANKS_VARIABLES:
        value = os.environ.get(name, "")
        if value.isdigit():
            return int(value)
    return None


def ranks_outnumber_cores() -> bool:
    """Whether the launcher started more ranks on this node than this process may use processors
    (as ``mpiexec -n 3`` on 2 cores); False when no launcher says how many ranks run here."""
    here = local_ranks()
    return here is not None and here > len(os.sched_getaffinity(0))


class Comm:
    """The communicator of a Pregel job: ``rank``, ``size`` and the collectives the engine uses.

    How a rank waits depends on whether the ranks outnumber the node's processors (``shares_cores``).
    If not, it waits inside MPI, which polls without pause and so notices a message at once. If so,
    a rank that polled would hold a processor that a computing rank needs: it looks, then sleeps
    ``IDLE_POLL_SECONDS``. (Blocking collectives still poll inside MPI: meeting at such a barrier
    before each was tried and made training at P = 3 on 2 cores slower, 12 against 15.5 steps/s.)
    """

    def __init__(self, mpi_comm=None):
        """``mpi_comm``: an mpi4py communicator (default: ``world()``)."""
        if mpi_comm is None:
            mpi_comm = world()
        self.mpi = mpi_comm
        self.rank = mpi_comm.Get_rank()
        self.size = mpi_comm.Get_size()
        self.shares_cores = self.size > 1 and ranks_outnumber_cores()

    # ------------------------------------------------------------------ data (buffers)

    def alltoallv(self, send: np.ndarray, send_counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Exchange variable-sized blocks: rank r gets block ``r`` of everyone's ``send``.

        ``send``: [sum(send_counts), ...] contiguous, blocks ordered by destination rank;
        ``send_counts``: [size] rows for each destination. Returns ``(received, recv_counts)`` with
        ``received`` ordered by source rank. Rows may have trailing dimensions (sent as a unit).
        """
        send = np.ascontiguousarray(send)
        send_counts = np.asarray(send_counts, dtype=np.int64)
        if self.size == 1:
            return send, send_counts
        recv_counts = self.alltoall_counts(send_counts)
        row = int(np.prod(send.shape[1:], dtype=np.int64))
        received = np.empty((int(recv_counts.sum()),) + send.shape[1:], dtype=send.dtype)
        self._alltoallv_rows(send, send_counts * row, received, recv_counts * row)
        return received, recv_counts

    def alltoallv_known(self, send: np.ndarray, send_counts, recv_counts) -> np.ndarray:
        """``alltoallv`` when the receive counts [size] are already known (no count exchange)."""
        send = np.ascontiguousarray(send)
        if self.size == 1:
            return send
        recv_counts = np.asarray(recv_counts, dtype=np.int64)
        row = int(np.prod(send.shape[1:], dtype=np.int64))
        received = np.empty((int(recv_counts.sum()),) + send.shape[1:], dtype=send.dtype)
        self._alltoallv_rows(send, np.asarray(send_counts, dtype=np.int64) * row, received,
                             recv_counts * row)
        return received

    def alltoall_counts(self, send_counts: np.ndarray) -> np.ndarray:
        """Each rank sends one int64 (or one row of int64s) to every rank: [size] or [size, k]."""
        send_counts = np.ascontiguousarray(send_counts, dtype=np.int64)
        if self.size == 1:
            return send_counts.copy()
        received = np.empty_like(send_counts)
        self.mpi.Alltoall(send_counts, received)
        return received

    def _alltoallv_rows(self, send, send_items, received, recv_items):
        item = send.dtype.itemsize
        self.alltoallv_bytes(_as_bytes(send), send_items * item, _as_bytes(received), recv_items * item)

    def alltoallv_bytes(self, send, send_bytes: np.ndarray, received, recv_bytes: np.ndarray) -> None:
        """One ``Alltoallv`` of contiguous blocks, counted in bytes: ``send_bytes`` [size] to each
        rank from the start of ``send``, ``recv_bytes`` [size] from each rank into ``received``.

        ``send`` and ``received`` are anything mpi4py takes as a buffer: host arrays, or device arrays
        (``__cuda_array_interface__``) when the MPI library is CUDA-aware (pregel/device_comm.py).
        """
        from mpi4py import MPI

        s_counts, r_counts = np.asarray(send_bytes, np.int64), np.asarray(recv_bytes, np.int64)
        s_displ = np.concatenate([[0], np.cumsum(s_counts)[:-1]])
        r_displ = np.concatenate([[0], np.cumsum(r_counts)[:-1]])
        if max(s_counts.sum(), r_counts.sum()) >= 2**31:
            raise ValueError("a single exchange over 2 GiB per rank: use more ranks")
        self.mpi.Alltoallv([send, (s_counts, s_displ), MPI.BYTE], [received, (r_counts, r_displ), MPI.BYTE])

    def gather_rows(self, rows: np.ndarray, root: int = 0) -> np.ndarray | None:
        """Concatenate every rank's ``rows`` [n_r, ...] in rank order on ``root`` (None elsewhere)."""
        rows = np.ascontiguousarray(rows)
        if self.size == 1:
            return rows
        from mpi4py import MPI

        out, layout = self._rows_layout(rows, allocate=self.rank == root)
        recv = [_as_bytes(out), layout, MPI.BYTE] if self.rank == root else None
        self.mpi.Gatherv([_as_bytes(rows), MPI.BYTE], recv, root=root)
        return out

    def allgather_rows(self, rows: np.ndarray) -> np.ndarray:
        """Every rank's ``rows`` [n_r, ...] concatenated in rank order, on every rank (the row counts
        exchanged, then one Allgatherv)."""
        if self.size == 1:
            return np.ascontiguousarray(rows)
        return self.allgather_known(rows, self.mpi.allgather(len(rows)))

    def allgather_known(self, rows: np.ndarray, counts) -> np.ndarray:
        """``allgather_rows`` when every rank's row count [size] is already known (one Allgatherv, no
        count exchange): rank r gives ``counts[r]`` rows."""
        rows = np.ascontiguousarray(rows)
        if self.size == 1:
            return rows
        from mpi4py import MPI

        out, layout = _known_layout(rows, np.asarray(counts, dtype=np.int64), allocate=True)
        self.mpi.Allgatherv([_as_bytes(rows), MPI.BYTE], [_as_bytes(out), layout, MPI.BYTE])
        return out

    def _rows_layout(self, rows: np.ndarray, allocate: bool):
        """(output array or None, (byte counts, byte displacements) per rank) for gathering ``rows``."""
        return _known_layout(rows, np.asarray(self.mpi.allgather(len(rows)), dtype=np.int64), allocate)

    # ------------------------------------------------------------------ point-to-point (non-blocking)
    # Used only with size > 1 (at one rank a runtime delivers locally). Buffers are contiguous
    # float32 arrays sent as MPI.FLOAT; a request keeps its buffer alive until it completes.

    def isend(self, buf: np.ndarray, dest: int, tag: int):
        """Start sending ``buf`` [n] float32 (contiguous) to ``dest``; returns the request."""
        from mpi4py import MPI

        return self.mpi.Isend([buf, MPI.FLOAT], dest=dest, tag=tag)

    def irecv(self, buf: np.ndarray, source: int, tag: int):
        """Start receiving into ``buf`` [n] float32 (contiguous) from ``source``; returns the request."""
        from mpi4py import MPI

        return self.mpi.Irecv([buf, MPI.FLOAT], source=source, tag=tag)

    @staticmethod
    def testsome(requests: list) -> list[int]:
        """Indices of the ``requests`` that completed now (possibly none); does not block."""
        from mpi4py import MPI

        return MPI.Request.Testsome(requests) or []

    def waitsome(self, requests: list, timeout: float | None = None) -> list[int]:
        """Block until at least one of the ``requests`` completes, or ``timeout`` seconds have passed (None:
        no limit); the indices of those that did (none after a timeout).

        Waits in MPI, or by looking (and, when the ranks share cores, sleeping between looks; see the class).
        """
        from mpi4py import MPI

        if timeout is None and not self.shares_cores:
            return MPI.Request.Waitsome(requests) or []
        end = math.inf if timeout is None else time.perf_counter() + timeout
        while True:
            done = MPI.Request.Testsome(requests)
            if done is None or done:  # None: no active request left
                return done or []
            if time.perf_counter() >= end:
                return []
            if self.shares_cores:
                time.sleep(IDLE_POLL_SECONDS)

    def waitall(self, requests: list, idle: bool = False) -> None:
        """Block until every one of the ``requests`` has completed (waiting like ``waitsome``; ``idle``:
        looking and sleeping longer and longer, whatever the cores, as ``barrier(idle=True)`` does)."""
        from mpi4py import MPI

        if not (self.shares_cores or idle):
            MPI.Request.Waitall(requests)
            return
        _look_and_sleep(lambda: MPI.Request.Testall(requests), idle)

    @property
    def tag_limit(self) -> int:
        """The largest message tag this MPI library accepts (``MPI.TAG_UB``, at least 32767)."""
        from mpi4py import MPI

        return self.mpi.Get_attr(MPI.TAG_UB)

    # ------------------------------------------------------------------ control values (pickled)

    def allgather(self, value) -> list:
        """Every rank's small ``value`` (pickled), in rank order."""
        if self.size == 1:
            return [value]
        return self.mpi.allgather(value)

    def bcast(self, value, root: int = 0, idle: bool = False):
        """``value`` from ``root`` on every rank. ``idle``: the others wait for ``root`` as
        ``barrier(idle=True)`` does (for a root that may be busy for long), then receive."""
        if self.size == 1:
            return value
        if idle:
            self.barrier(idle=True)
        return self.mpi.bcast(value, root=root)

    def barrier(self, idle: bool = False) -> None:
        """Wait until every rank has arrived (in MPI, or looking and sleeping like ``waitsome``).
        ``idle``: look and sleep whatever the cores, each sleep twice the last, from ``IDLE_POLL_SECONDS``
        up to ``IDLE_POLL_MAX_SECONDS`` (a wait that may last seconds, using almost no processor time)."""
        if self.size == 1:
            return
        if not (self.shares_cores or idle):
            self.mpi.Barrier()
            return
        _look_and_sleep(self.mpi.Ibarrier().Test, idle)

    def agree(self, error: InputError | None, value=None) -> list:
        """Collective check before continuing: if any rank hit an ``InputError``, all raise one.

        Every rank must call this at the same point. The first failing rank's message is raised
        everywhere, so the job ends cleanly with that message instead of hanging in a later
        collective that a failed rank never reaches. Otherwise returns every rank's small ``value``
        (pickled), in rank order: the same allgather carries it.
        """
        gathered = self.allgather((None if error is None else str(error), value))
        failed = [m for m, _ in gathered if m is not None]
        if failed:
            agreed = error if error is not None else InputError(failed[0])
            agreed.collective = True  # every rank raises it: no rank is left waiting
            raise agreed
        return [v for _, v in gathered]


def _look_and_sleep(done, idle: bool) -> None:
    """Call ``done()`` until it is true, sleeping ``IDLE_POLL_SECONDS`` between calls (``idle``: each sleep
    twice the last, up to ``IDLE_POLL_MAX_SECONDS``)."""
    pause = IDLE_POLL_SECONDS
    while not done():
        time.sleep(pause)
        if idle:
            pause = min(2 * pause, IDLE_POLL_MAX_SECONDS)


def _known_layout(rows: np.ndarray, counts: np.ndarray, allocate: bool):
    """(output array or None, (byte counts, byte displacements) per rank) for gathering ``rows`` [n_r,
    ...] of every rank, ``counts`` [size] int64 rows each."""
    row = int(np.prod(rows.shape[1:], dtype=np.int64))
    out = np.empty((int(counts.sum()),) + rows.shape[1:], dtype=rows.dtype) if allocate else None
    item_counts = counts * row * rows.dtype.itemsize
    return out, (item_counts, np.concatenate([[0], np.cumsum(item_counts)[:-1]]))


def _as_bytes(array: np.ndarray) -> np.ndarray:
    """A flat uint8 view of a contiguous array (an empty buffer for an empty one)."""
    return array.reshape(-1).view(np.uint8) if array.size else np.empty(0, np.uint8)
