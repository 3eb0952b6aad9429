"""The one check of a command's outputs against its inputs, run before any work.

Every ``pregel`` subcommand states the files it reads and writes (``pregel.cli.files.FILES``), and the
entry point passes them to ``check_outputs`` before the command starts, so no command can forget it: an
output must be writable, must not be one of the inputs (after resolving links), must not be another
output of the same command, and must not replace a file inside an input folder (as the images a COLMAP
model names). A folder the command writes into must not be a file.
"""

import os
from pathlib import Path

from pregel.atomic import check_writable
from pregel.errors import InputError


def check_outputs(outputs=(), inputs=(), input_folders=(), output_folders=()) -> None:
    """``InputError`` (one line) unless every output may be written without destroying an input.

    outputs: [(option, path)] files the command writes (``None`` paths are skipped); inputs: paths of
    files it reads; input_folders: folders whose files it reads (an output may be a new file there,
    never an existing one); output_folders: [(option, path)] folders it writes files into.
    """
    inputs = [Path(p) for p in inputs if p is not None]
    folders = [Path(p) for p in input_folders if p is not None]
    written = []
    for option, path in outputs:
        if path is None:
            continue
        path = Path(path)
        check_writable(path)
        for source in inputs:
            if _same_file(path, source):
                raise InputError.at(path, None, f"is also the input {source}: writing it would destroy "
                                                "the input; choose another output file")
        for other_option, other in written:
            if _same_file(path, other):
                raise InputError.at(path, None, f"{option} names the same file as {other_option}; "
                                                "each output needs its own file")
        for folder in folders:
            if path.exists() and _inside(path, folder):
                raise InputError.at(path, None, f"is inside the input folder {folder}: writing it would "
                                                "replace a file the command reads; choose another output file")
        written.append((option, path))
    for option, folder in output_folders:
        if folder is None:
            continue
        folder = Path(folder)
        for other_option, other in written:  # the folder would be made first, then the file refused
            if _same_file(folder, other):
                raise InputError.at(folder, None, f"{option} names the same path as {other_option}; "
                                                  "the folder and the file each need their own")
        if folder.exists() and not folder.is_dir():
            raise InputError.at(folder, None, f"{option} is an existing file, not a folder; name a folder "
                                              "(it is created if missing)")


def _same_file(a: Path, b: Path) -> bool:
    if a.resolve() == b.resolve():
        return True
    return a.exists() and b.exists() and os.path.samefile(a, b)


def _inside(path: Path, folder: Path) -> bool:
    """Whether ``path`` lies in ``folder`` or below it (after resolving links)."""
    return folder.resolve() in path.resolve().parents
