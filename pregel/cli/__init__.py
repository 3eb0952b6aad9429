"""The ``pregel`` command: one entry point with a subcommand per job.

This is the one package of ``pregel/`` that knows the other packages; it imports a subcommand's
package only when that subcommand runs, so ``pregel inspect`` never pays for torch or the
rasterizer. Bad input (``InputError``) ends the command with one line on stderr and exit status 2.

``main`` parses the command line and hands the command to ``launch``, which checks its files (``files``),
runs it and turns its errors into exit statuses. Each command's flags (``_add_X``) and run (``_run_X``)
are in the module of its family: ``graph_commands`` (generate, convert, inspect), ``run_command``,
``infer_command``, ``scene_commands`` (generate-scene, convert-colmap, sfm), ``train_command``,
``view_commands`` (view, render), ``simulate_command`` and ``plot_command``. What several share:
``common`` (flag helpers, the communicator), ``checkpoint_flags`` and ``collection`` (the garbage
collector around a command).
"""

import os

# One thread per process: parallelism comes from MPI ranks. Must be set before numba/torch load.
for _var in ("OMP_NUM_THREADS", "NUMBA_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402

from pregel.cli.collection import running_command  # noqa: E402
from pregel.cli.graph_commands import add_convert, add_generate, add_inspect  # noqa: E402
from pregel.cli.infer_command import add_infer  # noqa: E402
from pregel.cli.launch import DISTRIBUTED, run_parsed  # noqa: E402
from pregel.cli.plot_command import add_plot  # noqa: E402
from pregel.cli.run_command import add_run  # noqa: E402
from pregel.cli.scene_commands import add_convert_colmap, add_generate_scene, add_sfm  # noqa: E402
from pregel.cli.simulate_command import add_simulate  # noqa: E402
from pregel.cli.train_command import add_train  # noqa: E402
from pregel.cli.view_commands import add_render, add_view  # noqa: E402
from pregel.comm import launched_rank  # noqa: E402
from pregel.interrupt import exit_on_interrupt  # noqa: E402
from pregel.memory import keep_freed_memory  # noqa: E402
from pregel.quick_exit import end_process  # noqa: E402

SUBCOMMANDS = (add_generate, add_convert, add_inspect, add_run, add_infer, add_generate_scene,
               add_train, add_convert_colmap, add_sfm, add_render, add_view, add_simulate, add_plot)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand registered."""
    parser = argparse.ArgumentParser(
        prog="pregel", description="Pregel-style graph computing on MPI. "
                                   "Launch with `mpiexec -n P pregel <command> ...`.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="command")
    for add in SUBCOMMANDS:
        add(sub)
    return parser


#: commands whose freed memory goes back to the kernel at once, as glibc does by default, instead of staying in
#: the heap under later arrays (``pregel.memory.keep_freed_memory``, which the others ask for): those that make
#: each large array once (a graph file's edges, sort orders, draws: `pregel generate --weights --features 64
#: --labels 8` of 100M edges peaked at 11.7 GB with freed blocks kept, 3.6 GB without), and training, whose
#: arrays of a model's size (rows of the batch, gradients, messages of cells) change size from step to step
#: and left holes (2,000,000 Gaussians, odin at P = 3: 5.5 GB a rank kept, 4.0-4.2 GB handed back; README)
RETURNS_FREED_MEMORY = ("generate", "convert", "inspect", "train")


def main(argv=None) -> int:
    """Run the ``pregel`` command line; returns the exit status.

    Bad input: one line on stderr and exit status 2. When every rank raised the same error (the
    collective checks), each exits cleanly and rank 0 alone prints it. Any other exception under
    MPI is printed with its rank and aborts the whole job, so no rank waits forever.
    Run as the process's own command line (``argv`` None), the process ends here with that status,
    without the interpreter's teardown (``pregel.quick_exit``).
    """
    args = build_parser().parse_args(argv)
    if args.command not in DISTRIBUTED and launched_rank() != 0:
        return 0  # a one-process command launched on several ranks runs on rank 0 alone
    if args.command in DISTRIBUTED:  # a one-process command takes Ctrl-C as a process alone does
        exit_on_interrupt(args.command)
    if args.command not in RETURNS_FREED_MEMORY:
        keep_freed_memory()
    own = argv is None  # this process's own command line: it ends when main returns
    with running_command(own):
        code = run_parsed(args)
    if own:
        end_process(code)
    return code

