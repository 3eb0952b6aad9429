"""The work at a window's end: every owner's cells gathered onto every rank, the window's batch losses,
and the check of the visibility prediction's premise (no Gaussian moved or grew past the margin)."""
import time
from dataclasses import dataclass

import numpy as np
import torch

from odin_sched.odin.staging import HostStaging
from odin_sched.scenes.visibility import motion_within_margin
from odin_sched.training.densify import GradAccumulator
from odin_sched.training.optim import VisibleAdam
from odin_sched.training.step import pack_params, param_columns, unpack_params
from odin_sched.training.train import batch_loss


@dataclass
class Gathered:
    """What the window-end gather returns: the window's batch losses [stop - start] and its times
    (``time.perf_counter``): started, after the barrier, done."""

    losses: np.ndarray
    t0: float
    t1: float
    t2: float


def gather_state(comm, window, opt: VisibleAdam, accum: GradAccumulator, staging: HostStaging,
                 image_losses: dict, sh_degree: int) -> Gathered:
    """Window end: every owner's cells (parameters of SH degree ``sh_degree``, Adam moments and step
    counts, densification accumulators and largest screen radii) onto every rank of ``comm`` (a barrier first, then one
    Allgatherv), and every image's loss (image_losses: {image of the window: loss} of this rank's
    images) into batch losses."""
    t0 = time.perf_counter()
    comm.barrier()
    t1 = time.perf_counter()
    mine = torch.from_numpy(np.flatnonzero(window.owner[window.cell_of] == comm.rank)).to(staging.device)
    floats = torch.cat([pack_params(state, mine) for state in (opt.params, opt.exp_avg, opt.exp_avg_sq)]
                       + [accum.total[mine][:, None], accum.max_radii[mine][:, None]], dim=1)
    ints = torch.stack([mine, opt.step_count[mine], accum.count[mine]], dim=1)
    floats = staging.to_device(comm.allgather_rows(staging.to_host(floats)), floats.shape[1])
    ints = staging.to_device(comm.allgather_rows(staging.to_host(ints)), ints.shape[1])
    ids = ints[:, 0]
    columns = param_columns(sh_degree)
    with torch.no_grad():
        for i, state in enumerate((opt.params, opt.exp_avg, opt.exp_avg_sq)):
            part = floats[:, i * columns:(i + 1) * columns]
            for name, value in unpack_params(part, sh_degree).items():
                state[name][ids] = value
    opt.step_count[ids] = ints[:, 1]
    accum.total[ids] = floats[:, 3 * columns]
    accum.max_radii[ids] = floats[:, 3 * columns + 1]
    accum.count[ids] = ints[:, 2]
    losses = comm.allgather_rows(np.array(sorted(image_losses.items()), np.float64).reshape(-1, 2))
    by_image = dict(zip(losses[:, 0].astype(np.int64), losses[:, 1]))
    b = window.steps.batch_size
    batch = [batch_loss([by_image[i] for i in range(j * b, (j + 1) * b)]) for j in range(window.stop - window.start)]
    return Gathered(np.array(batch), t0, t1, time.perf_counter())


def motion_snapshot(opt: VisibleAdam) -> dict:
    """The means and log-scales [G, 3] at a window's start, for ``escaped``."""
    return {k: opt.params[k].detach().clone() for k in ("means", "scales")}


def escaped(snapshot: dict, opt: VisibleAdam, margin) -> int:
    """How many Gaussians moved or grew past the window's ``margin`` since ``snapshot`` (the
    visibility prediction's premise; 0 when it held)."""
    now = {k: opt.params[k].detach() for k in ("means", "scales")}
    ok = motion_within_margin(*(state[name].cpu().numpy() for state in (snapshot, now)
                                for name in ("means", "scales")), margin)
    return int(np.count_nonzero(~ok))
