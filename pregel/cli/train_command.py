"""``pregel train``: Gaussians trained on a scene file, by one process or distributed under mpiexec
(``odin_sched.training``, ``odin_sched.odin``), with its live dashboard."""

import argparse
import os
import re

from pregel.cli.checkpoint_flags import add_checkpoint_flags
from pregel.cli.common import world_comm, config_from_flags
from pregel.errors import InputError

NO_CUDA_CHECKPOINTS = "--device cuda: checkpoints (--checkpoint-dir, --resume) are not supported on the GPU yet"
#: the flag that sets each field of ``DensifyConfig`` (its errors name the fields, shown as these flags)
DENSIFY_FLAGS = {"interval": "--densify-interval", "start": "--densify-from", "stop": "--densify-until",
                 "grad_threshold": "--densify-grad-threshold", "opacity_reset_interval": "--opacity-reset-interval"}


def add_train(sub) -> None:
    """Register ``pregel train`` and its flags on the subparsers ``sub``."""
    from odin_sched.odin.modes import MODES
    from odin_sched.odin.options import OdinOptions as odin_defaults
    from odin_sched.training.config import TrainConfig as defaults
    from odin_sched.training.densify_schedule import DensifyConfig as densify_defaults

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
    p.add_argument("--densify-from", type=int, default=densify_defaults.start, metavar="IMAGE",
                   help="densify once past this image (reference densify_from_iter, default %(default)s: "
                        "first at 600)")
    p.add_argument("--densify-until", type=int, default=densify_defaults.stop, metavar="IMAGE",
                   help="stop densifying at this image (reference densify_until_iter, default %(default)s "
                        "whatever the run's length; never after the run's last step)")
    p.add_argument("--densify-interval", type=int, default=densify_defaults.interval, metavar="IMAGES",
                   help="images between densification rounds (reference, default %(default)s)")
    p.add_argument("--densify-grad-threshold", type=float, default=densify_defaults.grad_threshold,
                   help="average screen-space gradient that clones or splits (reference, default %(default)s)")
    p.add_argument("--opacity-reset-interval", type=int, default=densify_defaults.opacity_reset_interval,
                   metavar="IMAGES",
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
    p.add_argument("--max-staleness", type=int, default=odin_defaults.max_staleness, metavar="K",
                   help="odin-fast: updates of a low-impact cell an image may miss (default %(default)s)")
    p.add_argument("--stale-impact", type=float, default=odin_defaults.stale_impact, metavar="F",
                   help="odin-fast: the share of an image's predicted visible Gaussians it may read stale, "
                        "its smallest cells first (default %(default)s)")
    p.add_argument("--send-thread", action="store_true",
                   help="odin, odin-fast: post each rank's messages from a thread beside its compute, so that a "
                        "GPU rank renders its next image while the last one's messages are posted (needs MPI "
                        "with MPI_THREAD_MULTIPLE; on processor cores it only moves that time to another thread)")
    p.add_argument("--batches-ahead", type=int, default=odin_defaults.batches_ahead, metavar="N",
                   help="odin, odin-fast: a rank starts an image only once all its images of batches more than N "
                        "before it have begun (default %(default)s; 0: of every earlier batch; a larger N lets a rank fill a wait "
                        "with a later batch's image, which pays where cells take long to arrive)")
    p.add_argument("--hold-share", type=float, default=odin_defaults.hold_share, metavar="S",
                   help="odin, odin-fast: a rank with nothing else to fire starts an image that the batch order "
                        "holds back after waiting S times its mean image's seconds (default %(default)s; inf: never)")
    p.add_argument("--cells", type=int, default=None, metavar="K",
                   help="spatial cells of Gaussians, the unit of ownership and transfer (default: about one per "
                        "8192 initial Gaussians, at least 16 and at most 512 per rank; smaller cells make the "
                        "whole-cell updates an image waits for smaller)")
    p.add_argument("--split-above", type=int, default=None, metavar="N",
                   help="a cell holding more than N Gaussians splits in two at a window's end (default: never)")
    p.add_argument("--max-imbalance", type=float, default=odin_defaults.max_imbalance, metavar="F",
                   help="whole cells move between owners at a window's end while a rank owns more than F x "
                        "the mean number of Gaussians (default %(default)s)")
    p.add_argument("--window", type=int, default=None, metavar="W",
                   help=f"batches per planning window (default {odin_defaults.window})")
    p.add_argument("--timeline", default=None, metavar="T.json",
                   help="write a Chrome trace of the run (open in Perfetto or chrome://tracing)")
    p.add_argument("--schedule-out", default=None, metavar="F.h5",
                   help="write the first window's dependency graph of steps and its schedule")
    p.add_argument("--stats", action="store_true", help="print time and traffic per rank")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="cuda: train on each rank's GPU (default %(default)s)")
    add_checkpoint_flags(p, every=500, unit="steps")
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
    from odin_sched.training.densify_schedule import DensifyConfig
    from odin_sched.training.train import train

    if args.dashboard is not None:
        _start_dashboard(args)
    densify = None
    if args.densify:
        try:
            densify = DensifyConfig(**{field: getattr(args, flag[2:].replace("-", "_"))
                                       for field, flag in DENSIFY_FLAGS.items()})
        except ValueError as err:  # its fields in backquotes, named by their flags
            raise InputError(re.sub(r"`(\w+)`", lambda m: DENSIFY_FLAGS.get(m.group(1), m.group(0)), str(err))) from None
    config = config_from_flags(TrainConfig, args, densify=densify, status=True)
    comm = world_comm()
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
        options = config_from_flags(OdinOptions, args, mode=args.mode or "odin", window=window)
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

    comm, server, problem = world_comm(), None, None
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
