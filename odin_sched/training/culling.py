"""Per-image culling for the single-process trainer: an image renders only the Gaussians that can touch it.

The Gaussians are grouped into cells (``grid_cells``: a grid whose edges are per-axis quantiles of the
means, O(G)). For every step the cells' bounds (box of the means, largest scale, count) are taken from
that step's parameters (``step_bounds``) and tested against the batch's cameras with the distributed
trainer's conservative test (``odin_sched.scenes.visibility.predict_visible_cells``) at zero motion
margin: every Gaussian with a screen radius > 0 lies in a cell predicted visible. An image renders the
Gaussians of its predicted cells in ascending row order (the global id order of the whole model).
Every per-Gaussian operation of the rasterizer is independent of which other Gaussians are rendered
with it (tests/test_render_subsets.py), so the image, the loss and the kept Gaussians' gradients are
bit for bit those of rendering all of them, and a culled Gaussian (radius 0) would have had exactly
zero gradient and no visibility. The cells only make the test cheap: since the bounds are recomputed
from the parameters of each step, any grouping of the rows is correct, and the grouping is made again
only when the rows change (densification).
"""
import numpy as np
import torch

from odin_sched.scenes.cells import CellBounds
from odin_sched.scenes.visibility import Margin, predict_visible_cells

#: grid cells per axis (16^3 = 4,096 cells: at 2,000,000 Gaussians about 500 a cell)
CELLS_PER_AXIS = 16
NO_MOTION = Margin(means=0.0, log_scale=0.0)


def grid_cells(means: np.ndarray, per_axis: int = CELLS_PER_AXIS) -> np.ndarray:
    """Cell of every Gaussian in a per_axis^3 grid whose cuts on each axis are quantiles of the means
    (each slab along an axis holds about G / per_axis Gaussians).

    means: np.ndarray   # [G, 3] finite
    Returns np.ndarray  # [G] int64 in [0, per_axis^3)
    """
    means = np.asarray(means)
    if len(means) == 0:
        return np.zeros(0, np.int64)
    cuts = np.quantile(means, np.linspace(0.0, 1.0, per_axis + 1)[1:-1], axis=0)  # [per_axis - 1, 3]
    slab = [np.searchsorted(cuts[:, axis], means[:, axis], side="right") for axis in range(3)]
    return ((slab[0] * per_axis + slab[1]) * per_axis + slab[2]).astype(np.int64)


def step_bounds(means: torch.Tensor, log_scales: torch.Tensor, cell_of: torch.Tensor, num_cells: int) -> CellBounds:
    """``odin_sched.scenes.cells.cell_bounds`` by scatter reductions on the parameters' device: box of the
    means, largest exp(log-scale) and count of every cell (empty cells: zeros and count 0).

    means, log_scales: torch.Tensor  # [G, 3] float32
    cell_of: torch.Tensor            # [G] int64 in [0, num_cells), on the same device
    """
    with torch.no_grad():
        count = torch.bincount(cell_of, minlength=num_cells)
        index = cell_of[:, None].expand(-1, 3)
        inf = torch.tensor(float("inf"), dtype=means.dtype, device=means.device)
        lo = inf.expand(num_cells, 3).clone().scatter_reduce_(0, index, means, "amin")
        hi = (-inf).expand(num_cells, 3).clone().scatter_reduce_(0, index, means, "amax")
        largest = torch.full((num_cells,), -float("inf"), dtype=log_scales.dtype, device=means.device)
        largest.scatter_reduce_(0, cell_of, log_scales.amax(dim=1), "amax")
    empty = (count == 0).cpu().numpy()
    lo, hi, largest = (t.cpu().numpy().astype(np.float64) for t in (lo, hi, largest))
    lo[empty], hi[empty] = 0.0, 0.0
    max_sigma = np.exp(largest)
    max_sigma[empty] = 0.0
    return CellBounds(lo=lo, hi=hi, max_sigma=max_sigma, count=count.cpu().numpy().astype(np.int64))


class Culling:
    """The rows each camera renders, for a model whose rows may change between steps: the grid is made
    again whenever the model's ids tensor is another one (densification replaces it).

    per_axis: grid cells per axis (``grid_cells``).
    """

    def __init__(self, per_axis: int = CELLS_PER_AXIS):
        self.per_axis = per_axis
        self.num_cells = per_axis ** 3
        self.ids = None      # the ids tensor the grid was made for
        self.cell_of = None  # [G] int64 on the parameters' device

    def kept_rows(self, params: dict, ids: torch.Tensor, scene, cameras) -> list:
        """For every camera of ``cameras`` [n] (ids into the scene's viewmats [C, 4, 4], Ks [C, 3, 3], width,
        height), the rows [g] int64 (ascending, on the parameters' device) of the Gaussians ``params``
        (name -> [G, ...]; means, scales (log)) with global ids ``ids`` [G] that may have a screen radius
        > 0 in it."""
        means, log_scales = params["means"].detach(), params["scales"].detach()
        if self.cell_of is None or ids is not self.ids or len(self.cell_of) != len(means):
            self.ids = ids
            self.cell_of = torch.from_numpy(grid_cells(means.cpu().numpy(), self.per_axis)).to(means.device)
        kept = kept_by_cells(means, log_scales, self.cell_of, self.num_cells, scene, cameras)
        return [torch.nonzero(rows).squeeze(1) for rows in kept]


def kept_by_cells(means: torch.Tensor, log_scales: torch.Tensor, cell_of: torch.Tensor, num_cells: int, scene,
                  cameras) -> torch.Tensor:
    """Which Gaussians may have a screen radius > 0 in each camera: those of the cells (``cell_of`` [g] int64
    in [0, num_cells), any grouping) that the conservative test predicts visible, with the cells' bounds
    taken from these parameters (``step_bounds``; means, log_scales [g, 3] float32).

    cameras: [n] ids into the scene's viewmats [C, 4, 4], Ks [C, 3, 3] (and its width, height)
    Returns torch.Tensor  # [n, g] bool on the means' device
    """
    bounds = step_bounds(means, log_scales, cell_of, num_cells)
    cameras = np.asarray(cameras, np.int64)
    visible = predict_visible_cells(bounds, scene.viewmats[cameras], scene.Ks[cameras], scene.width,
                                    scene.height, NO_MOTION)
    return torch.from_numpy(visible).to(means.device)[:, cell_of]


def box_cells(means: np.ndarray, per_axis: int) -> np.ndarray:
    """Cell of every Gaussian in a uniform per_axis^3 grid over the box of the means (O(G); for the
    compact cells of a k-d cut, where quantiles are not needed).

    means: np.ndarray   # [G, 3] finite
    Returns np.ndarray  # [G] int64 in [0, per_axis^3)
    """
    means = np.asarray(means, np.float64)
    if len(means) == 0:
        return np.zeros(0, np.int64)
    lo, hi = means.min(axis=0), means.max(axis=0)
    slab = np.floor((means - lo) * (per_axis / np.maximum(hi - lo, 1e-30))).astype(np.int64)
    slab = np.clip(slab, 0, per_axis - 1)
    return (slab[:, 0] * per_axis + slab[:, 1]) * per_axis + slab[:, 2]


def restricted(params: dict, rows) -> dict:
    """``params`` (name -> [G, ...]) at ``rows`` [g] (all of them when rows is None)."""
    return params if rows is None else {name: value[rows] for name, value in params.items()}
