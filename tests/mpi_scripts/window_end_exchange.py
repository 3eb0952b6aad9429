"""The window end's one combined exchange against the separate results, on this job's ranks.

Usage: mpiexec -n P python -m mpi4py tests/mpi_scripts/window_end_exchange.py
For several random windows (images dealt to random ranks, some ranks with none; random losses and
counts; a random model cut into cells, some empty of images), ``exchange_window_end`` must give every
rank: the batch losses computed from every image's loss (which every rank here draws itself), the
counts summed over ranks (likewise), every cell's bounds equal to a brute-force pass over the whole
model and to the separate metadata exchange (``allgather_rows`` of the owners' rows, as the trainer
gathered them before), and the bytes it sent, in one call to MPI (an Allgatherv; none at one rank).
Prints "ok P".
"""
import sys

import numpy as np
import torch

from odin_sched.odin.cell_meta import bounds_of, exchange_metadata, gathered_bounds
from odin_sched.odin.shard import FullState, Shard
from odin_sched.odin.window_end import exchange_window_end
from odin_sched.training.optim import VisibleAdam, default_lrs
from pregel.comm import Comm


def brute_force(means, scales, shard):
    """lo, hi [K, 3], largest log-scale [K], count [K] by a loop over every cell's Gaussians."""
    k = shard.num_cells
    lo, hi, top, count = np.zeros((k, 3)), np.zeros((k, 3)), np.full(k, -np.inf), np.zeros(k, np.int64)
    for c in range(k):
        rows = shard.cell_rows(c)
        count[c] = len(rows)
        if len(rows):
            lo[c], hi[c], top[c] = means[rows].min(axis=0), means[rows].max(axis=0), scales[rows].max()
    return lo, hi, top, count


class CountingMPI:
    """An mpi4py communicator that records the names of the methods called on it."""

    def __init__(self, mpi):
        self.mpi, self.calls = mpi, []

    def __getattr__(self, name):
        self.calls.append(name)
        return getattr(self.mpi, name)


def main():
    comm = Comm()
    counting = CountingMPI(comm.mpi)
    for seed in range(5):
        rng = np.random.default_rng(seed)  # the same draws on every rank
        g, cells, batch_size, batches = int(rng.integers(50, 400)), int(rng.integers(comm.size, 12)), 3, 4
        means = (rng.normal(size=(g, 3)) * [5.0, 2.0, 1.0]).astype(np.float32)
        scales = rng.uniform(-4, 0, size=(g, 3)).astype(np.float32)
        params = {"means": torch.from_numpy(means), "scales": torch.from_numpy(scales)}
        shard = Shard.from_full(comm.rank, comm.size, FullState(VisibleAdam(params, default_lrs(1.0)), None), cells)
        image_rank = rng.integers(0, max(1, comm.size - (seed % 2)), size=batches * batch_size)  # odd: last rank idle
        losses = rng.random(batches * batch_size)
        counts = rng.integers(0, 1000, size=(comm.size, 2))
        mine = np.flatnonzero(image_rank == comm.rank)
        comm.mpi = counting
        end = exchange_window_end(comm, shard, {int(i): float(losses[i]) for i in mine}, image_rank, batch_size,
                                  counts[comm.rank])
        comm.mpi = counting.mpi
        assert counting.calls == ([] if comm.size == 1 else ["Allgatherv"]), counting.calls
        counting.calls.clear()
        expected = [sum(losses[j:j + batch_size].tolist()) / batch_size for j in range(0, len(losses), batch_size)]
        assert end.losses.tolist() == expected, (end.losses, expected)
        assert end.counts.dtype == np.int64 and end.counts.tolist() == counts.sum(axis=0).tolist()
        lo, hi, top, count = brute_force(means, scales, shard)
        b = end.bounds
        assert np.array_equal(b.count, count) and np.array_equal(b.lo, lo) and np.array_equal(b.hi, hi)
        assert np.array_equal(b.max_sigma, np.exp(top))
        separate = gathered_bounds(comm.allgather_rows(shard.metadata()), shard.owner)
        for other in (separate, exchange_metadata(comm, shard.metadata(), shard.owner)):
            for name in ("lo", "hi", "max_sigma", "count"):
                assert np.array_equal(getattr(b, name), getattr(other, name)), name
        assert bounds_of(shard.metadata()).count.sum() == len(shard.owned_ids)
        assert end.bytes_sent == 8 * (len(mine) + 2) + 32 * len(shard.owned_cells)
    sys.stdout.write(f"ok {comm.size}\n")


if __name__ == "__main__":
    main()
