"""``pregel infer``: full-graph GNN inference (``vertex_programs.gnn``) on the superstep engine."""

from pregel.cli.checkpoint_flags import add_checkpoint_flags, check_checkpoint_every, checkpointer
from pregel.cli.collection import importing
from pregel.cli.common import world_comm
from pregel.cli.ghost_flags import add_ghost_memory_flag, ghost_memory
from pregel.cli.hub_flags import add_hub_flags, check_hub_threshold, hub_options
from pregel.errors import InputError


def add_infer(sub) -> None:
    """Register ``pregel infer`` and its flags on the subparsers ``sub``."""
    from pregel.partition import PARTITIONERS

    p = sub.add_parser("infer", help="full-graph GNN inference with a saved model",
                       description="Run a GNN saved with vertex_programs.gnn.save_model over every "
                                   "vertex of a graph file, one superstep per layer, and write /values "
                                   "float32 [N, C] in global vertex order.")
    p.add_argument("--graph", required=True, help="HDF5 graph file with /nodes/features")
    p.add_argument("--model", required=True, help="model file from vertex_programs.gnn.save_model")
    p.add_argument("--out", required=True, help="result file (written atomically)")
    p.add_argument("--layer-outputs", action="store_true",
                   help="also write every hidden layer's output as /layers/0, /layers/1, ...")
    p.add_argument("--partition", choices=PARTITIONERS, default="range",
                   help="vertex partitioner (default %(default)s: id ranges balanced by edges)")
    add_hub_flags(p)
    p.add_argument("--stats", action="store_true",
                   help="print per-rank edges, messages, bytes, seconds and their imbalance")
    p.add_argument("--quiet", action="store_true", help="no progress line per layer")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="cuda: each rank runs on one GPU of its node, partial gather off "
                        "(default %(default)s)")
    add_ghost_memory_flag(p)
    add_checkpoint_flags(p, every=1, unit="layers")
    p.set_defaults(run=_run_infer)


def _run_infer(args) -> None:
    with importing():
        from pregel.checkpoint import file_sha256
        from vertex_programs.gnn.infer import format_layers, format_per_rank, infer

    comm = world_comm()
    identity, ghost_bytes, problem = None, None, None
    try:
        check_hub_threshold(args)
        check_checkpoint_every(args)
        ghost_bytes = ghost_memory(args)
        if args.checkpoint_dir is not None or args.resume is not None:
            identity = {"algorithm": "gnn", "model_sha256": file_sha256(args.model),
                        "layer_outputs": args.layer_outputs}
    except InputError as err:
        problem = err
    comm.agree(problem)
    checkpoint = checkpointer(comm, args, identity)
    report = infer(comm, args.graph, args.model, args.out, layer_outputs=args.layer_outputs,
                   partitioner=args.partition, hubs=hub_options(args), progress=not args.quiet, checkpoint=checkpoint,
                   device=args.device, ghost_memory=ghost_bytes)
    if comm.rank != 0:
        return
    graph, result = report.graph, report.result
    print(f"{args.model} on {args.graph}: {graph.num_nodes:,} vertices, {graph.num_edges:,} edges, "
          f"{comm.size} rank(s), {args.partition} partition")
    print(format_layers(report.stats_table))
    print(f"{result.supersteps} layers, load {report.load_seconds:.2f} s, compute "
          f"{result.compute_seconds:.2f} s -> {args.out} (/values {report.values.shape[1]} columns"
          f"{', /layers' if args.layer_outputs else ''})")
    if args.stats:
        print(format_per_rank(report.stats_table))
