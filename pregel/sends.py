"""A rank's point-to-point sends in dataflow mode: posted on the compute thread, or on a thread beside it.

``Sends`` posts each message on the caller's thread. ``SendThread`` hands them to a thread of their own that
posts them in the order given, so that the compute thread goes on to its next fire while the last fire's
messages are posted (``run_dataflow(send_thread=True)``, ``pregel train --send-thread``). On a GPU rank the
compute thread spends most of a fire waiting for the device (with Python's lock released), and the posting,
MPI's host time per message, then overlaps it; on ranks that compute on the processor cores it only moves
that time to another thread of the same cores. The simulator's ``CostProfile.host_sends`` charges this.
"""

import queue
import threading

#: Completed sends are collected once this many (then twice as many as remain open) have piled up.
SEND_CHECK = 16


class Requests:
    """Open non-blocking requests, each with an item kept until it completes (a buffer, a group).

    ``requests`` is the list to pass to ``testsome``/``waitsome``, which set completed entries
    to null; those are dropped once they are half of the list, so each completion costs O(1).
    """

    def __init__(self):
        self.requests, self.items, self.open = [], [], 0

    def add(self, request, item) -> None:
        """Keep ``request`` open with its ``item``."""
        self.requests.append(request)
        self.items.append(item)
        self.open += 1

    def completed(self, indices: list) -> list:
        """The items of the requests at ``indices`` (just completed), forgotten here."""
        items = [self.items[i] for i in indices]
        for i in indices:
            self.items[i] = None
        self.open -= len(indices)
        if 2 * self.open < len(self.requests):
            keep = [i for i, item in enumerate(self.items) if item is not None]
            self.requests = [self.requests[i] for i in keep]
            self.items = [self.items[i] for i in keep]
        return items

    def __bool__(self) -> bool:
        return self.open > 0


class Sends:
    """Non-blocking sends posted on the caller's thread; each buffer is kept alive until its send completes."""

    def __init__(self, comm):
        self.comm, self.open, self.next_check = comm, Requests(), SEND_CHECK

    def post(self, payload, dest: int, tag: int) -> None:
        """Start sending ``payload`` [n] float32 (contiguous) to rank ``dest`` with ``tag``."""
        self.open.add(self.comm.isend(payload, dest, tag), payload)
        if len(self.open.requests) >= self.next_check:
            self.open.completed(self.comm.testsome(self.open.requests))
            self.next_check = 2 * len(self.open.requests) + SEND_CHECK

    def close(self) -> None:
        """Wait until every send has completed."""
        self.comm.waitall(self.open.requests)


class SendThread:
    """``Sends`` posted by a thread of their own, in the order ``post`` is called. Needs MPI initialised with
    ``MPI_THREAD_MULTIPLE`` (mpi4py's default): the compute thread receives while this one sends. An error on
    this thread is raised on the compute thread by the next ``post`` or by ``close``."""

    def __init__(self, comm):
        self.sends, self.jobs, self.error = Sends(comm), queue.SimpleQueue(), None
        self.thread = threading.Thread(target=self._work, name="pregel-sends", daemon=True)
        self.thread.start()

    def post(self, payload, dest: int, tag: int) -> None:
        """Queue ``payload`` [n] float32 (contiguous) for rank ``dest`` with ``tag``; returns at once."""
        if self.error is not None:
            raise self.error
        self.jobs.put((payload, dest, tag))

    def _work(self) -> None:
        while True:
            job = self.jobs.get()
            if job is None:
                return
            if self.error is not None:
                continue
            try:
                self.sends.post(*job)
            except Exception as error:  # handed to the compute thread
                self.error = error

    def close(self) -> None:
        """Let this thread post what it was given and end, then wait until every send has completed."""
        self.jobs.put(None)
        self.thread.join()
        if self.error is not None:
            raise self.error
        self.sends.close()


def thread_multiple(comm) -> bool:
    """Whether MPI runs with ``MPI_THREAD_MULTIPLE`` (trivially true for a world of one process)."""
    if comm.size == 1:
        return True
    from mpi4py import MPI

    return MPI.Query_thread() == MPI.THREAD_MULTIPLE
