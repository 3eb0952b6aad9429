"""What several commands share: library errors in flag terms, checks of flag values, config dataclasses
from flags, the job's communicator."""

import re

from pregel.errors import InputError

#: the config classes whose fields the flags set: the library's "TrainConfig.batch_size" is "--batch-size"
CONFIG_CLASSES = ("TrainConfig", "OdinOptions", "SimulateConfig", "PageRank", "ShortestPaths", "BreadthFirst")


def as_flags(message: str, flags=()) -> str:
    """A library error in command-line terms: a config field (``TrainConfig.batch_size``) becomes the
    flag that sets it (``--batch-size``), and so does a function's argument the library names in
    backquotes, as `orbit_format`, when it is one of ``flags`` (the command's argparse destinations)."""
    message = re.sub(r"\b(?:" + "|".join(CONFIG_CLASSES) + r")\.(\w+)", lambda m: _flag(m.group(1)), message)
    return re.sub(r"`(\w+)`", lambda m: _flag(m.group(1)) if m.group(1) in flags else m.group(0), message)


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def require(condition: bool, message: str) -> None:
    """Raise ``InputError(message)`` unless ``condition`` holds: a flag's check, one line."""
    if not condition:
        raise InputError(message)


def integers(flag: str, text) -> list[int]:
    """The comma-separated integers of ``flag``'s value ``text``."""
    try:
        return [int(x) for x in str(text).split(",")]
    except ValueError:
        raise InputError(f"{flag} must be a comma-separated list of integers, got {text!r}") from None


def config_from_flags(cls, args, **fields_not_flags):
    """A config dataclass ``cls`` from the flags of the same names as its fields (``--batch-size`` sets
    ``batch_size``), and ``fields_not_flags``; fields without a flag keep their defaults."""
    from dataclasses import fields

    values = {f.name: getattr(args, f.name) for f in fields(cls) if hasattr(args, f.name)}
    return cls(**{**values, **fields_not_flags})


def world_comm():
    """The job's communicator (MPI is only initialised by the commands that use it)."""
    from pregel.comm import Comm

    return Comm()


def first_line(err: BaseException) -> str:
    """The first line of ``err``'s message (a ``SyntaxError``'s ``msg``), for one-line reports."""
    text = str(getattr(err, "msg", None) or err)
    return text.splitlines()[0] if text else ""
