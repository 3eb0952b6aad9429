"""The work at a window's end: the only collective exchange of a window, metadata-sized.

Every rank sends its images' losses (16 bytes each), its counts of Gaussians that left the
visibility margins (``escaped``) and the metadata of its cells (``odin_sched.odin.cell_meta``, 32 bytes
per cell); no parameter crosses ranks here. Every rank gets the window's batch losses, the summed
counts and every cell's bounds, from which the next windows are planned.
"""
from dataclasses import dataclass

import numpy as np
import torch

from odin_sched.odin.cell_meta import exchange_metadata
from odin_sched.scenes.cells import CellBounds
from odin_sched.scenes.visibility import motion_within_margin
from odin_sched.training.optim import VisibleAdam
from odin_sched.training.train import batch_loss


@dataclass
class WindowEnd:
    """What the window-end exchange returns: the batch losses [batches], the
    counts summed over ranks [n] int64, every cell's bounds, and the bytes this rank sent."""

    losses: np.ndarray
    counts: np.ndarray
    bounds: CellBounds
    bytes_sent: int


def exchange_window_end(comm, shard, image_losses: dict, batches: int, batch_size: int, counts) -> WindowEnd:
    """Window end (collective): image_losses {image of the window: loss} of this rank's images (image i is
    position i % B of the window's batch i // B, of ``batches``); counts: [n] int64 this rank's counts to
    sum; shard: the rank's ``Shard`` (its cells' metadata)."""
    counts = np.asarray(counts, np.int64)
    rows = np.concatenate([np.array(sorted(image_losses.items()), np.float64).reshape(-1, 2),
                           np.stack([-1.0 - np.arange(len(counts)), counts.astype(np.float64)], axis=1)])
    meta = shard.metadata()
    gathered = comm.allgather_rows(rows)
    bounds = exchange_metadata(comm, meta, shard.owner)
    images = gathered[:, 0] >= 0
    by_image = dict(zip(gathered[images, 0].astype(np.int64), gathered[images, 1]))
    total = np.zeros(len(counts), np.int64)
    np.add.at(total, (-1 - gathered[~images, 0]).astype(np.int64), gathered[~images, 1].astype(np.int64))
    losses = np.array([batch_loss([by_image[i] for i in range(j * batch_size, (j + 1) * batch_size)])
                       for j in range(batches)])
    return WindowEnd(losses, total, bounds, int(rows.nbytes + meta.nbytes))


def motion_snapshot(opt: VisibleAdam) -> dict:
    """The means and log-scales [g, 3] of ``opt``'s Gaussians now, for ``escaped``."""
    return {k: opt.params[k].detach().clone() for k in ("means", "scales")}


def snapshot_columns(snapshots: dict, rows: int) -> np.ndarray:
    """The ``motion_snapshot``s {batch: snapshot} of ``rows`` owned Gaussians as float32 columns [rows,
    6 x len(snapshots)] (by ascending batch: means, then log-scales), to travel with their cells
    (``migration.migrate``)."""
    return np.concatenate([np.empty((rows, 0), np.float32),
                           *(snapshots[b][k].cpu().numpy() for b in sorted(snapshots) for k in ("means", "scales"))],
                          axis=1)


def snapshots_of_columns(columns: np.ndarray, batches, device) -> dict:
    """``snapshot_columns`` inverted: {batch: snapshot} on ``device`` of ``columns`` [g, 6 x len(batches)]."""
    return {b: {k: torch.from_numpy(np.ascontiguousarray(columns[:, 6 * i + 3 * j:6 * i + 3 * j + 3])).to(device)
                for j, k in enumerate(("means", "scales"))} for i, b in enumerate(sorted(batches))}


def escaped(snapshot: dict, opt: VisibleAdam, margin) -> int:
    """How many of ``opt``'s Gaussians moved or grew past ``margin`` since ``snapshot`` (the visibility
    prediction's premise; 0 when it held). Only the rows whose means or log-scales changed (or are not
    finite) are measured: a row that kept both bit for bit moved 0 and grew 0, which is within any
    margin >= 0, so the count equals ``motion_within_margin`` over every row."""
    start = [snapshot[k].cpu().numpy() for k in ("means", "scales")]
    end = [opt.params[k].detach().cpu().numpy() for k in ("means", "scales")]
    changed = (start[0] != end[0]) | (start[1] != end[1]) | ~np.isfinite(end[0]) | ~np.isfinite(end[1])
    rows = np.flatnonzero(changed[:, 0] | changed[:, 1] | changed[:, 2])  # 4x faster than .any(axis=1)
    ok = motion_within_margin(*(a.take(rows, axis=0) for a in (*start, *end)), margin)
    still = len(start[0]) - len(rows)  # rows that moved 0 and grew 0
    return int(np.count_nonzero(~ok)) + (0 if 0.0 <= margin.means and 0.0 <= margin.log_scale else still)
