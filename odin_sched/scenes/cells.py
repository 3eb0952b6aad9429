"""Spatial cells: the unit of ownership, transfer and dependency of the Odin scheduler.

Gaussians are grouped into K cells by a balanced k-d split of their means. Cells are numbered in k-d
leaf order (left before right), so consecutive ids are spatially close and a contiguous id range is a
compact region. ``cell_bounds`` summarises each cell (box of its means, largest scale, count) for the
conservative visibility test of ``odin_sched.scenes.visibility``; ``cell_members`` lists each cell's Gaussians.
"""
from dataclasses import dataclass

import numpy as np


def kd_cells(means: np.ndarray, num_cells: int) -> np.ndarray:
    """Balanced k-d cells of the Gaussian means.

    means: np.ndarray  # [G, 3]
    Returns np.ndarray  # [G] int32, cell id in [0, num_cells)

    A set of n points to be split into k cells is cut along its axis of largest extent so that the
    left part holds floor(n * floor(k/2) / k) points (the lowest coordinates; ties broken by Gaussian
    index) and floor(k/2) cells, the right part the rest. Every cell gets floor(G/K) or ceil(G/K)
    Gaussians. Deterministic. Each k-d level partitions (``lowest``) rather than sorts: O(G log K) in all.
    Raises ValueError when G < K or K < 1.
    """
    means = np.asarray(means)
    if means.ndim != 2 or means.shape[1] != 3:
        raise ValueError(f"means must have shape [G, 3], got {list(means.shape)}")
    count = means.shape[0]
    if num_cells < 1:
        raise ValueError(f"the number of cells must be at least 1, got {num_cells}")
    if count < num_cells:
        raise ValueError(f"{count} Gaussians cannot fill {num_cells} cells (need at least one per cell)")
    cell_of = np.empty(count, np.int32)
    stack = [(np.arange(count, dtype=np.int64), num_cells, 0)]  # (Gaussian ids ascending, cells, first cell id)
    while stack:  # one iteration per k-d node: 2K - 1 in all
        ids, k, first = stack.pop()
        if k == 1:
            cell_of[ids] = first
            continue
        points = means[ids]
        axis = int(np.argmax(points.max(axis=0) - points.min(axis=0)))
        k_left = k // 2
        left = lowest(points[:, axis], ids.shape[0] * k_left // k)
        stack.append((ids[~left], k - k_left, first + k_left))
        stack.append((ids[left], k_left, first))
    return cell_of


def lowest(values: np.ndarray, n: int) -> np.ndarray:
    """The ``n`` lowest of ``values`` [m], ties broken by position (the first ones), as a mask [m] bool:
    those a stable sort puts first (NaN after every number), found in O(m) by a partition.

    0 <= n <= m."""
    mask = np.zeros(values.shape[0], bool)
    if n == 0:
        return mask
    kth = np.partition(values, n - 1)[n - 1]  # the n-th lowest value: all below it are in, ties fill up
    if np.isnan(kth):  # every number is in, NaNs fill up
        mask, ties = ~np.isnan(values), np.flatnonzero(np.isnan(values))
    else:
        mask[values < kth] = True
        ties = np.flatnonzero(values == kth)
    mask[ties[:n - np.count_nonzero(mask)]] = True
    return mask


def cell_members(cell_of: np.ndarray, num_cells: int) -> tuple[np.ndarray, np.ndarray]:
    """The Gaussians of each cell in CSR form.

    cell_of: np.ndarray  # [G] int, cell ids in [0, num_cells)
    Returns (indptr [K+1] int64, members [G] int64): cell k holds members[indptr[k]:indptr[k+1]],
    in ascending Gaussian id.
    """
    cell_of = np.asarray(cell_of)
    if cell_of.size and (cell_of.min() < 0 or cell_of.max() >= num_cells):
        raise ValueError(f"cell ids must lie in [0, {num_cells})")
    indptr = np.zeros(num_cells + 1, np.int64)
    np.cumsum(np.bincount(cell_of, minlength=num_cells), out=indptr[1:])
    members = np.argsort(cell_of, kind="stable").astype(np.int64)
    return indptr, members


@dataclass
class CellBounds:
    """Per-cell summary for the visibility test (empty cells: zeros and count 0)."""

    lo: np.ndarray         # [K, 3] float64, smallest mean coordinate per axis
    hi: np.ndarray         # [K, 3] float64, largest mean coordinate per axis
    max_sigma: np.ndarray  # [K] float64, largest exp(log_scale) of any Gaussian in the cell
    count: np.ndarray      # [K] int64, number of Gaussians

    @property
    def num_cells(self) -> int:
        return self.count.shape[0]


def cell_bounds(means: np.ndarray, log_scales: np.ndarray, cell_of: np.ndarray, num_cells: int) -> CellBounds:
    """Box of the means, largest scale and size of every cell.

    means: np.ndarray       # [G, 3]
    log_scales: np.ndarray  # [G, 3]
    cell_of: np.ndarray     # [G] int, cell ids in [0, num_cells)
    """
    indptr, members = cell_members(cell_of, num_cells)
    count = np.diff(indptr)
    full = np.flatnonzero(count > 0)
    lo = np.zeros((num_cells, 3))
    hi = np.zeros((num_cells, 3))
    max_sigma = np.zeros(num_cells)
    if full.size:
        starts = indptr[full]  # empty cells in between add no elements, so each segment is one cell
        # reduced in the input's precision, then widened: the same values (widening is exact and monotone)
        # without float64 copies of every Gaussian
        sorted_means = np.asarray(means)[members]
        lo[full] = np.minimum.reduceat(sorted_means, starts, axis=0)
        hi[full] = np.maximum.reduceat(sorted_means, starts, axis=0)
        del sorted_means
        largest_log = np.asarray(log_scales)[members].max(axis=1)
        max_sigma[full] = np.exp(np.maximum.reduceat(largest_log, starts).astype(np.float64))
    return CellBounds(lo=lo, hi=hi, max_sigma=max_sigma, count=count.astype(np.int64))


def cut_cells(means: np.ndarray, log_scales: np.ndarray, num_cells: int) -> tuple:
    """``num_cells`` balanced k-d cells of the means (at most one per Gaussian) and their bounds.

    means, log_scales: np.ndarray  # [G, 3]
    Returns (cell_of [G] int32 (``kd_cells``), ``CellBounds`` of min(num_cells, G) cells (``cell_bounds``))
    """
    cells = min(num_cells, len(means))
    cell_of = kd_cells(means, cells)
    return cell_of, cell_bounds(means, log_scales, cell_of, cells)
