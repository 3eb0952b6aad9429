"""Checks of what a vertex program's hooks return, and the line that names a failing user hook.

A hook that returns the wrong thing (``output()`` with other than one row per owned vertex, a float
``active`` array, float ids to ``ctx.send_to``, a combiner that does not exist) is reported by
``program_error`` as one ``InputError`` naming the program's file, class and hook, where the engine
receives it. An exception raised inside the user's own code keeps its traceback; ``user_frame`` finds
the hook and line to name first (``pregel.cli.launch``).
"""

import inspect
import os
import traceback

import numpy as np

from pregel.errors import InputError


def program_file(program) -> str:
    """The file that defines ``program``'s class (its module name when it has none)."""
    try:
        return inspect.getsourcefile(type(program)) or type(program).__module__
    except TypeError:  # a built-in class
        return type(program).__module__


def program_error(program, hook: str, problem: str) -> InputError:
    """The one-line error for ``problem`` with what ``program``'s ``hook`` returned."""
    return InputError(f"{program_file(program)}: {type(program).__name__}.{hook}(): {problem}")


def check_rows(program, hook: str, values, n: int):
    """``values`` unless it lacks one row per owned vertex (``n``): then ``program_error``."""
    rows = values.shape[0] if np.ndim(values) else None
    if rows != n:
        got = "a scalar" if rows is None else f"{rows} rows"
        raise program_error(program, hook, f"returned {got}; it must return one row per owned vertex ({n})")
    return values


def check_active(program, hook: str, active, n: int) -> None:
    """``program_error`` unless ``active`` (an array from ``hook``) is bool [n]."""
    if str(active.dtype).rpartition(".")[2] != "bool":  # numpy or torch
        raise program_error(program, hook, f"active must be a bool or a bool [{n}] array, got {active.dtype}")
    if tuple(active.shape) != (n,):
        raise program_error(program, hook, f"active must be a bool or a bool [{n}] array, got shape "
                                           f"{tuple(active.shape)}")


def check_combiners(program, allowed) -> None:
    """``program_error`` when a combiner of ``program.combiners()`` is not one of ``allowed``."""
    for user, combiner in program.combiners().items():
        if combiner not in allowed:
            raise program_error(program, "combiner", f"{user} uses combiner {combiner!r}; it must be one of "
                                                     f"{', '.join(map(repr, allowed))}")


def user_frame(error: BaseException, path) -> tuple | None:
    """(hook, line) of the user's file ``path`` in ``error``'s traceback: the first function of that file
    the engine called, and the line of the file where the error was raised (None if it never ran there)."""
    frames = [f for f in traceback.extract_tb(error.__traceback__)
              if os.path.exists(f.filename) and os.path.samefile(f.filename, path)]
    return (frames[0].name, frames[-1].lineno) if frames else None
