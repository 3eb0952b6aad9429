"""Densify a sharded model on this job's ranks, each owner its own Gaussians, against one process.

Usage: mpiexec -n P python -m mpi4py tests/mpi_scripts/densify_owned.py ROUNDS SEED
Every rank builds the same model (``migrate_cells.model``) and takes its shard of it. Each round draws
new densification statistics for every Gaussian (the same on every rank, by id), densifies the whole
model in this process with ``densify_round`` (the oracle) and the shard with ``densify_owned``; then,
on every rank: the model gathered from the owners equals the oracle's bit for bit (rows, moments, step
counts, ids), ids are unique, every Gaussian is owned by exactly one rank and sits in its own cell
before the round or its parent's, and ``densify_and_prune`` saw only this rank's owned rows (the rows
densified on all ranks add up to the model, never more on one rank than it owns). The last round prunes
every Gaussian, all equally opaque, so one survivor is chosen across the owners. Prints "ok ROUNDS
ROWS" on rank 0 (ROWS: the most rows any rank densified at once); any failure raises.
"""
import sys

import numpy as np
import torch

import odin_sched.training.densify as densify
from migrate_cells import check, model
from odin_sched.odin.owner_densify import densify_owned
from odin_sched.odin.shard import Shard
from odin_sched.training.densify import GradAccumulator
from odin_sched.training.densify_schedule import DensifyConfig
from odin_sched.training.gaussian_ids import parent_ids
from pregel.comm import Comm

STEPS = 100
SEEN = []  # rows of every densify_and_prune call in this process
ORIGINAL = densify.densify_and_prune


def counted(params, ids, *args, **kwargs):
    SEEN.append(len(ids))
    return ORIGINAL(params, ids, *args, **kwargs)


def statistics(ids: torch.Tensor, step: int, seed: int) -> GradAccumulator:
    """Densification statistics of Gaussians ``ids``: a function of (seed, step, id) only."""
    rng = np.random.default_rng([seed, step])
    table = rng.random((3, 1 << 12))
    key = (ids.numpy() * 2654435761 + (ids.numpy() >> 57)) % (1 << 12)
    accum = GradAccumulator(len(ids))
    accum.total = torch.from_numpy((table[0, key] * 2e-3).astype(np.float32))
    accum.count = torch.from_numpy((table[1, key] * 4).astype(np.int64) + 1)
    accum.max_radii = torch.from_numpy((table[2, key] * 30).astype(np.float32))
    return accum


def cells_of(shard: Shard, comm) -> dict:
    """{Gaussian id: cell} of the whole model, from the owners."""
    mine = np.stack([shard.opt.ids.numpy(), shard.owned_cell_of], axis=1)
    pairs = comm.allgather_rows(mine)
    return dict(zip(pairs[:, 0].tolist(), pairs[:, 1].tolist()))


def main(rounds, seed):
    comm = Comm()
    full = model(400, seed)
    shard = Shard.from_full(comm.rank, comm.size, full, 7)
    extent = 8.0
    config = DensifyConfig(interval=1, start=0, stop=STEPS, grad_threshold=1e-3, percent_dense=0.15,
                           min_opacity=0.3, opacity_reset_interval=0, max_screen_radius=25.0, max_world_fraction=0.6)
    densify.densify_and_prune = counted
    most = 0
    for step in range(1, rounds + 1):
        if step == rounds:  # every Gaussian is pruned, all equally opaque: one survives in the whole model
            config = DensifyConfig(interval=1, start=0, stop=STEPS, min_opacity=0.99, opacity_reset_interval=0)
            full.opt.params["opacities"].data.fill_(0.5)
            shard.opt.params["opacities"].data.fill_(0.5)
        full.accum = statistics(full.opt.ids, step, seed)
        shard.accum = statistics(shard.opt.ids, step, seed)
        before, owned = cells_of(shard, comm), len(shard.opt.ids)
        full.accum = densify.densify_round(full.opt, full.accum, step, STEPS, 1, extent, config, seed)
        SEEN.clear()
        shard = densify_owned(comm, shard, step, STEPS, 1, extent, config, seed)
        assert SEEN == [owned], (SEEN, owned)
        assert sum(comm.allgather(owned)) == len(before) and (comm.size == 1 or owned < len(before))
        most = max(most, owned)
        check(comm, shard, full)
        assert torch.equal(shard.gather(comm).opt.ids, full.opt.ids)
        ids = full.opt.ids
        assert len(torch.unique(ids)) == len(ids), "an id is given twice"
        after = cells_of(shard, comm)
        for gid, parent in zip(ids.tolist(), parent_ids(ids).tolist()):  # a loop over Gaussians: the oracle
            assert after[gid] == before.get(gid, before.get(parent)), (gid, parent)
    assert full.opt.num_gaussians == 1
    if comm.rank == 0:
        print("ok", rounds, max(comm.allgather(most)))
    else:
        comm.allgather(most)


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
