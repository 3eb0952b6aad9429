"""The one exception type for bad user input (files, datasets, arguments).

The command line turns an ``InputError`` into a single line on stderr and a non-zero exit, so its
message must say which file, which dataset and what is wrong.
"""


class InputError(ValueError):
    """Bad input that the user can fix: a missing file, a malformed dataset, an invalid option."""

    @classmethod
    def at(cls, path, dataset: str | None, problem: str) -> "InputError":
        """Build the error for ``problem`` found in ``dataset`` (or the file itself when None) of ``path``."""
        where = f"{path}" if dataset is None else f"{path}: {dataset}"
        return cls(f"{where}: {problem}")


def warn(message: str) -> None:
    """Print one ``warning: ...`` line on stderr (input that is usable but partly ignored)."""
    import sys

    print(f"warning: {message}", file=sys.stderr, flush=True)


def not_a_file(path) -> str:
    """Why ``path``, which is not a regular file, cannot be read as one: 'is a directory, not a file' or
    'no such file' (a folder named where a file is expected was reported as missing)."""
    import os

    return "is a directory, not a file" if os.path.isdir(path) else "no such file"
