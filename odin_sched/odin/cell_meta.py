"""Cell metadata: what an owner tells every rank about its cells at a window's end.

A cell's metadata is the box of its Gaussians' means, the largest log-scale of any of them and their
count: 8 four-byte words per cell (``META_COLUMNS``), the only per-cell data that crosses ranks at a
window's end. Means and log-scales are float32, so their minima and maxima are float32 values and
travel exactly; the count travels as the bits of an int32. The receivers rebuild a ``CellBounds``
(``odin_sched.scenes.cells``) equal to the one ``cell_bounds`` computes from the whole model, so a plan
made from metadata equals the plan made from the parameters (``odin_sched.odin.planner``). A cell's
predicted cost, its Gaussian count, is derived from the metadata.
"""
import numpy as np

from odin_sched.scenes.cells import CellBounds

#: float32 words per cell: lo [3], hi [3], largest log-scale, count (int32 bits)
META_COLUMNS = 8


def grouped_metadata(means: np.ndarray, log_scales: np.ndarray, count: np.ndarray) -> np.ndarray:
    """The metadata rows [k, META_COLUMNS] float32 of k cells from the owner's Gaussians, which come cell
    after cell: means, log_scales [g, 3] float32 and count [k] int of each cell (sum g). An empty cell has
    a zero box, a log-scale of -inf and count 0."""
    starts = np.concatenate([[0], np.cumsum(count)[:-1]]).astype(np.int64)
    full = np.flatnonzero(count > 0)
    rows = np.zeros((len(count), META_COLUMNS), np.float32)
    rows[:, 6] = -np.inf
    if full.size:
        largest = np.maximum(np.maximum(log_scales[:, 0], log_scales[:, 1]), log_scales[:, 2])
        rows[full, 0:3] = np.minimum.reduceat(means, starts[full], axis=0)
        rows[full, 3:6] = np.maximum.reduceat(means, starts[full], axis=0)
        rows[full, 6] = np.maximum.reduceat(largest, starts[full])
    rows[:, 7] = np.asarray(count).astype(np.int32).view(np.float32)
    return rows


def bounds_of(rows: np.ndarray) -> CellBounds:
    """The ``CellBounds`` of metadata rows [K, META_COLUMNS] (by cell id)."""
    rows = np.ascontiguousarray(rows, np.float32)
    return CellBounds(lo=rows[:, 0:3].astype(np.float64), hi=rows[:, 3:6].astype(np.float64),
                      max_sigma=np.exp(rows[:, 6].astype(np.float64)),
                      count=rows[:, 7].copy().view(np.int32).astype(np.int64))


def exchange_metadata(comm, rows: np.ndarray, owner: np.ndarray) -> CellBounds:
    """Every cell's bounds on every rank (collective: one Allgatherv, every rank's cell count is known from
    ``owner``): each rank gives the rows [k, META_COLUMNS] of its cells (those with ``owner == comm.rank``,
    ascending id); owner: [K] int64 rank of each cell."""
    counts = np.bincount(owner, minlength=comm.size)
    return gathered_bounds(comm.allgather_known(np.ascontiguousarray(rows, np.float32), counts), owner)


def gathered_bounds(gathered: np.ndarray, owner: np.ndarray) -> CellBounds:
    """The ``CellBounds`` of every cell from the metadata rows [K, META_COLUMNS] of every rank's cells in
    rank order (each rank's ascending id, as ``exchange_metadata`` gathers them); owner: [K] int64."""
    by_cell = np.argsort(owner, kind="stable")  # the order of the gathered rows: by rank, then cell id
    out = np.empty_like(gathered)
    out[by_cell] = gathered
    return bounds_of(out)
