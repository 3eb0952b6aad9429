"""Atomic file writes: a file appears at its path complete, or not at all.

Everything the project writes (graph, result, scene, model and PLY files) goes through
``atomic_output``: the content is written to a temporary file in the target's folder, which is
renamed onto the target only when writing succeeded; on any error it is removed and an earlier
file at the target is left untouched.
"""

import os
import tempfile
from contextlib import contextmanager
from pathlib import Path

import h5py

from pregel.errors import InputError


def check_writable(path) -> None:
    """``InputError`` unless a file can be written at ``path`` (its folder exists, it is no folder).

    Long jobs call this before they start, so a bad ``--out`` fails at once, not after the work.
    """
    path = Path(path)
    if not path.parent.resolve().is_dir():
        raise InputError.at(path, None, f"cannot write: its folder {path.parent} does not exist")
    if path.is_dir():
        raise InputError.at(path, None, "cannot write: is a directory")


@contextmanager
def atomic_output(path, suffix: str = ".tmp"):
    """Yield a temporary path beside ``path``; rename it onto ``path`` when the block succeeds."""
    check_writable(path)
    path = Path(path)
    handle, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=suffix, dir=path.parent)
    os.close(handle)
    try:
        yield temp
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


@contextmanager
def atomic_h5(path):
    """An ``h5py.File`` open for writing that appears at ``path`` only once complete."""
    with atomic_output(path, ".h5") as temp, h5py.File(temp, "w") as f:
        yield f
