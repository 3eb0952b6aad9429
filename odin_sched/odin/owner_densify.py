"""Densification on a sharded model: every owner densifies its own Gaussians.

A round (``odin_sched.training.densify.densify_round``) runs on each rank's owned rows only: the
screen-space statistics are the owner's, a split child's offset is drawn by the counter-based generator
keyed by (seed, step, the child's id), and the rows come out in ascending id. So the union of the
owners' rows, merged by id, is exactly what the single-process trainer's round gives (whose rows are
always in ascending id), and rendering a gathered set of cells in id order blends as the single
process does. New Gaussians join their parent's cell (a child's parent is read from its id,
``odin_sched.training.gaussian_ids.parent_ids``); cells persist across the round (splitting and
migration at later window ends even them out).

What crosses ranks: no parameter or optimizer state. Every rank learns the new membership of every cell
from one gather of (id, cell) pairs (16 bytes per Gaussian, the membership every rank keeps anyway,
``Shard``), and, only when a round would prune every Gaussian of the model, which one survives (one
value per rank).
"""
import numpy as np
import torch

from odin_sched.odin.shard import Shard
from odin_sched.scenes.cells import cell_members
from odin_sched.training.densify import best_row, densify_round
from odin_sched.training.densify_schedule import DensifyConfig
from odin_sched.training.gaussian_ids import parent_ids


def survivor_of_all(comm):
    """The ``survivor`` rule of ``densify_and_prune`` over every owner's rows (collective): a rank's rows
    stay as they are unless no rank keeps any Gaussian, and then only the most opaque Gaussian of the
    whole model survives (the lowest id among equals, as ``most_opaque`` picks in one process)."""
    def survivor(opacities: torch.Tensor, ids: torch.Tensor, alive: torch.Tensor) -> torch.Tensor:
        offers = comm.allgather((bool(alive.any()), *best_row(opacities, ids)))
        candidates = [(-opacity, gid) for _, opacity, gid in offers if gid >= 0]
        if any(kept for kept, _, _ in offers) or not candidates:
            return alive
        return ids == min(candidates)[1]
    return survivor


def parent_cells(ids: np.ndarray, old_ids: np.ndarray, old_cell_of: np.ndarray) -> np.ndarray:
    """The cell [g] of each owned Gaussian after a round: its own cell if it is an old Gaussian, else its
    parent's. ids: [g] int64 after the round; old_ids [g0] (ascending), old_cell_of [g0]: before it."""
    at = np.minimum(np.searchsorted(old_ids, ids), max(len(old_ids) - 1, 0))
    old = (at < len(old_ids)) & (old_ids[at] == ids) if len(old_ids) else np.zeros(len(ids), bool)
    source = np.where(old, ids, parent_ids(torch.from_numpy(ids)).numpy())
    return old_cell_of[np.searchsorted(old_ids, source)]


def densify_owned(comm, shard: Shard, step: int, steps: int, batch_size: int, extent: float,
                  config: DensifyConfig, seed: int) -> Shard:
    """What densification does after batch ``step`` on every owner's Gaussians (collective): a round
    when due (then a new ``Shard`` over the same cells and owners, new members), the opacity reset when
    due (in place). Returns the shard to go on with."""
    shard.drop_blocks()  # the packed copies of the cells no longer hold after a reset in place
    if not config.due(step, steps, batch_size):
        densify_round(shard.opt, shard.accum, step, steps, batch_size, extent, config, seed)
        return shard
    old_ids, old_cell_of = shard.opt.ids.cpu().numpy(), shard.owned_cell_of
    accum = densify_round(shard.opt, shard.accum, step, steps, batch_size, extent, config, seed,
                          survivor_of_all(comm))
    ids = shard.opt.ids.cpu().numpy()
    pairs = comm.allgather_rows(np.stack([ids, parent_cells(ids, old_ids, old_cell_of)], axis=1))
    by_id = np.argsort(pairs[:, 0], kind="stable")  # a merge of the ranks' ascending runs (ids are distinct)
    indptr, members = cell_members(pairs[by_id, 1], shard.num_cells)  # rows: ranks of ids
    return Shard(shard.rank, indptr, members, shard.owner, shard.opt, accum)
