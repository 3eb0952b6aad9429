"""The garbage collector around a command: its heavy imports without collections, and nothing left for
the interpreter's collection at exit when the command line is the process's own."""

import gc
from contextlib import contextmanager

#: whether ``pregel.cli.main`` is running this process's own command line (the process ends with it)
_OWN_PROCESS = False


@contextmanager
def importing():
    """A command's imports of its heavy modules (numba, torch) without garbage collection: each full
    collection during them traverses every object imported so far (four of them, 0.15 s of
    ``pregel infer``'s start-up when it still imported torch), and what imports create lives as long as the process.
    On the process's own command line, what exists afterwards is then frozen out of later
    collections (``gc.freeze``), which would traverse it again (0.12 s more during the load)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if _OWN_PROCESS:
            gc.freeze()
        if enabled:
            gc.enable()


@contextmanager
def running_command(own_process: bool):
    """Around a command's run: ``own_process`` (the process's own command line, which ends with it) lets
    ``importing`` freeze what imports create, and leaves every object alive at the end out of the
    interpreter's collection at exit (``skip_collection_at_exit``)."""
    global _OWN_PROCESS
    _OWN_PROCESS = own_process
    try:
        yield
    finally:
        if own_process:
            skip_collection_at_exit()
        _OWN_PROCESS = False


def skip_collection_at_exit() -> None:
    """Exclude every object alive now from the garbage collector (``gc.freeze``), so that the
    interpreter's collection at exit does not traverse them: after ``pregel run pagerank`` on 1M
    vertices that collection took 0.1-0.15 s of the command's 1.3 s. The process ends next and its
    memory with it (``end_process``, or the interpreter's own exit where that returns); ``atexit``
    functions, HDF5's closing of open files and MPI's finalisation run as before. What no longer
    happens is the finalisation of objects kept alive only by reference cycles (every command closes
    its own files before it returns)."""
    gc.freeze()
