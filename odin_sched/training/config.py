"""The settings of a training run, shared by both trainers; ``pregel train``'s flags set the fields of
the same name (``--batch-size`` sets ``batch_size``) and its defaults are these. Kept free of heavy
imports so that the command line reads its defaults from here."""
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # for the annotation only: importing it at run time would pull in torch
    from odin_sched.training.densify_schedule import DensifyConfig


@dataclass
class TrainConfig:
    """What a training run reads, does and writes."""

    scene: str | os.PathLike                # input scene file (with /init unless ``init_ply``)
    steps: int                              # training steps, one batch of ``batch_size`` images each
    out: str | os.PathLike | None = None    # the trained scene file (both trainers need it)
    ply: str | os.PathLike | None = None    # also write the trained Gaussians as a 3DGS PLY
    png: str | os.PathLike | None = None    # first held-out view beside its ground truth (default: out, .png)
    batch_size: int = 1                     # images per step (see ``odin_sched.training.step``)
    seed: int = 0                           # camera order and densification sampling
    ssim_weight: float = 0.2                # loss (1 - w) L1 + w (1 - SSIM)
    eval_every: int = 100                   # held-out PSNR every N steps (and after the last)
    densify: "DensifyConfig | None" = None  # odin_sched.training.densify.DensifyConfig; None: no densification
    position_lr_max_steps: int = 30_000     # images over which the means' learning rate decays 100x, whatever
                                            # the run's length (the reference's position_lr_max_steps)
    position_lr_init: float = 1.6e-4        # the means' first learning rate per unit of scene extent (the
                                            # reference's position_lr_init; it decays to a hundredth of it)
    init_ply: str | os.PathLike | None = None  # start from a 3DGS PLY's Gaussians instead of /init
    image_order: str | None = None          # 'shuffled' or 'spread' (default: shuffled for B = 1, else spread)
    device: str = "cpu"                     # 'cpu', or 'cuda': each rank trains on its GPU
    sh_degree: int = 3                      # largest SH degree of the colour (0..3; odin_sched.scenes.sh), the
                                            # active degree one higher every 1,000 images (3DGS's default 3)
    cull: bool = True                       # one process: an image renders only the Gaussians that can touch
                                            # it (odin_sched.training.culling; the same pixels and gradients)
    progress: bool = True                   # a progress bar (rank 0)
    status: bool = False                    # write the dashboard's status file beside ``out`` (odin_sched.view)

    @property
    def png_path(self):
        """The comparison PNG: ``png``, else ``out`` with .png (None without ``out``)."""
        if self.png is not None or self.out is None:
            return self.png
        return default_png(self.out)

    def outputs(self) -> tuple:
        """The files a training run writes, as (field, path) pairs (None: not written)."""
        return (("out", self.out), ("ply", self.ply), ("png", self.png_path))


def default_png(out) -> str:
    """The comparison PNG written beside the trained scene file ``out`` when none is named: ``out`` with .png."""
    return os.path.splitext(os.fspath(out))[0] + ".png"
