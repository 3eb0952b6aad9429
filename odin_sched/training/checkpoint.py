"""Checkpoint and restart of ``pregel train`` (the single-process and the distributed trainers).

A training checkpoint after step k uses the folder layout, manifest and refusals of
``pregel.checkpoint`` (atomic writes, the last two kept, a mismatched or corrupted checkpoint refused
with one line). It holds one part, written by one rank, because the state is global whenever it is
saved: the single-process trainer saves after a step, the distributed trainer at the end of a window,
when every rank holds the whole model. The part holds the ``TrainState``: the Gaussians and their
visible-Adam state (moments, per-Gaussian step counts and global ids), the densification
accumulator, the losses and held-out PSNR so far, the training time so far and,
for the distributed trainer, its visibility margin factor and violation count. The image order is no
state: ``odin_sched.training.train.prepare`` recomputes it from the scene and the options, and the step number
is the position in it. Densification's randomness is no state either: its draws are keyed by (seed,
step, Gaussian id) (``odin_sched.training.counter_rng``). Checkpoints written before Gaussians had ids
(which held a torch generator's state instead) are refused as written by another kind of job.

The manifest names the scene file (size and SHA-256 of its first MiB), the initial Gaussians (the
scene's ``/init`` or a PLY's SHA-256) and every option that changes the result (steps, batch size,
seed, SSIM weight, image order, held-out evaluation interval, densification, SH degree, position-LR
horizon); not the number of ranks nor the distributed mode, cells or window, which do not change it.
So a resumed run, at any number of ranks, ends with the uninterrupted run's parameters bit for bit.

``state_columns`` and ``install_columns`` give the per-Gaussian part of the state as named columns for
row-sharded checkpoints (``pregel.sharded_checkpoint``), where each rank saves the Gaussians it owns.

With ``--checkpoint-every K`` a checkpoint is written after every step that is a multiple of K in the
single-process trainer, and at the first window end at or after each multiple of K in the
distributed one (its windows do not depend on checkpointing, so a resumed run plans the same windows).
"""
from dataclasses import asdict, dataclass

import numpy as np
import torch

from odin_sched.training.config import TrainConfig
from odin_sched.training.densify import GradAccumulator
from odin_sched.training.image_order import resolved_order
from odin_sched.training.optim import VisibleAdam
from pregel.checkpoint import CheckpointFolder, file_sha256, graph_identity, pack_state, unpack_state, write_part
from pregel.errors import InputError

PART = "state.npz"
#: how densification draws (recorded, so a checkpoint of the older torch-generator trainer is refused)
DENSIFY_DRAWS = "counter (seed, step, Gaussian id)"


@dataclass
class TrainState:
    """Everything a training run carries from one step to the next (global: the same on every rank)."""

    step: int                     # batches done
    opt: VisibleAdam
    accum: GradAccumulator | None  # None when the trainer keeps none (no densification, one process)
    losses: np.ndarray            # [steps] float64, the first ``step`` filled
    psnr_steps: list              # steps at which held-out PSNR was measured
    psnr_values: list             # held-out PSNR (dB) at those steps
    wall_time_s: float = 0.0      # training time so far, over all runs
    safety: float = 1.0           # distributed trainer: visibility margin factor
    violations: int = 0           # distributed trainer: Gaussians that left the margin so far


def state_columns(opt: VisibleAdam, accum: GradAccumulator | None, rows=None) -> dict:
    """The per-Gaussian training state as named columns [g, ...] (the Gaussians ``rows``, default all),
    for ``pregel.sharded_checkpoint.ShardedCheckpointer.save_rows``: ``ids``, ``step_count``,
    ``params/NAME``, ``exp_avg/NAME``, ``exp_avg_sq/NAME`` and, with an accumulator, ``accum/total``,
    ``accum/count``, ``accum/max_radii``."""
    def pick(value):
        return value.detach() if rows is None else value.detach()[rows]

    columns = {"ids": pick(opt.ids), "step_count": pick(opt.step_count)}
    for group, state in (("params", opt.params), ("exp_avg", opt.exp_avg), ("exp_avg_sq", opt.exp_avg_sq)):
        columns.update({f"{group}/{name}": pick(value) for name, value in state.items()})
    if accum is not None:
        columns.update({"accum/total": pick(accum.total), "accum/count": pick(accum.count),
                        "accum/max_radii": pick(accum.max_radii)})
    return columns


def install_columns(opt: VisibleAdam, columns: dict, with_accum: bool) -> GradAccumulator | None:
    """Make ``opt`` hold the Gaussians of ``columns`` (``state_columns``'s names, NumPy or torch [g, ...],
    as restored) on its device; returns their accumulator (zeros when the columns have none), or None
    without ``with_accum``."""
    def tensor(name):
        value = columns[name]
        return (value if isinstance(value, torch.Tensor) else torch.from_numpy(np.array(value))).to(opt.device)

    for group, state in (("exp_avg", opt.exp_avg), ("exp_avg_sq", opt.exp_avg_sq)):
        for name in state:
            state[name] = tensor(f"{group}/{name}")
    for name in opt.params:
        opt.params[name] = tensor(f"params/{name}").requires_grad_(True)
    opt.ids, opt.step_count = tensor("ids"), tensor("step_count")
    if not with_accum:
        return None
    accum = GradAccumulator(opt.num_gaussians, opt.device)
    if "accum/total" in columns:
        accum.total, accum.count, accum.max_radii = (tensor(f"accum/{name}") for name in ("total", "count", "max_radii"))
    return accum


def train_identity(config: TrainConfig) -> dict:
    """What a resumed training job must match: the scene file, the initial Gaussians and the settings that
    change the result."""
    densify_options = None if config.densify is None else asdict(config.densify)
    return {"scene": graph_identity(config.scene), "densify_draws": DENSIFY_DRAWS,
            "init": "scene /init" if config.init_ply is None else {"ply_sha256": file_sha256(config.init_ply)},
            "training": {"steps": config.steps, "batch_size": config.batch_size, "seed": config.seed,
                         "ssim_weight": config.ssim_weight, "eval_every": config.eval_every,
                         "image_order": resolved_order(config.image_order, config.batch_size),
                         "densify": densify_options, "sh_degree": config.sh_degree,
                         "position_lr_max_steps": config.position_lr_max_steps}}


class TrainCheckpointer(CheckpointFolder):
    """Writes training checkpoints into ``directory`` and restores from ``resume`` (see the module
    docstring); construct it on every rank (collective)."""

    def due(self, start: int, stop: int) -> bool:
        """Whether a checkpoint is written after steps ``start + 1 .. stop`` (a multiple of K among them)."""
        return self.directory is not None and stop // self.every > start // self.every

    def save(self, start: int, state: TrainState) -> None:
        """Write the checkpoint after ``state.step`` when one is due since step ``start`` (rank 0 only;
        the others go on)."""
        if self.comm.rank != 0 or not self.due(start, state.step):
            return
        opt = state.opt
        tree = {"params": opt.params, "exp_avg": opt.exp_avg, "exp_avg_sq": opt.exp_avg_sq,
                "step_count": opt.step_count, "ids": opt.ids,
                "losses": state.losses[:state.step], "psnr_steps": np.array(state.psnr_steps, np.int64),
                "psnr_values": np.array(state.psnr_values, np.float64),
                "scalars": np.array([state.wall_time_s, state.safety, state.violations], np.float64)}
        if state.accum is not None:
            tree["accum"] = {"total": state.accum.total, "count": state.accum.count,
                             "max_radii": state.accum.max_radii}
        step_dir = self.step_dir(state.step)
        step_dir.mkdir(parents=True, exist_ok=True)
        part = write_part(step_dir, PART, pack_state(tree))
        self.commit(state.step, [part], {"step": state.step, "ranks": self.comm.size,
                                         "num_gaussians": opt.num_gaussians})

    def restore(self, state: TrainState) -> None:
        """Replace ``state`` (a fresh run's) by the checkpoint resumed from, if any (collective). The
        accumulator is restored when ``state`` keeps one (a fresh one when the checkpoint has none)."""
        if self.resume_from is None:
            return
        problem, tree = None, None
        try:
            tree = unpack_state(self.read_part())
        except InputError as err:
            problem = err
        self.comm.agree(problem)
        opt = state.opt
        for name, value in tree["params"].items():
            opt.params[name] = value.requires_grad_(True)
        opt.exp_avg.update(tree["exp_avg"])
        opt.exp_avg_sq.update(tree["exp_avg_sq"])
        opt.step_count = tree["step_count"]
        opt.ids = tree["ids"]
        if state.accum is not None:
            state.accum = GradAccumulator(opt.num_gaussians)
            if "accum" in tree:
                accum = tree["accum"]
                state.accum.total, state.accum.count, state.accum.max_radii = (
                    accum["total"], accum["count"], accum["max_radii"])
        state.step = len(tree["losses"])
        state.losses[:state.step] = tree["losses"]
        state.psnr_steps[:] = tree["psnr_steps"].tolist()
        state.psnr_values[:] = tree["psnr_values"].tolist()
        wall, state.safety, violations = tree["scalars"].tolist()
        state.wall_time_s, state.violations = wall, int(violations)


def train_checkpointer(comm, config: TrainConfig, directory=None, every: int = 500,
                       resume=None) -> TrainCheckpointer | None:
    """The ``TrainCheckpointer`` of a training job (collective): checkpoints every ``every`` steps into
    ``directory``, resuming from the newest in ``resume``; None when neither folder is given."""
    if directory is None and resume is None:
        return None
    identity, problem = None, None
    try:
        identity = train_identity(config)
    except InputError as err:
        problem = err
    comm.agree(problem)
    return TrainCheckpointer(comm, identity, directory, every, resume)
