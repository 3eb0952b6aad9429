"""The hub flags of ``pregel run`` and ``pregel infer`` (``pregel.dgraph.HubOptions``)."""

from pregel.cli.common import require


def add_hub_flags(p) -> None:
    """Add --no-partial-gather, --no-shadow-nodes and --hub-threshold to parser ``p``."""
    p.add_argument("--no-partial-gather", action="store_true",
                   help="send every in-edge of a high in-degree vertex to its owner")
    p.add_argument("--no-shadow-nodes", action="store_true",
                   help="keep a high out-degree vertex's out-edges on its owner")
    p.add_argument("--hub-threshold", type=int, default=None, metavar="D",
                   help="degree above which a vertex is a hub (default: max(100, 20 E / N, "
                        "E / (100 P)) with P > 1 ranks)")


def check_hub_threshold(args) -> None:
    """Refuse a negative --hub-threshold (``InputError``)."""
    require(args.hub_threshold is None or args.hub_threshold >= 0, "--hub-threshold must be non-negative")


def hub_options(args):
    """The ``HubOptions`` the flags ask for (partial gather off with ``--device cuda``, which has none)."""
    from pregel.dgraph import HubOptions

    return HubOptions(partial_gather=not args.no_partial_gather and args.device == "cpu",
                      shadow_nodes=not args.no_shadow_nodes, threshold=args.hub_threshold)
