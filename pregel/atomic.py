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
    """``InputError`` unless a file can be written at ``path``: its folder exists and a file can be
    created in it, and it is no folder.

    Every command calls this before it starts (through ``pregel.outputs.check_outputs``, which also
    keeps outputs off the inputs), so a bad ``--out`` fails at once, not after the work.
    """
    path = Path(path)
    if not path.parent.resolve().is_dir():
        raise InputError.at(path, None, f"cannot write: its folder {path.parent} does not exist")
    if path.is_dir():
        raise InputError.at(path, None, "cannot write: is a directory")
    if path.exists() and not path.is_file():
        # the result is renamed into place, which would replace the device or pipe itself (as root,
        # --out /dev/null left /dev/null a regular file)
        raise InputError.at(path, None, "cannot write: is a device, pipe or socket, not a regular file; "
                                        "results are written to a new file renamed onto the path")
    _close_and_remove(_temp_file(path, ".probe"))


def _temp_file(path: Path, suffix: str) -> tuple[int, str]:
    """A new hidden temporary file beside ``path``: (open handle, its path)."""
    try:
        return tempfile.mkstemp(prefix=f".{path.name}.", suffix=suffix, dir=path.parent)
    except OSError as err:
        problem = f"cannot write in its folder {path.parent} ({err.strerror})"
        raise InputError.at(path, None, problem) from None


def _close_and_remove(handle_and_path) -> None:
    handle, temp = handle_and_path
    os.close(handle)
    Path(temp).unlink(missing_ok=True)


def _creation_mode() -> int:
    """The mode a new file gets from ``open``: 0o666 less the process's umask."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


@contextmanager
def atomic_output(path, suffix: str = ".tmp"):
    """Yield a temporary path beside ``path``; rename it onto ``path`` when the block succeeds."""
    check_writable(path)
    path = Path(path)
    handle, temp = _temp_file(path, suffix)
    os.close(handle)
    try:
        yield temp
        os.chmod(temp, _creation_mode())  # mkstemp makes 0600; a result is an ordinary file
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


@contextmanager
def atomic_h5(path):
    """An ``h5py.File`` open for writing that appears at ``path`` only once complete."""
    with atomic_output(path, ".h5") as temp, h5py.File(temp, "w") as f:
        yield f
