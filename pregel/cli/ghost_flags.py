"""The ``--ghost-memory`` flag of ``pregel run`` and ``pregel infer`` (``pregel.column_slices``)."""

import math

from pregel.cli.common import require


def add_ghost_memory_flag(p) -> None:
    """Add --ghost-memory to parser ``p``."""
    p.add_argument("--ghost-memory", type=float, default=None, metavar="MIB",
                   help="the other ranks' message rows a rank may hold at once: a superstep whose rows would "
                        "take more (a sum, mean, max or min of rows of several columns) exchanges and gathers "
                        "them a slice of columns at a time, with the same result, more slowly (default: rows "
                        "that would not fit, with the gathered rows, in nine tenths of the memory available "
                        "to each rank)")


def ghost_memory(args) -> int | None:
    """The flag's bound in bytes (None: the engine's default); ``InputError`` unless it is positive and the
    run is on the host (the GPU path exchanges whole rows)."""
    if args.ghost_memory is None:
        return None
    require(0 < args.ghost_memory and math.isfinite(args.ghost_memory),
            f"--ghost-memory must be a positive number of MiB, got {args.ghost_memory:g}")
    require(args.device == "cpu", "--ghost-memory applies to --device cpu: on GPUs the ghost rows go whole")
    return max(1, int(args.ghost_memory * 2**20))
