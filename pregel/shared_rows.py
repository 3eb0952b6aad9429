"""Ghost rows between the ranks of one machine through an MPI-3 shared-memory window: one copy.

Each rank owns one segment of a window that every rank of the machine maps
(``MPI_Win_allocate_shared``): the room for its ghost rows, grouped by owner rank as in the
exchange plan. A sender takes the rows a rank needs straight from its message array into that
rank's segment (``np.take(..., out=)``, the only copy: no send buffer, no MPI transfer, no receive
buffer), then all ranks meet at a barrier and each reads its segment where it lies. Over
``Alltoallv`` the same rows are taken into a send buffer, copied by MPI into its own shared buffers
and out again into the receiver's array.

Memory: a page of a segment that both the sender and the receiver touched counts in the resident
size of both, and the window's pages are small ones (4 KiB: no transparent huge pages for shared
memory here), whose faults cost several microseconds each on this machine. So an exchange of up to
``KEEP_BELOW`` bytes (per rank, sent or received) leaves its pages mapped: the next exchanges
write and read them without a fault, for twice the bytes in the resident sizes. Above it, a sender
writes in slices of ``SLICE_BYTES`` and drops each slice from its own page tables once written
(``madvise(MADV_DONTNEED)``: the page stays in the window), and a receiver's segment is emptied
(``madvise(MADV_REMOVE)``) as soon as no array refers to the rows it was handed: the rows are
resident from the exchange to the end of the gather, on the receiver only, as a private receive
buffer would be, and the next exchange faults its pages in again.

So above ``KEEP_BELOW`` every exchange through the window faults its small pages in, while
``Alltoallv``'s send and receive buffers are NumPy arrays, which the kernel may back with
transparent huge pages (NumPy asks for them: one fault per 2 MiB). Measured at 10M vertices / 100M
edges, P = 2 (docs/performance-history.md, "100M edges"): the first GNN layer's exchange (1.15 GB a rank; ``Alltoallv``'s
buffers over glibc's ``mmap`` threshold ``pregel.memory.HEAP_BLOCK_LIMIT``) is faster through the
window, the second's (288 MB a rank; buffers under it) by ``Alltoallv``. A rank whose window would
run emptied and whose ``Alltoallv`` buffers come from the heap flags ``ALLTOALLV``
(``prefers_alltoallv``); when every rank does, the exchange goes by ``Alltoallv``.

A segment is rewritten only when its rank holds no array over it (``busy``); the window grows
(collectively: every rank frees and allocates) when some rank needs a larger segment. The header of
``pregel.exchange`` carries the three flags, so every rank takes the same path.
"""

import ctypes
import ctypes.util
import functools
import mmap
import weakref

import numpy as np

from pregel.memory import HEAP_BLOCK_LIMIT

#: exchanges up to this many bytes a rank keep their pages mapped for the next (see the module's doc)
KEEP_BELOW = 256 << 20
#: above it, rows are written in slices of about this many bytes, each dropped from the sender's pages
SLICE_BYTES = 16 << 20
_MADV_DONTNEED, _MADV_REMOVE = 4, 9
#: flags a rank puts in its exchange header: its segment still in use, or too small; ``Alltoallv``
#: preferred here (``prefers_alltoallv``)
BUSY, GROW, ALLTOALLV = 1, 2, 4
_WINDOWS = weakref.WeakKeyDictionary()  # pregel.comm.Comm -> SharedRows (or None: not one machine)


def shared_rows(comm):
    """The ``SharedRows`` of ``comm``, made on the first call (collective), or None when its ranks
    are not all on one machine (or there is one rank)."""
    if comm not in _WINDOWS:
        _WINDOWS[comm] = SharedRows(comm) if comm.size > 1 and _one_machine(comm) else None
    return _WINDOWS[comm]


def _one_machine(comm) -> bool:
    from mpi4py import MPI

    node = comm.mpi.Split_type(MPI.COMM_TYPE_SHARED)
    whole = node.Get_size() == comm.size
    node.Free()
    return whole


class SharedRows:
    """One rank's view of the window: every rank's segment, and which of its own is in use."""

    def __init__(self, comm):
        self.comm, self.window, self.segments = comm, None, []
        self._handed = None  # weak reference to the array last handed out over this rank's segment

    def flags(self, need_bytes: int) -> int:
        """This rank's header flags for an exchange that receives ``need_bytes`` of ghost rows."""
        busy = self._handed is not None and self._handed() is not None
        small = need_bytes > (len(self.segments[self.comm.rank]) if self.segments else -1)
        return (BUSY if busy else 0) | (GROW if small else 0)

    def grow(self, need_bytes: int) -> None:
        """Collectively free the window and allocate one where this rank's segment holds ``need_bytes``
        (at least its current size; rounded up to whole pages)."""
        from mpi4py import MPI

        size = max(need_bytes, len(self.segments[self.comm.rank]) if self.segments else 0)
        size = -(-size // mmap.PAGESIZE) * mmap.PAGESIZE
        if self.window is not None:
            self.segments = []
            self.window.Unlock_all()
            self.window.Free()
        self.window = MPI.Win.Allocate_shared(size, 1, comm=self.comm.mpi)
        self.window.Lock_all()
        self.segments = [np.frombuffer(self.window.Shared_query(r)[0], np.uint8) for r in range(self.comm.size)]

    def transfer(self, values: np.ndarray, send_index: np.ndarray, send_counts: np.ndarray,
                 offsets: np.ndarray, received: int, keep: bool = True) -> np.ndarray:
        """Write the rows ``values[send_index]`` ([s, ...], grouped by destination, ``send_counts``
        [size] each) into the destinations' segments at row ``offsets`` [size], meet every rank, and
        return this rank's ``received`` ghost rows [received, ...] (a view of its segment). ``keep``:
        an exchange up to ``KEEP_BELOW`` bytes leaves its pages mapped (False: every exchange empties
        them, as larger ones do: for an exchange cut to hold less, ``pregel.column_slices``)."""
        row_shape, dtype = values.shape[1:], values.dtype
        width = values[:1].nbytes if len(values) else dtype.itemsize * int(np.prod(row_shape, dtype=np.int64))
        keep_below = KEEP_BELOW if keep else -1
        drop = len(send_index) * width > keep_below
        rows_per_slice = max(1, SLICE_BYTES // max(width, 1)) if drop else len(send_index)
        starts = np.concatenate([[0], np.cumsum(send_counts)])
        for q in np.flatnonzero(send_counts):
            target = self.segments[q][offsets[q] * width:(offsets[q] + send_counts[q]) * width]
            target = target.view(dtype).reshape((-1,) + row_shape)
            for first in range(0, len(target), rows_per_slice):
                part = target[first:first + rows_per_slice]
                picked = send_index[starts[q] + first:starts[q] + first + len(part)]
                np.take(values, picked, axis=0, out=part, mode="clip")  # the plan's ids are in range: unbuffered
                if drop:
                    _advise(part, _MADV_DONTNEED)
        self.window.Sync()
        self.comm.barrier()
        self.window.Sync()
        base = self.segments[self.comm.rank][:received * width]
        handed = np.frombuffer(memoryview(base), np.uint8)  # over a buffer object: every view of it hangs from it
        self._handed = weakref.ref(handed)
        if base.nbytes > keep_below:
            weakref.finalize(handed, _advise, base, _MADV_REMOVE)
        return handed.view(dtype).reshape((received,) + row_shape)


def prefers_alltoallv(sent_bytes: int, received_bytes: int, buffer_bytes: int) -> int:
    """``ALLTOALLV`` when an exchange that sends ``sent_bytes`` and receives ``received_bytes`` on a
    rank would run through emptied pages of the window there (either above ``KEEP_BELOW``) while the
    largest of ``Alltoallv``'s buffers, ``buffer_bytes``, comes from the heap (at most
    ``pregel.memory.HEAP_BLOCK_LIMIT``); else 0 (see the module's doc)."""
    emptied = max(sent_bytes, received_bytes) > KEEP_BELOW
    return ALLTOALLV if emptied and buffer_bytes <= HEAP_BLOCK_LIMIT else 0


def _advise(array: np.ndarray, advice: int) -> None:
    """``madvise`` over the whole pages inside ``array``'s bytes (the ends of partial pages are left)."""
    start = array.ctypes.data
    first = -(-start // mmap.PAGESIZE) * mmap.PAGESIZE
    last = (start + array.nbytes) // mmap.PAGESIZE * mmap.PAGESIZE
    if last > first:
        _libc().madvise(first, last - first, advice)


@functools.cache
def _libc():
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    libc.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    return libc
