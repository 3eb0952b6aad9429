"""Checkpoint and restart of ``pregel train`` (the single-process and the distributed trainers).

A training checkpoint after step k is a row-sharded checkpoint (``pregel.sharded_checkpoint``: the
folder layout, manifest and refusals of ``pregel.checkpoint``, atomic writes, the last two kept, a
mismatched or corrupted checkpoint refused with one line). Each rank writes the Gaussians it holds
(one process: all of them) as the columns of ``state_columns`` plus ``row``, each Gaussian's row in the
whole model (the single-process trainer's order, the order in which both trainers render): their
parameters, visible-Adam moments, step counts, global ids and densification accumulator. Rank 0
writes the global values: the losses and held-out PSNR so far, the training time so far and, for the
distributed trainer, its visibility margin factor and violation count. So either trainer resumes the
other's checkpoints at any number of ranks: the single-process trainer reads every row
(``TrainCheckpointer.restore``), a distributed rank only those of the cells it owns
(``odin_sched.odin.shard.Shard.from_checkpoint``). The image order is no
state: ``odin_sched.training.train.prepare`` recomputes it from the scene and the options, and the step number
is the position in it. Densification's randomness is no state either: its draws are keyed by (seed,
step, Gaussian id) (``odin_sched.training.counter_rng``). Checkpoints written before Gaussians had ids
(which held a torch generator's state instead) are refused as written by another kind of job, and
those of the earlier single-part format as not sharded.

The manifest names the scene file (size and SHA-256 of its first MiB), the initial Gaussians (the
scene's ``/init`` or a PLY's SHA-256) and every option that changes the result (steps, batch size,
seed, SSIM weight, image order, held-out evaluation interval, densification, SH degree, position-LR
horizon); not the number of ranks nor the distributed mode, cells or window, which do not change it.
So a resumed run, at any number of ranks, ends with the uninterrupted run's parameters bit for bit.

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
from pregel.checkpoint import file_sha256, graph_identity
from pregel.sharded_checkpoint import ShardedCheckpointer
from pregel.errors import InputError

#: the column of each Gaussian's row in the whole model (the single-process trainer's order)
ROW = "row"
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
                         "position_lr_max_steps": config.position_lr_max_steps,
                         "position_lr_init": config.position_lr_init}}


class TrainCheckpointer(ShardedCheckpointer):
    """Writes training checkpoints into ``directory`` and restores from ``resume`` (see the module
    docstring); construct it on every rank (collective)."""

    def due(self, start: int, stop: int) -> bool:
        """Whether a checkpoint is written after steps ``start + 1 .. stop`` (a multiple of K among them)."""
        return self.directory is not None and stop // self.every > start // self.every

    def save(self, start: int, state: TrainState, rows=None) -> None:
        """Write the checkpoint after ``state.step`` when one is due since step ``start`` (collective):
        every rank the Gaussians of ``state.opt`` (and ``state.accum``), whose rows in the whole model are
        ``rows`` [g] int64 (default: 0 .. g - 1, the whole model), rank 0 the global values."""
        if not self.due(start, state.step):
            return
        opt = state.opt
        columns = state_columns(opt, state.accum)
        columns[ROW] = np.arange(opt.num_gaussians, dtype=np.int64) if rows is None else np.asarray(rows, np.int64)
        scalars = {"losses": state.losses[:state.step], "psnr_steps": np.array(state.psnr_steps, np.int64),
                   "psnr_values": np.array(state.psnr_values, np.float64),
                   "scalars": np.array([state.wall_time_s, state.safety, state.violations], np.float64)}
        self.save_rows(state.step, columns, scalars, {"step": state.step})

    def restore(self, state: TrainState) -> None:
        """Replace ``state`` (a fresh run's, over the whole model) by the checkpoint resumed from, if any
        (collective; every rank reads every row). The accumulator is restored when ``state`` keeps one
        (a fresh one when the checkpoint has none)."""
        if self.resume_from is None:
            return
        columns = self.restore_rows(state, lambda row: np.ones(len(row), bool))
        if columns is not None:
            state.accum = install_columns(state.opt, columns, state.accum is not None)

    def restore_rows(self, state: TrainState, select) -> dict | None:
        """The checkpoint's rows [m, ...] that ``select(row)`` (bool [c] of rows in the whole model [c])
        keeps, by ascending row, as ``state_columns``'s names plus ``row``, and its global values set in
        ``state`` (collective); None when no checkpoint is resumed from."""
        if self.resume_from is None:
            return None
        columns, scalars = self.load_rows(lambda small: select(small[ROW]), keys=(ROW,))
        order = np.argsort(columns[ROW], kind="stable")
        state.step = len(scalars["losses"])
        state.losses[:state.step] = scalars["losses"]
        state.psnr_steps[:] = scalars["psnr_steps"].tolist()
        state.psnr_values[:] = scalars["psnr_values"].tolist()
        wall, state.safety, violations = scalars["scalars"].tolist()
        state.wall_time_s, state.violations = wall, int(violations)
        return {name: value[order] for name, value in columns.items()}

    def whole_model_means(self) -> np.ndarray:
        """The means [G, 3] float32 of the whole model of the checkpoint resumed from, by row (collective;
        reads only the row and means columns of every part)."""
        seen = []

        def note(small):
            seen.append((small[ROW], small["params/means"]))
            return np.zeros(len(small[ROW]), bool)

        self.load_rows(note, keys=(ROW, "params/means"), columns=(ROW, "params/means"))
        rows = np.concatenate([np.empty(0, np.int64)] + [row for row, _ in seen])
        means = np.concatenate([np.empty((0, 3), np.float32)] + [m for _, m in seen])
        out = np.empty_like(means)
        out[rows] = means
        return out


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
