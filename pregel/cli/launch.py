"""A parsed command's run and how it ends: its files checked (``files``), then the command; bad input as
one line and exit status 2, running out of memory as one line and 3, Ctrl-C in a process alone as one line
and 130 (under mpiexec: ``pregel.interrupt``), any other error of one of several MPI ranks as a traceback
that aborts every rank."""

import os
import sys
import time

from pregel.cli.common import first_line, as_flags
from pregel.cli.files import FILES
from pregel.comm import launched_rank
from pregel.errors import InputError
from pregel.interrupt import EXIT_INTERRUPTED, await_exit, interrupted
from pregel.memory import out_of_memory
from pregel.outputs import check_outputs

#: the commands that run on every rank of an MPI job; the others run in one process, on rank 0 alone
#: when launched on several (``pregel.cli.main``: the other ranks exit at once, without initialising MPI)
DISTRIBUTED = ("run", "infer", "train")
EXIT_BAD_INPUT = 2
EXIT_OUT_OF_MEMORY = 3
EXIT_BROKEN_PIPE = 128 + 13  # as a process that SIGPIPE ended (the shell's status for `yes | head -1`'s yes)
ABORT_GRACE_SECONDS = 1.0


def run_parsed(args) -> int:
    """``main`` after parsing: run ``args.command``; the exit status."""
    try:
        try:
            check_outputs(**FILES[args.command](args))
        except InputError as err:
            err.collective = True  # every rank checks the same paths
            raise
        args.run(args)
    except InputError as err:
        rank, size = _mpi_world(args.command)
        if interrupted():  # Ctrl-C under mpiexec: its line is printed, and its thread ends the process
            await_exit()
        if size == 1 or getattr(err, "collective", False):
            if rank == 0:
                print(f"pregel {args.command}: error: {as_flags(str(err), vars(args))}", file=sys.stderr)
            return EXIT_BAD_INPUT
        print(f"pregel {args.command} [rank {rank}]: error: {as_flags(str(err), vars(args))}", file=sys.stderr,
              flush=True)
        _abort(EXIT_BAD_INPUT)  # MPICH may return from the abort while it tears the job down
        return EXIT_BAD_INPUT
    except BaseException as err:  # sys.exit or KeyboardInterrupt in a hook must not leave other ranks waiting
        rank, size = _mpi_world(args.command)
        if interrupted():  # Ctrl-C under mpiexec: its line is printed, and its thread ends the process
            await_exit()
        if caused_by_interrupt(err) and size == 1:  # Ctrl-C (under mpiexec: pregel.interrupt)
            print(f"pregel {args.command}: interrupted", file=sys.stderr)
            return EXIT_INTERRUPTED
        if isinstance(err, BrokenPipeError) and size == 1:  # `pregel inspect g.h5 | head -1`: the reader left
            _discard_stdout()
            return EXIT_BROKEN_PIPE
        memory = out_of_memory(err)
        if memory is not None:  # one line, not a traceback; under mpiexec it ends every rank
            print(f"pregel {args.command}{f' [rank {rank}]' if size > 1 else ''}: error: {memory}", file=sys.stderr,
                  flush=True)
            if size > 1:
                _abort(EXIT_OUT_OF_MEMORY)  # MPICH may return from the abort while it tears the job down
            return EXIT_OUT_OF_MEMORY
        _name_user_code(args, err, f" [rank {rank}]" if size > 1 else "")
        if size == 1:
            raise
        import traceback

        print(f"pregel {args.command} [rank {rank}]: unexpected error, aborting all {size} ranks:",
              file=sys.stderr)
        traceback.print_exc()
        sys.stderr.flush()
        _abort(1)
        return 1
    return 0


def caused_by_interrupt(err: BaseException) -> bool:
    """Whether Ctrl-C raised ``err``: a ``KeyboardInterrupt``, or an error raised while handling one or
    from one (a compiled function that meets it, such as a Numba dispatcher loading from its cache, reports
    a ``SystemError`` caused by it)."""
    seen = set()
    while err is not None and id(err) not in seen:
        if isinstance(err, KeyboardInterrupt):
            return True
        seen.add(id(err))
        err = err.__cause__ or err.__context__
    return False


def _discard_stdout() -> None:
    """Point stdout at /dev/null: what is still buffered for a reader that closed the pipe is dropped
    instead of failing again (with a traceback) when the process flushes it at exit."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    finally:
        os.close(devnull)


def _mpi_world(command: str):
    """(rank, size) of ``command``'s job: (0, 1) for a one-process command (its other ranks have left);
    when MPI is already initialised by this process, its world's; else the rank as the launcher states
    it (``pregel.comm.launched_rank``) and the size as MPICH's sets it (or 1)."""
    if command not in DISTRIBUTED:
        return 0, 1
    mpi4py = sys.modules.get("mpi4py.MPI")
    if mpi4py is None or not mpi4py.Is_initialized() or mpi4py.Is_finalized():
        return launched_rank(), int(os.environ.get("PMI_SIZE", 1))
    return mpi4py.COMM_WORLD.Get_rank(), mpi4py.COMM_WORLD.Get_size()


def _name_user_code(args, error: BaseException, where: str) -> None:
    """Before the traceback of an error raised in the user's vertex program (``run FILE.py:CLASS``), one
    line naming the file, the hook and the rank."""
    from pregel.hooks import user_frame

    path = getattr(args, "algorithm", "").rpartition(":")[0]
    frame = user_frame(error, path) if path.endswith(".py") and os.path.isfile(path) else None
    if frame is not None:
        line = (f"pregel {args.command}{where}: your program {path} failed in {frame[0]}() at line {frame[1]}: "
                f"{type(error).__name__}: {first_line(error)}\n")
        sys.stderr.flush()
        os.write(2, line.encode())  # one write: ranks failing together do not split each other's lines


def _abort(code: int) -> None:
    """Abort every rank, after giving the launcher a moment to forward this rank's message (MPICH
    drops output still in flight when the job is torn down)."""
    from mpi4py import MPI

    sys.stderr.flush()
    time.sleep(ABORT_GRACE_SECONDS)
    MPI.COMM_WORLD.Abort(code)
