"""Move cells between the ranks of this job at random, split some, and check ownership after each move.

Usage: mpiexec -n P python -m mpi4py tests/mpi_scripts/migrate_cells.py MOVES SEED
Every rank builds the same model (each Gaussian's state distinct), takes its shard, then applies MOVES
random reassignments of the cells' owners (``migrate``), with a split of the largest cells every third
move (``split_cells``). After every move, on every rank: every Gaussian is owned by exactly one rank
(the ranks' owned ids, gathered, count each id once), each rank's rows are those of its cells, and the
whole model gathered from the owners equals the model built at the start, bit for bit; columns carried
with the moving rows (every other move) arrive in the new owner's row order. Prints
"ok MOVES" on rank 0 at the end; any failure raises (mpiexec then ends the job).
"""
import sys

import numpy as np
import torch

from odin_sched.odin.migration import migrate, split_cells
from odin_sched.odin.shard import FullState, Shard
from odin_sched.training.densify import GradAccumulator
from odin_sched.training.optim import VisibleAdam
from pregel.comm import Comm


def model(g, seed):
    """A full model of g Gaussians whose every number is distinct."""
    rng = np.random.default_rng(seed)
    params = {"means": rng.normal(size=(g, 3)), "scales": rng.normal(size=(g, 3)), "quats": rng.normal(size=(g, 4)),
              "opacities": rng.normal(size=g), "sh0": rng.normal(size=(g, 1, 3)), "shN": rng.normal(size=(g, 3, 3))}
    opt = VisibleAdam({k: torch.from_numpy(v.astype(np.float32)) for k, v in params.items()},
                      dict.fromkeys(params, 0.1))
    for name in params:
        opt.exp_avg[name] = torch.from_numpy(rng.normal(size=params[name].shape).astype(np.float32))
        opt.exp_avg_sq[name] = torch.from_numpy(rng.random(size=params[name].shape).astype(np.float32))
    opt.step_count = torch.from_numpy(rng.integers(0, 10 ** 9, size=g))
    accum = GradAccumulator(g)
    accum.total = torch.from_numpy(rng.random(g).astype(np.float32))
    accum.count = torch.from_numpy(rng.integers(0, 100, size=g))
    accum.max_radii = torch.from_numpy(rng.random(g).astype(np.float32))
    return FullState(opt, accum)


def check(comm, shard, full):
    owned = comm.allgather_rows(shard.owned_ids)
    assert np.array_equal(np.bincount(owned, minlength=shard.num_gaussians), np.ones(shard.num_gaussians)), \
        "a Gaussian is owned by no rank or by several"
    cells = np.flatnonzero(shard.owner == comm.rank)
    mine = np.concatenate([np.empty(0, np.int64), *(shard.cell_rows(c) for c in cells)])
    assert np.array_equal(np.sort(mine), shard.owned_ids), "a rank's rows are not those of its cells"
    assert np.array_equal(np.sort(shard.members), np.arange(shard.num_gaussians)), "cells do not partition"
    got = shard.gather(comm)
    for name in full.opt.params:
        for state in ("params", "exp_avg", "exp_avg_sq"):
            assert torch.equal(getattr(got.opt, state)[name].detach(), getattr(full.opt, state)[name].detach()), \
                (state, name)
    assert torch.equal(got.opt.step_count, full.opt.step_count)
    for name in ("total", "count", "max_radii"):
        assert torch.equal(getattr(got.accum, name), getattr(full.accum, name)), name


def row_columns(ids):
    """[g, 2] float32 columns that name the Gaussians of global ``ids`` [g] (exact: ids < 2 ** 23)."""
    return np.stack([ids, -0.5 * ids], axis=1).astype(np.float32)


def main(moves, seed):
    comm = Comm()
    full = model(600, seed)
    shard = Shard.from_full(comm.rank, comm.size, full, 4 * comm.size)
    check(comm, shard, full)
    rng = np.random.default_rng(seed + 1)  # the same draws on every rank
    for move in range(moves):
        if move % 3 == 2:
            counts = np.diff(shard.indptr)
            shard = split_cells(comm, shard, counts, int(np.sort(counts)[-2]) - 1)  # the two largest split
        owner = rng.integers(0, comm.size, size=shard.num_cells)
        columns = row_columns(shard.owned_ids) if move % 2 else np.empty((len(shard.owned_ids), 0), np.float32)
        shard, carried = migrate(comm, shard, owner, columns)  # each row's own values, wherever it ends up
        expected = row_columns(shard.owned_ids)[:, :columns.shape[1]]
        assert np.array_equal(carried, expected), "carried columns left their rows"
        assert np.array_equal(shard.owner, owner)
        check(comm, shard, full)
    if comm.rank == 0:
        print(f"ok {moves} {shard.num_cells}")


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
