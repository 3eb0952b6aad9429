"""Write a training checkpoint from this job's shards, or resume it and compare with a fresh cut.

Usage: mpiexec -n P python -m mpi4py tests/mpi_scripts/shard_resume.py FOLDER save|resume
save: every rank takes its shard (``Shard.from_full``, 6 cells) of ``whole_model()`` and writes it with
``TrainCheckpointer.save`` into FOLDER/ck (after step 4). resume: every rank restores its shard with
``Shard.from_checkpoint`` and checks it against ``Shard.from_full`` of the whole model at this P (the
same cells and owners, the same state bit for bit); it writes "KEPT TOTAL" (the rows it kept, the model's) to
FOLDER/kept-P-RANK.txt.
"""
import os
import sys

import numpy as np
import torch

from odin_sched.odin.shard import FullState, Shard
from odin_sched.training.checkpoint import TrainCheckpointer, TrainState
from odin_sched.training.optim import default_lrs
from pregel.comm import Comm
from tests_support import densified_model  # noqa: E402  (tests/mpi_scripts is on sys.path)

IDENTITY = {"job": {"test": "shard resume"}}
CELLS = 6


def whole_model() -> FullState:
    """A model after an Adam step and a densification round (so ids differ from rows), with statistics."""
    opt, accum = densified_model(60)
    assert not torch.equal(opt.ids, torch.arange(opt.num_gaussians))
    return FullState(opt, accum)


def main(folder, action):
    comm, full = Comm(), whole_model()
    ck = os.path.join(folder, "ck")
    state = TrainState(4, None, None, np.linspace(1.0, 0.5, 8), [2], [11.5], 3.0, 1.5, 7)
    if action == "save":
        shard = Shard.from_full(comm.rank, comm.size, full, CELLS)
        state.opt, state.accum = shard.opt, shard.accum
        TrainCheckpointer(comm, IDENTITY, ck, every=4).save(0, state, rows=shard.owned_ids)
        return
    got = TrainState(0, None, None, np.zeros(8), [], [])
    lrs, opt = default_lrs(1.0), full.opt
    shard = Shard.from_checkpoint(comm.rank, comm.size, TrainCheckpointer(comm, IDENTITY, resume=ck), got, CELLS, lrs,
                                  (opt.beta1, opt.beta2), opt.eps, True, "cpu")
    want = Shard.from_full(comm.rank, comm.size, full, CELLS)
    assert (got.step, got.psnr_steps, got.psnr_values, got.wall_time_s, got.safety, got.violations) == \
        (4, [2], [11.5], 3.0, 1.5, 7)
    assert np.array_equal(got.losses[:4], state.losses[:4])
    for name in ("indptr", "members", "owner", "owned_ids"):
        assert np.array_equal(getattr(shard, name), getattr(want, name)), name
    for group in ("params", "exp_avg", "exp_avg_sq"):
        for name, value in getattr(want.opt, group).items():
            assert torch.equal(getattr(shard.opt, group)[name].detach(), value.detach()), (group, name)
    assert torch.equal(shard.opt.ids, want.opt.ids) and torch.equal(shard.opt.step_count, want.opt.step_count)
    for name in ("total", "count", "max_radii"):
        assert torch.equal(getattr(shard.accum, name), getattr(want.accum, name)), name
    with open(os.path.join(folder, f"kept-{comm.size}-{comm.rank}.txt"), "w") as f:
        f.write(f"{shard.opt.num_gaussians} {shard.num_gaussians}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
