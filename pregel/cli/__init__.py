"""The ``pregel`` command: one entry point with a subcommand per job.

This is the one package of ``pregel/`` that knows the other packages; it imports a subcommand's
package only when that subcommand runs, so ``pregel inspect`` never pays for torch or the
rasterizer. Bad input (``InputError``) ends the command with one line on stderr and exit status 2.
"""

import os

# One thread per process: parallelism comes from MPI ranks. Must be set before numba/torch load.
for _var in ("OMP_NUM_THREADS", "NUMBA_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

from pregel.cli import collection  # noqa: E402
from pregel.cli.checkpoint_flags import _add_checkpoint_flags, _check_checkpoint_every, _checkpointer  # noqa: E402
from pregel.cli.collection import _importing  # noqa: E402
from pregel.cli.common import _comm, _config, _first_line, _integers, _require, as_flags  # noqa: E402
from pregel.cli.launch import _main  # noqa: E402
from pregel.errors import InputError  # noqa: E402
from pregel.interrupt import exit_on_interrupt  # noqa: E402
from pregel.memory import keep_freed_memory  # noqa: E402
from pregel.quick_exit import end_process  # noqa: E402

NO_CUDA_CHECKPOINTS = "--device cuda: checkpoints (--checkpoint-dir, --resume) are not supported on the GPU yet"


# ---------------------------------------------------------------- graphs: generate, convert, inspect

def _add_generate(sub) -> None:
    from pregel.generate import DEFAULT_EXPONENT, KINDS

    p = sub.add_parser("generate", help="generate a synthetic graph file",
                       description="Generate a power-law (Chung-Lu), Erdős–Rényi or grid graph.")
    p.add_argument("--kind", choices=KINDS, default="powerlaw")
    p.add_argument("--nodes", type=int, required=True, help="number of vertices N")
    p.add_argument("--avg-degree", type=float, default=10.0, help="mean out-degree (E = N * D)")
    p.add_argument("--exponent", type=float, default=DEFAULT_EXPONENT,
                   help="power-law degree exponent (smaller = heavier hubs; default %(default)s)")
    p.add_argument("--undirected", action="store_true", help="store both directions of each edge")
    p.add_argument("--weights", action="store_true", help="add uniform random weights in (0, 1]")
    p.add_argument("--features", type=int, default=0, metavar="F", help="float32 node features")
    p.add_argument("--labels", type=int, default=0, metavar="C", help="int64 labels in [0, C)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True)
    p.set_defaults(run=_run_generate)


def _run_generate(args) -> None:
    import numpy as np

    from pregel.generate import generate_graph, random_features
    from pregel.graph_io import GraphData, write_graph

    _require(args.nodes >= 1, "--nodes must be at least 1")
    _require(args.avg_degree >= 0, "--avg-degree must be non-negative")
    _require(args.features >= 0 and args.labels >= 0, "--features and --labels must be non-negative")
    _require(args.exponent > 1, "--exponent must be greater than 1")
    started = time.perf_counter()
    indptr, indices = generate_graph(args.kind, args.nodes, args.avg_degree, seed=args.seed,
                                     exponent=args.exponent, undirected=args.undirected)
    rng = np.random.default_rng([args.seed, 1])
    num_nodes = len(indptr) - 1
    weights = (1.0 - rng.random(len(indices))).astype(np.float32) if args.weights else None
    labels = rng.integers(0, args.labels, size=num_nodes) if args.labels else None
    features = random_features(labels, num_nodes, args.features, rng) if args.features else None
    directed = not (args.undirected or args.kind == "grid")
    write_graph(args.out, GraphData(indptr, indices, weights, features, labels, directed))
    print(f"wrote {args.out}: {args.kind} graph, {num_nodes:,} vertices, {len(indices):,} edges "
          f"in {time.perf_counter() - started:.1f} s")


def _add_convert(sub) -> None:
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
        _require(bool(args.src and args.dst), "an edge table needs --src and --dst (its id columns)")
        _require(args.num_nodes is None, "--num-nodes does not apply to tables (the ids say it)")
        _convert_tables(args)
        return
    _require(not (args.weight or args.nodes or args.node_id or args.features or args.label),
             "--weight, --nodes, --id, --features and --label apply to tables (with --src and --dst)")
    if args.edges.endswith(".mtx"):
        _require(args.num_nodes is None and not args.undirected,
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


def _add_inspect(sub) -> None:
    p = sub.add_parser("inspect", help="validate a graph file and print its statistics")
    p.add_argument("graph", help="HDF5 graph file")
    p.add_argument("--top", type=int, default=5, help="how many hubs to list")
    p.set_defaults(run=_run_inspect)


def _run_inspect(args) -> None:
    from pregel.inspect_graph import format_summary, summarize

    _require(args.top >= 0, f"--top must be non-negative, got {args.top}")
    print(format_summary(summarize(args.graph), top=args.top))


# ---------------------------------------------------------------- vertex programs on the engine

ALGORITHMS = ("pagerank", "sssp", "wcc", "bfs")


def _add_run(sub) -> None:
    from pregel.partition import PARTITIONERS

    p = sub.add_parser("run", help="run a graph algorithm on the superstep engine",
                       description="Run a vertex program over a graph file on every MPI rank and "
                                   "write /values in global vertex order.")
    p.add_argument("algorithm", metavar="ALGORITHM",
                   help=f"one of {', '.join(ALGORITHMS)}, or FILE.py:CLASS for your own VertexProgram "
                        "subclass (constructed without arguments)")
    p.add_argument("--graph", required=True, help="HDF5 graph file")
    p.add_argument("--out", required=True, help="result file (written atomically)")
    p.add_argument("--partition", choices=PARTITIONERS, default="range",
                   help="vertex partitioner (default %(default)s: id ranges balanced by edges)")
    p.add_argument("--max-supersteps", type=int, default=None, help="stop after N supersteps")
    declared = set()
    for name in ALGORITHMS:  # each algorithm's own options (its class's ``options``)
        for option in _algorithm(name).options:
            if option.name not in declared:
                declared.add(option.name)
                p.add_argument("--" + option.name.replace("_", "-"), type=option.type, default=option.default,
                               help=option.help)
    p.add_argument("--stats", action="store_true", help="print per-superstep statistics")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="cuda: each rank runs on one GPU of its node (default %(default)s)")
    _add_checkpoint_flags(p, every=10, unit="supersteps")
    p.set_defaults(run=_run_run)


def _check_run_limits(args) -> None:
    _require(args.max_supersteps is None or args.max_supersteps >= 1,
             f"--max-supersteps must be at least 1, got {args.max_supersteps}")
    _check_checkpoint_every(args)


def _program_identity(args) -> dict:
    """The program and the options that change its result (recorded in checkpoints; a resumed job
    may change --max-supersteps, a limit rather than an option of the program)."""
    if args.algorithm in ALGORITHMS:
        options = _algorithm(args.algorithm).options
        identity = {"algorithm": args.algorithm, **{option.name: getattr(args, option.name) for option in options}}
    else:
        from pregel.checkpoint import file_sha256

        path, _, name = args.algorithm.rpartition(":")
        identity = {"class": name, "file_sha256": file_sha256(path)}
    return identity


def _algorithm(name: str):
    """The VertexProgram class of algorithm ``name`` (one of ALGORITHMS)."""
    import vertex_programs as vp

    return {"pagerank": vp.PageRank, "sssp": vp.ShortestPaths, "wcc": vp.WeakComponents,
            "bfs": vp.BreadthFirst}[name]


def _program(args):
    if args.algorithm not in ALGORITHMS:
        return _user_program(args.algorithm)
    return _algorithm(args.algorithm).from_options(vars(args))


def _run_run(args) -> None:
    with _importing():
        from pregel.job import run_job
        from pregel.stats import format_table

    comm = _comm()
    program, identity, problem = None, None, None
    try:
        _check_run_limits(args)
        program = _program(args)
        identity = _program_identity(args)
    except InputError as err:
        problem = err
    comm.agree(problem)
    checkpoint = _checkpointer(comm, args, identity)
    report = run_job(comm, args.graph, program, args.out, algorithm=args.algorithm,
                     partitioner=args.partition, max_supersteps=args.max_supersteps,
                     progress=not args.quiet, checkpoint=checkpoint, device=args.device)
    if comm.rank != 0:
        return
    result, graph = report.result, report.graph
    print(f"{args.algorithm} on {args.graph}: {graph.num_nodes:,} vertices, {graph.num_edges:,} edges, "
          f"{comm.size} rank(s), {args.partition} partition")
    print(f"{result.supersteps} supersteps ({_STOPPED[result.stopped_by]}), load {report.load_seconds:.2f} s, "
          f"compute {result.compute_seconds:.2f} s -> {args.out}")
    for line in program.summary(report.values):
        print(line)
    for line in program.warnings(result.stopped_by):
        print(f"warning: {as_flags(line)}", file=sys.stderr)
    if args.stats:
        print(format_table(report.stats_table))


def _user_program(spec: str):
    """Instantiate ``CLASS`` from ``FILE.py:CLASS`` (a ``VertexProgram`` subclass)."""
    import importlib.util

    from pregel.program import VertexProgram

    path, _, name = spec.rpartition(":")
    if not path.endswith(".py") or not name:
        raise InputError(f"unknown algorithm {spec!r}: use one of {', '.join(ALGORITHMS)} or FILE.py:CLASS")
    if not os.path.isfile(path):
        raise InputError.at(path, None, "no such file")
    module_spec = importlib.util.spec_from_file_location(f"pregel_user_{os.path.basename(path)[:-3]}", path)
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[module_spec.name] = module  # so that tracebacks and messages can find its file
    try:
        module_spec.loader.exec_module(module)
    except Exception as err:  # the user's file: a syntax error, a failed import, ...
        line = f" (line {err.lineno})" if isinstance(err, SyntaxError) and err.lineno else ""
        problem = f"cannot load it: {type(err).__name__}: {_first_line(err)}{line}"
        raise InputError.at(path, None, problem) from None
    cls = getattr(module, name, None)
    if not (isinstance(cls, type) and issubclass(cls, VertexProgram)) or cls is VertexProgram:
        raise InputError.at(path, None, f"{name} is not a VertexProgram subclass defined there")
    try:
        return cls()
    except Exception as err:
        raise InputError.at(path, None, f"cannot construct {name}() without arguments: "
                                        f"{type(err).__name__}: {_first_line(err)}") from None


_STOPPED = {"halted": "all vertices halted", "master": "converged",
            "max_supersteps": "superstep limit reached"}


# ---------------------------------------------------------------- GNN inference (vertex_programs.gnn)

def _add_infer(sub) -> None:
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
    p.add_argument("--no-partial-gather", action="store_true",
                   help="send every in-edge of a high in-degree vertex to its owner")
    p.add_argument("--no-shadow-nodes", action="store_true",
                   help="keep a high out-degree vertex's out-edges on its owner")
    p.add_argument("--hub-threshold", type=int, default=None, metavar="D",
                   help="degree above which a vertex is a hub (default: max(100, 20 E / N, "
                        "E / (100 P)) with P > 1 ranks)")
    p.add_argument("--stats", action="store_true",
                   help="print per-rank edges, messages, bytes, seconds and their imbalance")
    p.add_argument("--quiet", action="store_true", help="no progress line per layer")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="cuda: each rank runs on one GPU of its node, partial gather off "
                        "(default %(default)s)")
    _add_checkpoint_flags(p, every=1, unit="layers")
    p.set_defaults(run=_run_infer)


def _run_infer(args) -> None:
    with _importing():
        from pregel.checkpoint import file_sha256
        from pregel.dgraph import HubOptions
        from vertex_programs.gnn.infer import format_layers, format_per_rank, infer

    comm = _comm()
    identity, problem = None, None
    try:
        _require(args.hub_threshold is None or args.hub_threshold >= 0,
                 "--hub-threshold must be non-negative")
        _check_checkpoint_every(args)
        if args.checkpoint_dir is not None or args.resume is not None:
            identity = {"algorithm": "gnn", "model_sha256": file_sha256(args.model),
                        "layer_outputs": args.layer_outputs}
    except InputError as err:
        problem = err
    comm.agree(problem)
    checkpoint = _checkpointer(comm, args, identity)
    hubs = HubOptions(partial_gather=not args.no_partial_gather and args.device == "cpu",
                      shadow_nodes=not args.no_shadow_nodes,
                      threshold=args.hub_threshold)
    report = infer(comm, args.graph, args.model, args.out, layer_outputs=args.layer_outputs,
                   partitioner=args.partition, hubs=hubs, progress=not args.quiet, checkpoint=checkpoint,
                   device=args.device)
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


# ---------------------------------------------------------------- scenes and training (odin_sched)

def _add_generate_scene(sub) -> None:
    p = sub.add_parser("generate-scene", help="generate a synthetic Gaussian-splatting scene file",
                       description="Ground-truth Gaussians, cameras, rendered images and a noisy initial "
                                   "point cloud (as structure from motion gives) for training.")
    p.add_argument("--gaussians", type=int, required=True, help="ground-truth Gaussians G")
    p.add_argument("--cameras", type=int, required=True, help="cameras C (every 8th is held out)")
    p.add_argument("--width", type=int, default=128)
    p.add_argument("--height", type=int, default=128)
    p.add_argument("--layout", choices=("objects", "city"), default="objects",
                   help="objects on a ground plane with a camera ring, or a city-block grid with a "
                        "low fly-through (default %(default)s)")
    p.add_argument("--views-per-spot", type=int, default=1, metavar="K",
                   help="city: the fly-through stops at C / K spots and takes K views side by side at each "
                        "(8: every held-out camera sees what its spot's training cameras see; default 1)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True)
    p.set_defaults(run=_run_generate_scene)


def _run_generate_scene(args) -> None:
    from odin_sched.scenes.scene_gen import generate_scene
    from odin_sched.scenes.scene_io import write_scene
    started = time.perf_counter()
    scene = generate_scene(args.gaussians, args.cameras, args.width, args.height, seed=args.seed,
                           layout=args.layout, views_per_spot=args.views_per_spot)
    write_scene(args.out, scene)
    print(f"wrote {args.out}: {args.layout} scene, {scene.num_gaussians:,} Gaussians, {scene.num_cameras} "
          f"cameras at {args.width} x {args.height}, {scene.init_means.shape[0]:,} initial points "
          f"in {time.perf_counter() - started:.1f} s")


def _add_convert_colmap(sub) -> None:
    p = sub.add_parser("convert-colmap", help="convert a COLMAP sparse model and its images to a scene file",
                       description="Read a COLMAP sparse model (text or binary), load its images and write "
                                   "a scene file with the 3D points as /init.")
    p.add_argument("sparse", metavar="SPARSE_DIR", help="folder with cameras/images/points3D .bin or .txt")
    p.add_argument("--images", required=True, help="folder of the images named in the model")
    p.add_argument("--out", required=True, help="scene file")
    p.add_argument("--downscale", type=float, default=1.0, help="divide image size and intrinsics by N")
    p.add_argument("--heldout-every", type=int, default=8,
                   help="hold out every N-th image by name (at least 1 image is held out and 1 trained "
                        "on; default %(default)s)")
    p.set_defaults(run=_run_convert_colmap)


def _run_convert_colmap(args) -> None:
    from odin_sched.scenes.colmap import convert_colmap
    from odin_sched.scenes.scene_io import write_scene
    scene = convert_colmap(args.sparse, args.images, downscale=args.downscale, heldout_every=args.heldout_every)
    write_scene(args.out, scene)
    print(f"wrote {args.out}: {scene.num_cameras} cameras ({int(scene.heldout.sum())} held out) at "
          f"{scene.width} x {scene.height}, {scene.init_means.shape[0]:,} points in /init")


def _add_sfm(sub) -> None:
    p = sub.add_parser("sfm", help="structure from motion on a folder of photos to a scene file (pycolmap)",
                       description="SIFT features, exhaustive matching and incremental mapping with pycolmap (as "
                                   "the reference 3DGS convert.py does with COLMAP), undistortion, then a scene "
                                   "file with the 3D points as /init. Needs pip install 'pregel-mpi[colmap]'.")
    p.add_argument("images", metavar="IMAGES_DIR", help="folder of photos (.jpg, .png, .tif, .bmp)")
    p.add_argument("--out", required=True, help="scene file")
    p.add_argument("--downscale", type=float, default=1.0, help="divide image size and intrinsics by N")
    p.add_argument("--heldout-every", type=int, default=8,
                   help="hold out every N-th image by name (at least 1 image is held out and 1 trained "
                        "on; default %(default)s)")
    p.add_argument("--threads", type=int, default=-1, help="threads for pycolmap (default: all cores)")
    p.add_argument("--camera-model", default=None, metavar="MODEL",
                   help="the shared camera's COLMAP model: SIMPLE_PINHOLE, PINHOLE, SIMPLE_RADIAL, RADIAL or "
                        "OPENCV (default OPENCV, as the reference convert.py's --camera; a warning says when "
                        "few photos calibrate it to non-square pixels)")
    p.set_defaults(run=_run_sfm)


def _run_sfm(args) -> None:
    from odin_sched.scenes.scene_io import write_scene
    from odin_sched.scenes.sfm import photos_to_scene

    model = {} if args.camera_model is None else {"camera_model": args.camera_model}
    result = photos_to_scene(args.images, downscale=args.downscale, heldout_every=args.heldout_every,
                             threads=args.threads, **model)
    if result.warning is not None:
        print(f"warning: {result.warning.replace('camera model', '--camera-model')}", file=sys.stderr)
    write_scene(args.out, result.scene)
    scene = result.scene
    print(f"wrote {args.out}: {len(result.registered)} of {len(result.registered) + len(result.unregistered)} "
          f"photos registered ({int(scene.heldout.sum())} held out) at {scene.width} x {scene.height}, "
          f"{result.num_points:,} points in /init")
    if result.unregistered:
        print(f"not registered: {', '.join(result.unregistered)}")


def _add_train(sub) -> None:
    from odin_sched.odin.modes import MODES
    from odin_sched.training.config import TrainConfig as defaults

    p = sub.add_parser("train", help="train Gaussians on a scene file (one process, or distributed under mpiexec)",
                       description="Train from the scene's initial point cloud with visible Adam; "
                                   "held-out PSNR is printed and saved.")
    p.add_argument("--scene", required=True, help="scene file from generate-scene")
    p.add_argument("--steps", type=int, required=True, help="training steps (one batch of images each)")
    p.add_argument("--batch-size", type=int, default=defaults.batch_size, metavar="B",
                   help="images per step, all read the same parameters (default %(default)s; learning rate "
                        "x sqrt(B), Adam eps / sqrt(B), betas ** B)")
    p.add_argument("--out", required=True, help="trained scene file")
    p.add_argument("--ply", default=None, help="also export a 3DGS .ply (f_dc_*, f_rest_* as the reference code)")
    p.add_argument("--sh-degree", type=int, default=defaults.sh_degree, metavar="D",
                   help="largest spherical-harmonics degree of the colour, 0 to 3 (default %(default)s; the active "
                        "degree rises by one every 1,000 images from 0, as the reference 3DGS)")
    p.add_argument("--init-ply", default=None, metavar="MODEL.ply",
                   help="start from the Gaussians of a 3DGS .ply (this project's, or the reference code's, "
                        "gsplat's, Grendel-GS's; SH coefficients kept) instead of the scene's /init point cloud")
    p.add_argument("--png", default=None, help="held-out view beside its ground truth "
                                               "(default: the --out name with .png)")
    p.add_argument("--ssim-weight", type=float, default=defaults.ssim_weight, help="loss (1-w) L1 + w (1-SSIM)")
    p.add_argument("--eval-every", type=int, default=defaults.eval_every, help="held-out PSNR every N steps")
    p.add_argument("--seed", type=int, default=defaults.seed, help="camera order and densification sampling")
    # defaults: the reference 3DGS code's (graphdeco-inria/gaussian-splatting, arguments/__init__.py);
    # steps of the schedule count images, as Grendel-GS does for B > 1
    p.add_argument("--densify", action=argparse.BooleanOptionalAction, default=True,
                   help="clone/split/prune and reset opacity as 3DGS does (default on; --no-densify: off)")
    p.add_argument("--densify-from", type=int, default=500, metavar="IMAGE",
                   help="densify once past this image (reference densify_from_iter, default %(default)s: "
                        "first at 600)")
    p.add_argument("--densify-until", type=int, default=15_000, metavar="IMAGE",
                   help="stop densifying at this image (reference densify_until_iter, default %(default)s "
                        "whatever the run's length; never after the run's last step)")
    p.add_argument("--densify-interval", type=int, default=100, metavar="IMAGES",
                   help="images between densification rounds (reference, default %(default)s)")
    p.add_argument("--densify-grad-threshold", type=float, default=0.0002,
                   help="average screen-space gradient that clones or splits (reference, default %(default)s)")
    p.add_argument("--opacity-reset-interval", type=int, default=3000, metavar="IMAGES",
                   help="reset opacities to at most 0.01 every N images while densifying (reference, "
                        "default %(default)s; 0: never)")
    p.add_argument("--position-lr-max-steps", type=int, default=defaults.position_lr_max_steps, metavar="IMAGES",
                   help="the means' learning rate decays from 1.6e-4 to 1.6e-6 x scene extent over N images, "
                        "whatever the run's length (reference position_lr_max_steps, default %(default)s)")
    p.add_argument("--position-lr-init", type=float, default=defaults.position_lr_init, metavar="RATE",
                   help="the means' first learning rate per unit of scene extent (reference position_lr_init, "
                        "default %(default)s); lower it when the cameras span far more than one view sees")
    p.add_argument("--image-order", choices=("shuffled", "spread"), default=None,
                   help="shuffled: seeded permutations of the training cameras; spread: the same, but "
                        "consecutive batches see different parts of the scene where possible (default: "
                        "shuffled for B = 1, spread otherwise)")
    p.add_argument("--cull", action=argparse.BooleanOptionalAction, default=defaults.cull,
                   help="one process: each image renders only the Gaussians that can touch it, the same pixels "
                        "and gradients as rendering all (default on; --no-cull: render all of them)")
    p.add_argument("--mode", choices=MODES, default=None,
                   help="distributed execution (default with more than one rank: odin, barrier-free; barrier: "
                        "the synchronous baseline with a global barrier per batch; odin-fast: odin where an "
                        "image may read a low-impact cell up to --max-staleness updates old)")
    p.add_argument("--max-staleness", type=int, default=1, metavar="K",
                   help="odin-fast: updates of a low-impact cell an image may miss (default 1)")
    p.add_argument("--stale-impact", type=float, default=0.25, metavar="F",
                   help="odin-fast: the share of an image's predicted visible Gaussians it may read stale, "
                        "its smallest cells first (default 0.25)")
    p.add_argument("--send-thread", action="store_true",
                   help="odin, odin-fast: post each rank's messages from a thread beside its compute, so that a "
                        "GPU rank renders its next image while the last one's messages are posted (needs MPI "
                        "with MPI_THREAD_MULTIPLE; on processor cores it only moves that time to another thread)")
    p.add_argument("--batches-ahead", type=int, default=0, metavar="N",
                   help="odin, odin-fast: a rank starts an image only once all its images of batches more than N "
                        "before it have begun (default 0: of every earlier batch; a larger N lets a rank fill a wait "
                        "with a later batch's image, which pays where cells take long to arrive)")
    p.add_argument("--hold-share", type=float, default=0.25, metavar="S",
                   help="odin, odin-fast: a rank with nothing else to fire starts an image that the batch order "
                        "holds back after waiting S times its mean image's seconds (default 0.25; inf: never)")
    p.add_argument("--cells", type=int, default=None, metavar="K",
                   help="spatial cells of Gaussians, the unit of ownership and transfer (default: about one per "
                        "8192 initial Gaussians, at least 16 and at most 512 per rank; smaller cells make the "
                        "whole-cell updates an image waits for smaller)")
    p.add_argument("--split-above", type=int, default=None, metavar="N",
                   help="a cell holding more than N Gaussians splits in two at a window's end (default: never)")
    p.add_argument("--max-imbalance", type=float, default=1.25, metavar="F",
                   help="whole cells move between owners at a window's end while a rank owns more than F x "
                        "the mean number of Gaussians (default %(default)s)")
    p.add_argument("--window", type=int, default=None, metavar="W",
                   help="batches per planning window (default 10)")
    p.add_argument("--timeline", default=None, metavar="T.json",
                   help="write a Chrome trace of the run (open in Perfetto or chrome://tracing)")
    p.add_argument("--schedule-out", default=None, metavar="F.h5",
                   help="write the first window's dependency graph of steps and its schedule")
    p.add_argument("--stats", action="store_true", help="print time and traffic per rank")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="cuda: train on each rank's GPU (default %(default)s)")
    _add_checkpoint_flags(p, every=500, unit="steps")
    p.add_argument("--dashboard", type=int, nargs="?", const=8000, default=None, metavar="PORT",
                   help="serve the live training page on PORT (default 8000) from rank 0, as `pregel view "
                        "--watch` of the --out folder")
    p.add_argument("--host", default="127.0.0.1", help="--dashboard's address (default %(default)s: this machine only)")
    p.set_defaults(run=_run_train)


def _run_train(args) -> None:
    """``pregel train``: the single-process trainer on one rank, the distributed trainer
    (``odin_sched.odin.trainer``) on several ranks or when --mode, --timeline or --schedule-out is given.
    The flags set the fields of the same names of ``TrainConfig`` and ``OdinOptions``."""
    from odin_sched.training.checkpoint import train_checkpointer
    from odin_sched.training.config import TrainConfig
    from odin_sched.training.densify import DensifyConfig
    from odin_sched.training.train import train

    if args.dashboard is not None:
        _start_dashboard(args)
    densify = None
    if args.densify:
        try:
            densify = DensifyConfig(interval=args.densify_interval, start=args.densify_from,
                                    stop=args.densify_until, grad_threshold=args.densify_grad_threshold,
                                    opacity_reset_interval=args.opacity_reset_interval)
        except ValueError as err:
            raise InputError(f"--densify options: {err}") from None
    config = _config(TrainConfig, args, densify=densify, status=True)
    comm = _comm()
    single = comm.size == 1 and args.mode is None and args.timeline is None and args.schedule_out is None
    checkpointing = args.checkpoint_dir is not None or args.resume is not None
    comm.agree(InputError(NO_CUDA_CHECKPOINTS) if args.device == "cuda" and checkpointing else None)
    checkpoint = train_checkpointer(comm, config, args.checkpoint_dir, args.checkpoint_every, args.resume)
    if single:
        for flag, value in (("--window", args.window), ("--cells", args.cells)):
            if value is not None and value < 1:
                raise InputError(f"{flag} must be at least 1, got {value}")
        result = train(config, checkpoint)
    else:
        from odin_sched.odin.options import OdinOptions
        from odin_sched.odin.rank_record import format_per_rank
        from odin_sched.odin.trainer import train_distributed

        window = OdinOptions.window if args.window is None else args.window
        options = _config(OdinOptions, args, mode=args.mode or "odin", window=window)
        result = train_distributed(comm, config, options, checkpoint)
        if comm.rank != 0:
            return
    print(f"wrote {args.out}: {result.steps} steps, {result.num_gaussians} Gaussians, "
          f"held-out PSNR {result.final_psnr:.2f} dB, {result.wall_time_s:.1f} s")
    if result.per_rank is not None and args.stats:
        print(format_per_rank(result))


def _start_dashboard(args) -> None:
    """Serve ``pregel view --watch`` of the --out folder from a thread of rank 0 (collective: a port in use
    ends every rank with one line)."""
    from odin_sched.view.server import dashboard_routes, make_server, serve_in_background, url

    comm, server, problem = _comm(), None, None
    if comm.rank == 0:
        try:
            server = make_server(dashboard_routes(os.path.dirname(os.path.abspath(args.out))), args.host,
                                 args.dashboard)
        except InputError as err:
            problem = err
    comm.agree(problem)
    if server is not None:
        serve_in_background(server)
        print(f"pregel train: dashboard at {url(server)}", flush=True)


def _add_view(sub) -> None:
    p = sub.add_parser("view", help="view Gaussians in the browser, or watch training runs live",
                       description="Serve a page that draws a 3DGS .ply or trained scene file with WebGL2 (orbit, "
                                   "pan, zoom, the scene's cameras), or with --watch the live dashboard of the "
                                   "training runs writing into a folder. Only this machine can connect unless "
                                   "--host says otherwise.")
    p.add_argument("model", nargs="?", metavar="MODEL", help="3DGS .ply or trained scene .h5")
    p.add_argument("--scene", default=None, help="scene file whose cameras to offer (default: the model's own)")
    p.add_argument("--watch", default=None, metavar="OUT_DIR", help="the dashboard of the run writing into OUT_DIR")
    p.add_argument("--port", type=int, default=8000, help="default %(default)s; 0 picks a free one")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default %(default)s: this machine only)")
    p.set_defaults(run=_run_view)


def _run_view(args) -> None:
    from odin_sched.view import server

    _require((args.model is None) != (args.watch is None), "give either MODEL or --watch OUT_DIR")
    if args.watch is not None:
        _require(os.path.isdir(args.watch), f"--watch {args.watch}: no such folder")
        _require(args.scene is None, "--scene applies to MODEL, not to --watch")
        routes, what = server.dashboard_routes(args.watch), f"dashboard of {args.watch}"
    else:
        import json

        from odin_sched.view.model import load_view_model

        model_bin, info = load_view_model(args.model, args.scene)
        routes = server.viewer_routes(model_bin, json.dumps(info).encode())
        what = f"{info['count']:,} Gaussians of {args.model}"
    server.serve(server.make_server(routes, args.host, args.port), what)


def _add_render(sub) -> None:
    p = sub.add_parser("render", help="render a scene's cameras (and an orbit) to images",
                       description="Write DIR/NNNN.png (NNNN = camera index) for the chosen cameras, "
                                   "rendered from the scene's Gaussians or a 3DGS .ply.")
    p.add_argument("--scene", required=True, help="scene file (cameras, and Gaussians unless --ply)")
    p.add_argument("--ply", default=None, help="render these Gaussians instead of the scene's")
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--cameras", default=None, help="comma-separated camera indices (default: held-out ones)")
    p.add_argument("--orbit", type=int, default=0, metavar="N", help="also N frames orbiting the scene")
    p.add_argument("--orbit-format", choices=("gif", "mp4"), default="gif")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.set_defaults(run=_run_render)


def _run_render(args) -> None:
    from odin_sched.scenes.render_views import render_views

    written = render_views(args.scene, args.out, ply_path=args.ply, cameras=args.cameras, orbit=args.orbit,
                           orbit_format=args.orbit_format, device=args.device)
    print(f"wrote {len(written)} file(s) to {args.out}: {', '.join(os.path.basename(p) for p in written)}")


def _add_simulate(sub) -> None:
    from odin_sched.sim.config import SimulateConfig as defaults
    from odin_sched.sim.config import PROFILES
    from odin_sched.sim.presets import PRESETS

    p = sub.add_parser("simulate", help="simulate distributed training on many GPUs with the runtime's scheduler",
                       description="Plan and run odin, barrier and odin-fast training on virtual GPUs with the "
                                   "runtime's planning and firing code, a SimPy clock and a measured cost model, "
                                   "and Grendel-GS's step (grendel) on the same batches.")
    p.add_argument("--layout", choices=("city", "objects", *PRESETS), default=defaults.layout,
                   help="metadata-only generated scene: a layout at --gaussians/--cameras/--width/--height, or a "
                        "real capture's preset (its size, images and Gaussians; odin_sched/sim/presets.py)")
    p.add_argument("--scene", default=None, help="simulate a scene file's training instead (its initial Gaussians)")
    p.add_argument("--gaussians", type=int, default=defaults.gaussians)
    p.add_argument("--cameras", type=int, default=defaults.cameras)
    p.add_argument("--width", type=int, default=defaults.width)
    p.add_argument("--height", type=int, default=defaults.height)
    p.add_argument("--steps", type=int, default=defaults.steps, help="batches to simulate")
    p.add_argument("--gpus", default=",".join(map(str, defaults.gpus)), help="comma-separated GPU counts")
    p.add_argument("--batch-size", type=int, default=None, help="images per batch (default: the GPU count)")
    p.add_argument("--profile", default=defaults.profile, choices=PROFILES)
    p.add_argument("--modes", default=",".join(defaults.modes), metavar="M[,M...]",
                   help="modes to simulate: odin, barrier, grendel (Grendel-GS's step), odin-fast "
                        "(default: all)")
    p.add_argument("--window", default=",".join(map(str, defaults.window)), metavar="W[,W...]",
                   help="batches per planning window (as pregel train); with several, each mode is reported "
                        "at its fastest")
    p.add_argument("--cells-per-gpu", type=int, default=defaults.cells_per_gpu,
                   help="cells per GPU (default: as pregel train's default cells, one per 8192 Gaussians the "
                        "scene stands for, 16 to 512 per GPU)")
    p.add_argument("--max-staleness", type=int, default=defaults.max_staleness, help="odin-fast's staleness bound K")
    p.add_argument("--sh-degree", type=int, default=defaults.sh_degree, metavar="D",
                   help="SH degree of the Gaussians: their size in messages and gathers, 59 floats at 3, 14 at 0 "
                        "(default %(default)s, as the reference 3DGS)")
    p.add_argument("--shared-cores", type=int, default=defaults.shared_cores, metavar="N",
                   help="all virtual GPUs share N processors, as mpiexec -n P on an N-core machine "
                        "(default 0: each has its own)")
    p.add_argument("--host-sends", action="store_true",
                   help="each GPU's messages are posted by a host thread beside it, as pregel train --send-thread "
                        "runs on GPUs (default: the GPU pays each message's sender time itself)")
    p.add_argument("--batches-ahead", type=int, default=defaults.batches_ahead, metavar="N",
                   help="as pregel train's: a rank starts an image only once its images of batches more than N "
                        "before it have begun (default %(default)s)")
    p.add_argument("--hold-share", type=float, default=defaults.hold_share, metavar="S",
                   help="as pregel train's: a rank with nothing else to fire starts an image that the batch order "
                        "holds back after waiting S times its mean image's seconds (default %(default)s; inf: never)")
    p.add_argument("--seed", type=int, default=defaults.seed)
    p.add_argument("--quiet", action="store_true", help="no progress bar or line")
    p.add_argument("--out", required=True, help="result file (.h5)")
    p.set_defaults(run=_run_simulate)


def _run_simulate(args) -> None:
    from odin_sched.sim.config import SimulateConfig
    from odin_sched.sim.simulate import run

    gpus, window = (tuple(_integers(flag, value)) for flag, value in (("--gpus", args.gpus), ("--window", args.window)))
    modes = tuple(m.strip() for m in str(args.modes).split(",") if m.strip())
    run(_config(SimulateConfig, args, gpus=gpus, window=window, modes=modes, progress=not args.quiet))


def _add_plot(sub) -> None:
    p = sub.add_parser("plot", help="plot a run/infer/train result or Chrome-trace timelines to a PNG",
                       description="RESULT.h5 of pregel run/infer: per-superstep compute and communication "
                                   "seconds per rank and the per-rank balance; of pregel train: loss and "
                                   "held-out PSNR against steps; of pregel simulate: scaling curves. TRACE.json files: a Gantt "
                                   "chart per trace.")
    p.add_argument("files", nargs="+", metavar="FILE", help="one result .h5, or one or more trace .json")
    p.add_argument("--out", required=True, help="picture file: .png, .pdf, .svg or .jpg")
    p.add_argument("--labels", default=None, help="comma-separated titles for the traces")
    p.set_defaults(run=_run_plot)


def _run_plot(args) -> None:
    from pregel.plot import plot

    kind = plot(args.files, args.out, labels=args.labels.split(",") if args.labels else None)
    print(f"wrote {args.out}: {kind} plot of {', '.join(args.files)}")


# ---------------------------------------------------------------- entry point

SUBCOMMANDS = (_add_generate, _add_convert, _add_inspect, _add_run, _add_infer, _add_generate_scene,
               _add_train, _add_convert_colmap, _add_sfm, _add_render, _add_view, _add_simulate, _add_plot)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand registered."""
    parser = argparse.ArgumentParser(
        prog="pregel", description="Pregel-style graph computing on MPI. "
                                   "Launch with `mpiexec -n P pregel <command> ...`.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="command")
    for add in SUBCOMMANDS:
        add(sub)
    return parser


def main(argv=None) -> int:
    """Run the ``pregel`` command line; returns the exit status.

    Bad input: one line on stderr and exit status 2. When every rank raised the same error (the
    collective checks), each exits cleanly and rank 0 alone prints it. Any other exception under
    MPI is printed with its rank and aborts the whole job, so no rank waits forever.
    Run as the process's own command line (``argv`` None), the process ends here with that status,
    without the interpreter's teardown (``pregel.quick_exit``).
    """
    args = build_parser().parse_args(argv)
    exit_on_interrupt(args.command)
    keep_freed_memory()
    own = collection._OWN_PROCESS = argv is None  # this process's own command line: it ends when main returns
    try:
        code = _main(args)
    finally:
        if own:
            collection._skip_collection_at_exit()
        collection._OWN_PROCESS = False
    if own:
        end_process(code)
    return code

