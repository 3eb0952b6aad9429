"""Ending a command's process without the interpreter's teardown.

Once ``pregel`` has run its command, what is left of the process is the interpreter's teardown: the
objects of every module freed one by one, then the libraries' own destructors (torch unregisters
its thousands of operators one at a time). None of it writes anything, and it took 0.1-0.25 s of
``pregel infer`` (0.02-0.05 s of ``pregel run pagerank``) after the result file was complete.
``end_process`` does what must happen at exit (Python's ``atexit`` functions, MPI's finalisation,
flushing Python's and C's output buffers) and ends the process there (``os._exit``). Where the
teardown could still matter (another thread is running, an HDF5 file is open) it returns, and the
interpreter ends the process as usual.
"""

import atexit
import ctypes
import os
import sys
import threading


def end_process(code: int) -> None:
    """End this process with exit status ``code`` after its ``atexit`` functions, MPI's
    finalisation and flushing its output; returns (doing nothing) if another thread runs or an
    HDF5 file is open."""
    run_exit_functions = getattr(atexit, "_run_exitfuncs", None)
    if run_exit_functions is None or threading.active_count() > 1 or _open_hdf5_files():
        return
    run_exit_functions()
    _finalize_mpi()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe or stream: as at the interpreter's own exit
            pass
    _flush_c_streams()
    os._exit(code)


def _open_hdf5_files() -> int:
    """How many HDF5 files this process has open (0 when h5py was never imported)."""
    h5py = sys.modules.get("h5py")
    return 0 if h5py is None else h5py.h5f.get_obj_count(h5py.h5f.OBJ_ALL, h5py.h5f.OBJ_FILE)


def _finalize_mpi() -> None:
    """``MPI_Finalize`` where this process initialised MPI (mpi4py would at the interpreter's end)."""
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized():
        mpi.Finalize()


def _flush_c_streams() -> None:
    """``fflush(NULL)``: what C libraries (HDF5, MPI) wrote with stdio and is still buffered."""
    try:
        ctypes.CDLL(None).fflush(None)
    except (OSError, AttributeError):
        pass
