"""Ctrl-C under ``mpiexec``: one line and exit status 130 on every rank, even one waiting inside MPI.

A rank blocked in an MPI call (a barrier, a collective) runs no Python code, so it would never see a
``KeyboardInterrupt``. Instead every rank blocks SIGINT in its threads and one small thread waits for
it: on Ctrl-C (the launcher forwards it to every rank) that thread prints the rank's line and ends the
process with status 130. One process alone keeps Python's own ``KeyboardInterrupt`` (see
``pregel.cli.launch``).
"""

import os
import signal
import threading

EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report a command ended by Ctrl-C
#: seconds a rank waits after its line, so the launcher forwards it before the job is torn down
FORWARD_SECONDS = 0.5
_INTERRUPTED = threading.Event()


def interrupted() -> bool:
    """Whether this rank has taken Ctrl-C (``exit_on_interrupt``): its line is printed and the process ends
    within ``FORWARD_SECONDS``. An error the main thread meets meanwhile (MPI's, as a rank that was faster
    leaves) is the interrupt's echo, not news."""
    return _INTERRUPTED.is_set()


def await_exit() -> None:
    """Block the calling thread for good: after an interrupt, the interrupt thread ends the process."""
    threading.Event().wait()


def exit_on_interrupt(command: str) -> bool:
    """Under an MPI launcher with more than one rank (MPICH's ``PMI_SIZE``), make Ctrl-C print
    ``pregel COMMAND [rank R]: interrupted`` and exit 130 on this rank; returns whether it did. Call
    before any other thread starts (threads inherit the blocked signal)."""
    if int(os.environ.get("PMI_SIZE", 1)) <= 1:
        return False
    rank = os.environ.get("PMI_RANK", "?")
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})

    def wait() -> None:
        signal.sigwait({signal.SIGINT})
        _INTERRUPTED.set()
        os.write(2, f"pregel {command} [rank {rank}]: interrupted\n".encode())  # one write: one whole line
        threading.Event().wait(FORWARD_SECONDS)
        os._exit(EXIT_INTERRUPTED)

    threading.Thread(target=wait, name="pregel-interrupt", daemon=True).start()
    return True
