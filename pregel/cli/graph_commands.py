"""``pregel generate``, ``pregel convert`` and ``pregel inspect``: graph files made, converted and
described."""

import time

from pregel.cli.common import require


def add_generate(sub) -> None:
    """Register ``pregel generate`` and its flags on the subparsers ``sub``."""
    from pregel.generate import DEFAULT_AVG_DEGREE, DEFAULT_EXPONENT, KINDS

    p = sub.add_parser("generate", help="generate a synthetic graph file",
                       description="Generate a power-law (Chung-Lu), Erdős–Rényi or grid graph.")
    p.add_argument("--kind", choices=KINDS, default="powerlaw")
    p.add_argument("--nodes", type=int, required=True, help="number of vertices N")
    p.add_argument("--avg-degree", type=float, default=None,
                   help="mean out-degree: E = N * D edges, rounded half up (with --undirected to an even "
                        f"number; default {DEFAULT_AVG_DEGREE:g}; not for grid)")
    p.add_argument("--exponent", type=float, default=None,
                   help=f"power-law degree exponent (smaller = heavier hubs; default {DEFAULT_EXPONENT}; "
                        "powerlaw only)")
    p.add_argument("--undirected", action="store_true",
                   help="N * D / 2 undirected edges (rounded half up), each stored in both directions "
                        "(a grid always is)")
    p.add_argument("--weights", action="store_true", help="add uniform random weights in (0, 1]")
    p.add_argument("--features", type=int, default=0, metavar="F", help="float32 node features")
    p.add_argument("--labels", type=int, default=0, metavar="C", help="int64 labels in [0, C)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True)
    p.set_defaults(run=_run_generate)


def _run_generate(args) -> None:
    import numpy as np

    from pregel.generate import DEFAULT_AVG_DEGREE, DEFAULT_EXPONENT, generate_graph, random_features, random_weights
    from pregel.graph_io import GraphData, write_graph
    from pregel.memory import require_memory

    require(args.nodes >= 1, "--nodes must be at least 1")
    why = " (a grid has 4-neighbour edges in both directions)" if args.kind == "grid" else ""
    for flag, given, kinds in (("--avg-degree", args.avg_degree is not None, ("powerlaw", "er")),
                               ("--exponent", args.exponent is not None, ("powerlaw",)),
                               ("--undirected", args.undirected, ("powerlaw", "er"))):
        require(not given or args.kind in kinds, f"{flag} does not apply to --kind {args.kind}{why}")
    args.avg_degree = DEFAULT_AVG_DEGREE if args.avg_degree is None else args.avg_degree
    args.exponent = DEFAULT_EXPONENT if args.exponent is None else args.exponent
    require(0 <= args.avg_degree < float("inf"), f"--avg-degree must be a non-negative number, got {args.avg_degree}")
    require(args.features >= 0 and args.labels >= 0, "--features and --labels must be non-negative")
    require(args.exponent > 1, "--exponent must be greater than 1")
    edges = args.nodes * args.avg_degree
    # the vertex permutation, indptr and degree counts (8 bytes each a vertex), the drawn edges (20 bytes
    # an edge at the peak, measured at 100M), the features: refused at once rather than filling the machine
    require_memory(int(24 * args.nodes + 20 * edges + 4 * args.nodes * args.features),
                   f"a graph of {args.nodes:,} vertices and {edges:,.0f} edges")
    started = time.perf_counter()
    indptr, indices = generate_graph(args.kind, args.nodes, args.avg_degree, seed=args.seed,
                                     exponent=args.exponent, undirected=args.undirected)
    rng = np.random.default_rng([args.seed, 1])
    num_nodes = len(indptr) - 1
    weights = random_weights(len(indices), rng) if args.weights else None
    labels = rng.integers(0, args.labels, size=num_nodes) if args.labels else None
    features = random_features(labels, num_nodes, args.features, rng) if args.features else None
    directed = not (args.undirected or args.kind == "grid")
    write_graph(args.out, GraphData(indptr, indices, weights, features, labels, directed))
    print(f"wrote {args.out}: {args.kind} graph, {num_nodes:,} vertices, {len(indices):,} edges "
          f"in {time.perf_counter() - started:.1f} s")


def add_convert(sub) -> None:
    """Register ``pregel convert`` and its flags on the subparsers ``sub``."""
    p = sub.add_parser("convert", help="convert an edge list, Matrix Market file or tables to a graph file",
                       description="Convert a whitespace edge list (src dst [weight] per line, "
                                   "'#' comments; streamed in chunks), a Matrix Market file (.mtx, "
                                   "symmetric ones as undirected graphs), or tables (Parquet or CSV: "
                                   "an edge table with --src/--dst, optionally a node table with "
                                   "--nodes/--id; ids of any integers or strings, kept as "
                                   "/nodes/original_ids) to the HDF5 graph format.")
    p.add_argument("edges", help="edge-list text file, FILE.mtx, or an edge table (.parquet, .pq, .csv)")
    p.add_argument("--out", required=True)
    p.add_argument("--num-nodes", type=int, default=None, help="default: largest id + 1")
    p.add_argument("--undirected", action="store_true",
                   help="each line (row) is an undirected edge; store both directions")
    tables = p.add_argument_group("tables")
    tables.add_argument("--src", metavar="COL", help="edge table: source id column")
    tables.add_argument("--dst", metavar="COL", help="edge table: destination id column")
    tables.add_argument("--weight", metavar="COL", help="edge table: weight column (optional)")
    tables.add_argument("--nodes", metavar="TABLE", help="node table (.parquet, .pq, .csv); its rows "
                        "number the vertices (default: the ids of the edges, ascending)")
    tables.add_argument("--id", "--node-id", dest="node_id", metavar="COL", help="node table: id column")
    tables.add_argument("--features", metavar="COL", help="node table: list column of features")
    tables.add_argument("--label", metavar="COL", help="node table: integer label column")
    p.set_defaults(run=_run_convert)


def _run_convert(args) -> None:
    from pregel.convert import read_edge_list, read_matrix_market
    from pregel.graph_io import write_graph
    from pregel.tables import table_format

    if args.src or args.dst or table_format(args.edges):
        require(bool(args.src and args.dst), "an edge table needs --src and --dst (its id columns)")
        require(args.num_nodes is None, "--num-nodes does not apply to tables (the ids say it)")
        _convert_tables(args)
        return
    require(not (args.weight or args.nodes or args.node_id or args.features or args.label),
             "--weight, --nodes, --id, --features and --label apply to tables (with --src and --dst)")
    if args.edges.endswith(".mtx"):
        require(args.num_nodes is None and not args.undirected,
                 "--num-nodes and --undirected do not apply to Matrix Market files (the header says both)")
        graph = read_matrix_market(args.edges)
    else:
        graph = read_edge_list(args.edges, args.num_nodes, directed=not args.undirected)
    write_graph(args.out, graph)
    print(f"wrote {args.out}: {graph.num_nodes:,} vertices, {graph.num_edges:,} edges"
          f"{', weighted' if graph.weights is not None else ''}")


def _convert_tables(args) -> None:
    from pregel.graph_io import write_graph
    from pregel.tables import read_tables

    graph, ids = read_tables(args.edges, args.src, args.dst, args.weight, args.nodes, args.node_id,
                             args.features, args.label, directed=not args.undirected)
    graph.original_ids = ids
    write_graph(args.out, graph)
    extras = [name for name, value in (("weighted", graph.weights), ("features", graph.features),
                                       ("labels", graph.labels)) if value is not None]
    print(f"wrote {args.out}: {graph.num_nodes:,} vertices, {graph.num_edges:,} edges"
          f"{''.join(', ' + e for e in extras)}; original ids in /nodes/original_ids")


def add_inspect(sub) -> None:
    """Register ``pregel inspect`` and its flags on the subparsers ``sub``."""
    p = sub.add_parser("inspect", help="validate a graph file and print its statistics")
    p.add_argument("graph", help="HDF5 graph file")
    p.add_argument("--top", type=int, default=5, help="how many hubs to list")
    p.set_defaults(run=_run_inspect)


def _run_inspect(args) -> None:
    from pregel.inspect_graph import format_summary, summarize

    require(args.top >= 0, f"--top must be non-negative, got {args.top}")
    print(format_summary(summarize(args.graph), top=args.top))
