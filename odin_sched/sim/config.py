"""What a ``pregel simulate`` run does (its flags set the fields of the same names; the defaults are
these). Kept free of heavy imports so that the command line reads its defaults from here; the settings it
shares with ``pregel train`` default to the runtime's (``OdinOptions``)."""
import os
from dataclasses import dataclass

from odin_sched.odin.options import OdinOptions

#: the cost profiles (``costmodel.load_profile``)
PROFILES = ("a100-nvlink", "h200-ib", "h200-kernels", "cpu-here")


@dataclass
class SimulateConfig:
    """A scaling study: the ``modes`` (the runtime's of ``odin_sched.odin.modes`` and Grendel-GS's)
    simulated at each GPU count."""

    out: str | os.PathLike                  # result file (.h5)
    gpus: tuple = (8, 16, 32, 64)           # GPU counts
    layout: str = "city"                    # the generated scene's layout (metadata only), unless ``scene``
    scene: str | os.PathLike | None = None  # simulate a scene file's training instead (its initial Gaussians)
    gaussians: int = 1_000_000              # of the generated scene
    cameras: int = 2000
    width: int = 256
    height: int = 192
    steps: int = 40                         # batches to simulate
    batch_size: int | None = None           # images per batch (default: the GPU count)
    profile: str = "h200-ib"                # cost profile: one of PROFILES
    window: tuple = (OdinOptions.window,)   # batches per planning window; with several, each mode at its fastest
    cells_per_gpu: int | None = None        # cells per GPU (None: the trainer's default_cells of the Gaussians)
    max_staleness: int = OdinOptions.max_staleness  # odin-fast's staleness bound K
    shared_cores: int = 0                   # all virtual GPUs share N processors (0: each has its own)
    host_sends: bool = False                # messages posted by a host thread beside each GPU (train's --send-thread)
    batches_ahead: int = OdinOptions.batches_ahead  # as pregel train's (PlanConfig.batches_ahead)
    hold_share: float = OdinOptions.hold_share      # as pregel train's (PlanConfig.hold_share)
    seed: int = 0
    sh_degree: int = 3                      # SH degree of the Gaussians: what a cell weighs in messages and gathers
    modes: tuple = ("odin", "barrier", "grendel", "odin-fast")  # what to simulate (simulate.SIM_MODES)
    progress: bool = True                   # a progress bar, or a line on stderr every few seconds
