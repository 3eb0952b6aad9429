"""The work at a window's end: the only collective exchange of a window, metadata-sized.

Every rank sends its images' losses (8 bytes each), its counts of Gaussians that left the visibility
margins (``escaped``, 8 bytes each) and the metadata of its cells (``odin_sched.odin.cell_meta``, 32
bytes per cell), together in one Allgatherv whose layout every rank knows; no parameter crosses ranks
here. Every rank gets the window's batch losses, the summed
counts and every cell's bounds, from which the next windows are planned.
"""
from dataclasses import dataclass

import numpy as np
import torch

from odin_sched.odin.cell_meta import META_COLUMNS, gathered_bounds
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


def exchange_window_end(comm, shard, image_losses: dict, image_rank: np.ndarray, batch_size: int,
                        counts) -> WindowEnd:
    """Window end (collective): image_losses {image of the window: loss} of this rank's images, image_rank
    [images] int64 the rank of each of the window's images (image i is position i % B of the window's
    batch i // B); counts: [n] int64 this rank's counts to sum (n the same on every rank); shard: the
    rank's ``Shard`` (its cells' metadata).

    One Allgatherv of a float64 buffer per rank, laid out as every rank knows from the plan and the cells'
    owners (``window_end_words``): its images' losses by ascending image, its counts (int64 bits), then
    its cells' metadata rows (``META_COLUMNS`` float32, ascending cell: 4 float64 words each)."""
    counts = np.asarray(counts, np.int64)
    mine = np.flatnonzero(image_rank == comm.rank)
    meta = np.ascontiguousarray(shard.metadata(), np.float32)
    send = np.concatenate([np.array([image_losses[i] for i in mine], np.float64), counts.view(np.float64),
                           meta.view(np.float64).ravel()])
    images, cells = window_end_words(image_rank, shard.owner, comm.size)
    n, words = len(counts), images + len(counts) + cells
    parts = np.split(comm.allgather_known(send, words), np.cumsum(words)[:-1])  # by rank
    by_image = np.empty(len(image_rank))
    by_image[np.argsort(image_rank, kind="stable")] = np.concatenate([p[:i] for p, i in zip(parts, images)])
    total = np.sum([p[i:i + n].view(np.int64) for p, i in zip(parts, images)], axis=0, dtype=np.int64)
    rows = np.concatenate([p[i + n:] for p, i in zip(parts, images)]).view(np.float32)
    losses = np.array([batch_loss(by_image[j:j + batch_size].tolist()) for j in range(0, len(by_image), batch_size)])
    return WindowEnd(losses, total, gathered_bounds(rows.reshape(-1, META_COLUMNS), shard.owner), int(send.nbytes))


def window_end_words(image_rank: np.ndarray, owner: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """(images [size], metadata words [size]) int64 that each rank sends at a window end: its images of
    ``image_rank`` [images] and 4 float64 words for each of its cells of ``owner`` [K]."""
    return (np.bincount(image_rank, minlength=size).astype(np.int64),
            np.bincount(owner, minlength=size).astype(np.int64) * (META_COLUMNS // 2))


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
