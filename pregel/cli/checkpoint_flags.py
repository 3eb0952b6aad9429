"""The checkpoint flags of ``pregel run`` and ``pregel infer`` (and of ``pregel train``, whose trainer makes
its own checkpointer)."""

from pregel.cli.common import require
from pregel.errors import InputError


def add_checkpoint_flags(p, every: int, unit: str) -> None:
    """Add --checkpoint-dir, --checkpoint-every (default ``every`` ``unit``) and --resume to parser ``p``."""
    p.add_argument("--checkpoint-dir", default=None, metavar="DIR",
                   help=f"write a checkpoint every --checkpoint-every {unit} into DIR (the last two "
                        "are kept)")
    p.add_argument("--checkpoint-every", type=int, default=every, metavar="K",
                   help=f"{unit} between checkpoints (default %(default)s)")
    p.add_argument("--resume", default=None, metavar="DIR",
                   help="continue from the newest complete checkpoint in DIR, at any number of ranks "
                        "(checkpoints continue into DIR unless --checkpoint-dir says otherwise)")


def checkpointer(comm, args, program: dict):
    """The job's ``Checkpointer`` (None without checkpoint flags); ``program`` describes the
    program and its options, which a resumed job must match."""
    if args.checkpoint_dir is None and args.resume is None:
        return None
    from pregel.checkpoint import Checkpointer, graph_identity

    identity, problem = None, None
    try:
        identity = {"graph": graph_identity(args.graph), "program": program}
    except InputError as err:
        problem = err
    comm.agree(problem)
    return Checkpointer(comm, identity, args.partition, args.checkpoint_dir, args.checkpoint_every,
                        args.resume)


def check_checkpoint_every(args) -> None:
    """Refuse a --checkpoint-every below 1 (``InputError``)."""
    every = args.checkpoint_every
    require(every >= 1, f"--checkpoint-every must be at least 1, got {every}")
