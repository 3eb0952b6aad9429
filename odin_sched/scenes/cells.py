"""Spatial cells: the unit of ownership, transfer and dependency of the Odin scheduler.

Gaussians are grouped into K cells by a balanced k-d split of their means. Cells are numbered in k-d
leaf order (left before right), so consecutive ids are spatially close and a contiguous id range is a
compact region. ``cell_bounds`` summarises each cell (box of its means, largest scale, count) for the
conservative visibility test of ``odin_sched.scenes.visibility``; ``cell_members`` lists each cell's Gaussians.
"""
from dataclasses import dataclass

import numpy as np
from numba import njit


def kd_cells(means: np.ndarray, num_cells: int) -> np.ndarray:
    """Balanced k-d cells of the Gaussian means.

    means: np.ndarray  # [G, 3]
    Returns np.ndarray  # [G] int32, cell id in [0, num_cells)

    A set of n points to be split into k cells is cut along its axis of largest extent so that the
    left part holds floor(n * floor(k/2) / k) points (the lowest coordinates; ties broken by Gaussian
    index, NaN after every number) and floor(k/2) cells, the right part the rest. Every cell gets
    floor(G/K) or ceil(G/K) Gaussians. Deterministic. Each node is cut by a selection, not a sort:
    O(G log K) in all. A Numba kernel (``_kd_kernel``); ``kd_cells_numpy`` is its NumPy twin.
    Raises ValueError when G < K or K < 1.
    """
    means = _checked_means(means, num_cells)
    cell_of = np.empty(means.shape[0], np.int32)
    _kd_kernel(means, num_cells, cell_of)
    return cell_of


def kd_cells_numpy(means: np.ndarray, num_cells: int) -> np.ndarray:
    """``kd_cells`` in NumPy, a node at a time (``lowest`` cuts it): the kernel's twin. means: [G, 3];
    returns [G] int32, each Gaussian's cell in [0, ``num_cells``)."""
    means = _checked_means(means, num_cells)
    cell_of = np.empty(means.shape[0], np.int32)
    stack = [(np.arange(means.shape[0], dtype=np.int64), num_cells, 0)]  # (ids ascending, cells, first cell)
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


def _checked_means(means, num_cells: int) -> np.ndarray:
    """The means [G, 3] as a C-contiguous array; ValueError unless 1 <= num_cells <= G."""
    means = np.ascontiguousarray(means)
    if means.ndim != 2 or means.shape[1] != 3:
        raise ValueError(f"means must have shape [G, 3], got {list(means.shape)}")
    if num_cells < 1:
        raise ValueError(f"the number of cells must be at least 1, got {num_cells}")
    if means.shape[0] < num_cells:
        raise ValueError(f"{means.shape[0]} Gaussians cannot fill {num_cells} cells (need at least one per cell)")
    return means


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


@njit(cache=True)
def _kd_kernel(means, num_cells, cell_of):
    """``kd_cells_numpy``'s cells into cell_of [G] int32: the ids [G] are permuted in place so that every
    k-d node's Gaussians lie in one range, each node cut by a quickselect on (coordinate, id)."""
    perm = np.arange(means.shape[0])
    stack = np.empty((2 * num_cells, 4), np.int64)  # (lo, hi, cells, first cell) of the nodes to cut
    stack[0, 0], stack[0, 1], stack[0, 2], stack[0, 3] = 0, means.shape[0], num_cells, 0
    top = 1
    while top > 0:  # one iteration per k-d node: 2K - 1 in all
        top -= 1
        lo, hi, k, first = stack[top, 0], stack[top, 1], stack[top, 2], stack[top, 3]
        if k == 1:
            for i in range(lo, hi):
                cell_of[perm[i]] = first
            continue
        axis = _widest_axis(means, perm, lo, hi)
        k_left = k // 2
        mid = lo + (hi - lo) * k_left // k
        _select(means, axis, perm, lo, hi, mid, _SELECT_ROUNDS)
        stack[top, 0], stack[top, 1], stack[top, 2], stack[top, 3] = mid, hi, k - k_left, first + k_left
        stack[top + 1, 0], stack[top + 1, 1], stack[top + 1, 2], stack[top + 1, 3] = lo, mid, k_left, first
        top += 2


@njit(cache=True)
def _widest_axis(means, perm, lo, hi):
    """NumPy's argmax(max - min) over the rows perm[lo:hi] of means [G, 3], in means' precision (an axis
    holding a NaN is the first such axis)."""
    best, best_extent = 0, means[0, 0]
    for j in range(3):
        low = high = means[perm[lo], j]
        has_nan = False
        for i in range(lo, hi):
            v = means[perm[i], j]
            if np.isnan(v):
                has_nan = True
            elif v < low:
                low = v
            elif v > high:
                high = v
        extent = high - low
        if has_nan or np.isnan(extent):  # inf - inf too
            return j
        if j == 0 or extent > best_extent:  # the first of equal extents
            best, best_extent = j, extent
    return best


@njit(cache=True)
def _before(means, axis, a, b):
    """Whether Gaussian a comes before b: by coordinate ``axis``, NaN after every number, then by id."""
    x, y = means[a, axis], means[b, axis]
    if x < y:
        return True
    if x > y:
        return False
    x_nan, y_nan = np.isnan(x), np.isnan(y)
    if x_nan != y_nan:
        return y_nan
    return a < b


_SELECT_ROUNDS = 64  # partitions a selection may take before it sorts what is left (about 2 log2 of 2**32)


@njit(cache=True)
def _select(means, axis, perm, lo, hi, mid, rounds):
    """Permute perm[lo:hi] so that perm[lo:mid] are its (mid - lo) first Gaussians in ``_before``'s order
    (the keys are distinct): a quickselect with median-of-three pivots that, after ``rounds``
    partitions, heapsorts the range still open, so it is O(n) typically and O(n log n) at worst."""
    left, right = lo, hi - 1
    while left < right:
        if rounds == 0:
            _heap_sort(means, axis, perm, left, right + 1)
            return
        rounds -= 1
        centre = (left + right) // 2  # the median of three to the right end: the pivot
        if _before(means, axis, perm[centre], perm[left]):
            perm[centre], perm[left] = perm[left], perm[centre]
        if _before(means, axis, perm[right], perm[left]):
            perm[right], perm[left] = perm[left], perm[right]
        if _before(means, axis, perm[centre], perm[right]):
            perm[centre], perm[right] = perm[right], perm[centre]
        pivot, store = perm[right], left
        for i in range(left, right):
            if _before(means, axis, perm[i], pivot):
                perm[i], perm[store] = perm[store], perm[i]
                store += 1
        perm[store], perm[right] = perm[right], perm[store]
        if store == mid:
            return
        if store < mid:
            left = store + 1
        else:
            right = store - 1


@njit(cache=True)
def _heap_sort(means, axis, perm, lo, hi):
    """Sort perm[lo:hi] in ``_before``'s order (heapsort: O(n log n) at worst, in place)."""
    n = hi - lo
    for root in range(n // 2 - 1, -1, -1):
        _sift_down(means, axis, perm, lo, root, n)
    for end in range(n - 1, 0, -1):
        perm[lo], perm[lo + end] = perm[lo + end], perm[lo]
        _sift_down(means, axis, perm, lo, 0, end)


@njit(cache=True)
def _sift_down(means, axis, perm, lo, root, n):
    """Restore the heap of perm[lo:lo + n] (each parent after its children in ``_before``'s order) below
    position ``root``."""
    while 2 * root + 1 < n:
        child = 2 * root + 1
        if child + 1 < n and _before(means, axis, perm[lo + child], perm[lo + child + 1]):
            child += 1
        if not _before(means, axis, perm[lo + root], perm[lo + child]):
            return
        perm[lo + root], perm[lo + child] = perm[lo + child], perm[lo + root]
        root = child


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
    keys = cell_of.astype(np.uint16) if num_cells <= 1 << 16 else cell_of  # 16-bit keys: a radix sort, O(G)
    members = np.argsort(keys, kind="stable").astype(np.int64)
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
