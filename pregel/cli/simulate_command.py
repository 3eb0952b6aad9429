"""``pregel simulate``: distributed training simulated on many GPUs (``odin_sched.sim``)."""

from pregel.cli.common import config_from_flags, integers


def add_simulate(sub) -> None:
    """Register ``pregel simulate`` and its flags on the subparsers ``sub``."""
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

    gpus, window = (tuple(integers(flag, value)) for flag, value in (("--gpus", args.gpus), ("--window", args.window)))
    modes = tuple(m.strip() for m in str(args.modes).split(",") if m.strip())
    run(config_from_flags(SimulateConfig, args, gpus=gpus, window=window, modes=modes, progress=not args.quiet))
