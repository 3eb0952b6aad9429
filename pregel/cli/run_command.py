"""``pregel run``: a vertex program (one of ALGORITHMS or the user's own ``FILE.py:CLASS``) on the superstep
engine."""

import os
import sys

from pregel.cli.checkpoint_flags import add_checkpoint_flags, check_checkpoint_every, checkpointer
from pregel.cli.collection import importing
from pregel.cli.common import world_comm, first_line, require, as_flags
from pregel.cli.ghost_flags import add_ghost_memory_flag, ghost_memory
from pregel.cli.hub_flags import add_hub_flags, check_hub_threshold, hub_options
from pregel.errors import InputError, not_a_file

ALGORITHMS = ("pagerank", "sssp", "wcc", "bfs")
#: why a run stopped (``RunResult.stopped_by``), as its summary says it
_STOPPED = {"halted": "all vertices halted", "master": "converged",
            "max_supersteps": "superstep limit reached"}


def add_run(sub) -> None:
    """Register ``pregel run`` and its flags on the subparsers ``sub``."""
    from pregel.partition import PARTITIONERS

    p = sub.add_parser("run", help="run a graph algorithm on the superstep engine",
                       description="Run a vertex program over a graph file on every MPI rank and "
                                   "write /values in global vertex order.")
    p.add_argument("algorithm", metavar="ALGORITHM",
                   help=f"one of {', '.join(ALGORITHMS)}, or FILE.py:CLASS for your own VertexProgram "
                        "subclass (constructed with its `options` from the flags of their names)")
    p.add_argument("--graph", required=True, help="HDF5 graph file")
    p.add_argument("--out", required=True, help="result file (written atomically)")
    p.add_argument("--partition", choices=PARTITIONERS, default="range",
                   help="vertex partitioner (default %(default)s: id ranges balanced by edges)")
    p.add_argument("--max-supersteps", type=int, default=None, help="stop after N supersteps")
    add_hub_flags(p)
    add_ghost_memory_flag(p)
    declared = set()
    for name in ALGORITHMS:  # each algorithm's own options (its class's ``options``)
        for option in _algorithm(name).options:
            if option.name not in declared:
                declared.add(option.name)
                # None: not given (a program's own default then applies, and other programs may refuse it)
                p.add_argument("--" + option.name.replace("_", "-"), type=option.type, default=None,
                               help=f"{option.help} (default {option.default})")
    p.add_argument("--stats", action="store_true", help="print per-superstep statistics")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="cuda: each rank runs on one GPU of its node (default %(default)s)")
    add_checkpoint_flags(p, every=10, unit="supersteps")
    p.set_defaults(run=_run_run)


def _check_run_limits(args) -> None:
    require(args.max_supersteps is None or args.max_supersteps >= 1,
             f"--max-supersteps must be at least 1, got {args.max_supersteps}")
    check_checkpoint_every(args)
    check_hub_threshold(args)


def _program_identity(args, program) -> dict:
    """The program and the options that change its result (recorded in checkpoints; a resumed job
    may change --max-supersteps, a limit rather than an option of the program)."""
    if args.algorithm in ALGORITHMS:
        identity = {"algorithm": args.algorithm, **_built_in_options(_algorithm(args.algorithm), args)}
    else:
        from pregel.checkpoint import file_sha256

        path, _, name = args.algorithm.rpartition(":")
        identity = {"class": name, "file_sha256": file_sha256(path), **_given_options(type(program), args)}
    return identity


def _algorithm(name: str):
    """The VertexProgram class of algorithm ``name`` (one of ALGORITHMS)."""
    import vertex_programs as vp

    return {"pagerank": vp.PageRank, "sssp": vp.ShortestPaths, "wcc": vp.WeakComponents,
            "bfs": vp.BreadthFirst}[name]


def _program(args):
    if args.algorithm not in ALGORITHMS:
        program = _user_program(args.algorithm, args)
    else:
        program_class = _algorithm(args.algorithm)
        program = program_class.from_options(_built_in_options(program_class, args))
    _refuse_foreign_options(args, program)
    return program


def _algorithm_flags() -> set:
    """The option names of every built-in algorithm's flags (``--source``, ``--alpha``, ...)."""
    return {option.name for name in ALGORITHMS for option in _algorithm(name).options}


def _refuse_foreign_options(args, program) -> None:
    """InputError for a flag given a value that ``program`` does not take (``pregel run pagerank --source 3``
    ran plain PageRank, ``pregel run sssp --tol 5`` ignored the tolerance)."""
    taken = {option.name for option in program.options}
    for name in sorted(_algorithm_flags()):
        if name not in taken and getattr(args, name) is not None:
            users = [a for a in ALGORITHMS if name in {o.name for o in _algorithm(a).options}]
            raise InputError(f"`{name}` does not apply to {args.algorithm}: it is an option of "
                             f"{' and '.join(users)}")


def _run_run(args) -> None:
    with importing():
        from pregel.job import run_job
        from pregel.stats import format_table

    comm = world_comm()
    program, identity, ghost_bytes, problem = None, None, None, None
    try:
        _check_run_limits(args)
        ghost_bytes = ghost_memory(args)
        program = _program(args)
        identity = _program_identity(args, program)
    except InputError as err:
        problem = err
    comm.agree(problem)
    checkpoint = checkpointer(comm, args, identity)
    report = run_job(comm, args.graph, program, args.out, algorithm=args.algorithm,
                     partitioner=args.partition, max_supersteps=args.max_supersteps, hubs=hub_options(args),
                     progress=not args.quiet, checkpoint=checkpoint, device=args.device, ghost_memory=ghost_bytes)
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


def _given_options(cls, args) -> dict:
    """{name: value} of the flags given on the command line that are ``options`` of the program class
    ``cls``: what a user's program is constructed with (none given: ``cls()``, so a subclass of a built-in
    program whose ``__init__`` takes no arguments still runs)."""
    flags = _algorithm_flags()
    return {option.name: getattr(args, option.name) for option in cls.options
            if option.name in flags and getattr(args, option.name) is not None}


def _built_in_options(cls, args) -> dict:
    """{name: value} of every option of the built-in program class ``cls``: the flag's value where given,
    else the option's default."""
    return {option.name: option.default for option in cls.options} | _given_options(cls, args)


def _user_program(spec: str, args):
    """Instantiate ``CLASS`` from ``FILE.py:CLASS`` (a ``VertexProgram`` subclass), with the flags given for
    its ``options`` (``_given_options``)."""
    import importlib.util

    from pregel.program import VertexProgram

    path, _, name = spec.rpartition(":")
    if not path.endswith(".py") or not name:
        raise InputError(f"unknown algorithm {spec!r}: use one of {', '.join(ALGORITHMS)} or FILE.py:CLASS")
    if not os.path.isfile(path):
        raise InputError.at(path, None, not_a_file(path))
    module_spec = importlib.util.spec_from_file_location(f"pregel_user_{os.path.basename(path)[:-3]}", path)
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[module_spec.name] = module  # so that tracebacks and messages can find its file
    try:
        module_spec.loader.exec_module(module)
    except Exception as err:  # the user's file: a syntax error, a failed import, ...
        line = f" (line {err.lineno})" if isinstance(err, SyntaxError) and err.lineno else ""
        problem = f"cannot load it: {type(err).__name__}: {first_line(err)}{line}"
        raise InputError.at(path, None, problem) from None
    cls = getattr(module, name, None)
    if not (isinstance(cls, type) and issubclass(cls, VertexProgram)) or cls is VertexProgram:
        raise InputError.at(path, None, f"{name} is not a VertexProgram subclass defined there")
    values = _given_options(cls, args)
    try:
        return cls(**values)
    except Exception as err:
        raise InputError.at(path, None, f"cannot construct {name}({', '.join(values)}"
                                        f"){'' if values else ' without arguments'}: "
                                        f"{type(err).__name__}: {first_line(err)}") from None
