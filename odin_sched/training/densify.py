"""Adaptive density control of 3DGS: clone and split by positional gradient, prune, reset opacity.

Follows ``GaussianModel.densify_and_prune`` and the schedule in ``train.py`` of the reference 3DGS code
(graphdeco-inria/gaussian-splatting; defaults from its ``arguments/__init__.py``):

* the screen-space (NDC) positional gradient norm of each Gaussian is accumulated over the steps in
  which it is visible, and averaged; the largest screen radius (pixels) it had is tracked too;
* a Gaussian whose average reaches ``grad_threshold`` is *cloned* (an identical copy is added) when its
  largest scale is at most ``percent_dense`` x scene extent, and *split* otherwise (replaced by two
  Gaussians sampled from it, scales divided by 1.6);
* Gaussians with activated opacity below ``min_opacity`` are pruned; after the first opacity reset
  also those wider than ``max_screen_radius`` pixels on screen or whose largest scale exceeds
  ``max_world_fraction`` x extent (the most opaque Gaussian, the lowest id among equals, is always
  kept, so a scene never becomes empty). The reference zeroes the tracked radii before it reads them
  (its issue #123, kept for comparability with its published results), so there the screen test
  never fires; here it reads each old Gaussian's radius since the previous round, as the paper
  describes (new ones count 0);
* a cloned or split Gaussian becomes two children with new global ids (``odin_sched.training.gaussian_ids``;
  a Gaussian whose lineage has used up the id space is no longer densified), and a split child's
  offset is drawn by the counter-based generator keyed by (seed, step, the child's id)
  (``odin_sched.training.counter_rng``), so densifying any subset of the Gaussians (one owner's) gives
  each the draw it gets among all of them;
* the rows come out in ascending id, a function of the ids alone (not of which Gaussians were
  densified together), so owners that densify their own Gaussians and render gathered cells in id
  order reproduce the single process's rows and blending order exactly;
* new Gaussians start with zero Adam moments and their parent's step count (the reference appends
  rows to a parameter whose Adam step is shared, so they continue its count);
* every ``opacity_reset_interval`` images while densifying, opacities are clamped to at most 0.01 and
  their Adam moments zeroed (``reset_opacity``).

The schedule counts images, as Grendel-GS does for batches of B > 1 (step s covers the images
(s - 1) B + 1 .. s B; for B = 1 images are steps): densify after a step that covers a multiple of
``interval`` when its first image is past ``start`` (the reference's ``iteration > densify_from_iter``,
so first at 600) and before ``stop``, 15,000 images whatever the run's length, as the reference's
``densify_until_iter`` and gsplat's ``refine_stop_iter``; never after the run's last step (the model
written is then a trained one, not one just split). A run shorter than 15,000 images densifies to its
end, as the reference does when asked for fewer iterations: stopping at half the run instead (15,000
of 30,000) left a 1,500-step run two rounds and 3-6 dB of training-view PSNR on real captures
(README, "Real captures end to end").

The renderer reports gradients for the 3D means only, so the screen-space gradient is recovered from
them through the pinhole projection: camera x enters the image only through u = fx x / z + cx, so
dL/du = (z / fx) dL/dx in camera coordinates (likewise for v), and NDC units multiply by W / 2 (H / 2),
as 3DGS measures it. Only the small contribution of the mean to the projected covariance (through the
EWA Jacobian) makes this an approximation.
"""
import math

import torch

from odin_sched.training.counter_rng import normals
from odin_sched.training.densify_schedule import DensifyConfig
from odin_sched.training.gaussian_ids import can_densify, child_ids

RESET_OPACITY = 0.01


def screen_grad_norm(means: torch.Tensor, means_grad: torch.Tensor, viewmat: torch.Tensor,
                     K: torch.Tensor, width: int, height: int) -> torch.Tensor:
    """Norm of the NDC screen-space gradient of each Gaussian's projected mean.

    means: torch.Tensor       # [G, 3] world positions
    means_grad: torch.Tensor  # [G, 3] dL/dmeans
    viewmat: torch.Tensor     # [4, 4] world-to-camera
    K: torch.Tensor           # [3, 3] intrinsics
    Returns torch.Tensor      # [G]
    """
    rot = viewmat[:3, :3]
    # written elementwise (no matrix products) so that a row's value never depends on the other rows
    z = means[:, 0] * rot[2, 0] + means[:, 1] * rot[2, 1] + means[:, 2] * rot[2, 2] + viewmat[2, 3]
    g = means_grad
    gx = g[:, 0] * rot[0, 0] + g[:, 1] * rot[0, 1] + g[:, 2] * rot[0, 2]
    gy = g[:, 0] * rot[1, 0] + g[:, 1] * rot[1, 1] + g[:, 2] * rot[1, 2]
    gu = gx * z / K[0, 0] * (0.5 * width)
    gv = gy * z / K[1, 1] * (0.5 * height)
    return torch.sqrt(gu * gu + gv * gv)


class GradAccumulator:
    """Per Gaussian (on ``device``): running sum of screen-space gradient norms, visibility count and the
    largest screen radius (pixels) since the last densification round."""

    def __init__(self, num_gaussians: int, device="cpu"):
        self.total = torch.zeros(num_gaussians, dtype=torch.float32, device=device)
        self.count = torch.zeros(num_gaussians, dtype=torch.int64, device=device)
        self.max_radii = torch.zeros(num_gaussians, dtype=torch.float32, device=device)

    def add(self, grad_norm: torch.Tensor, visible: torch.Tensor, radii: torch.Tensor) -> None:
        """Accumulate ``grad_norm`` and ``radii`` ([G]) for the ``visible`` ([G] bool) Gaussians."""
        self.total[visible] += grad_norm[visible].to(torch.float32)
        self.count[visible] += 1
        self.max_radii[visible] = torch.maximum(self.max_radii[visible], radii[visible].to(torch.float32))

    def add_rows(self, rows: torch.Tensor, grad_norm: torch.Tensor, visible: torch.Tensor,
                 radii: torch.Tensor) -> None:
        """``add`` for the Gaussians ``rows`` ([g] int64 ids) only: grad_norm, visible, radii [g]."""
        seen = rows[visible]
        self.total[seen] += grad_norm[visible].to(torch.float32)
        self.count[seen] += 1
        self.max_radii[seen] = torch.maximum(self.max_radii[seen], radii[visible].to(torch.float32))

    def average(self) -> torch.Tensor:
        """Mean gradient norm per Gaussian over its visible steps (0 if never visible)."""
        return self.total / self.count.clamp(min=1)


def quat_to_rotmat(quats: torch.Tensor) -> torch.Tensor:
    """Rotation matrices of (w, x, y, z) quaternions (normalised here).

    quats: torch.Tensor  # [G, 4]
    Returns torch.Tensor # [G, 3, 3]
    """
    w, x, y, z = torch.nn.functional.normalize(quats, dim=-1).unbind(-1)
    return torch.stack([
        1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y),
        2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x),
        2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y),
    ], dim=-1).reshape(-1, 3, 3)


@torch.no_grad()
def densify_and_prune(params: dict, ids: torch.Tensor, grad_avg: torch.Tensor, extent: float, config: DensifyConfig,
                      seed: int, step: int, max_radii: torch.Tensor | None = None, survivor=None) -> tuple:
    """One round of clone / split / prune after batch ``step`` of a run seeded with ``seed``.

    params: dict name -> torch.Tensor  # [G, ...] means, scales (log), quats, opacities (logit) and any others
                                       # (the SH colour sh0, shN), copied to clones and split children
    ids: torch.Tensor                  # [G] int64 global ids (``odin_sched.training.gaussian_ids``)
    grad_avg: torch.Tensor             # [G] average screen-space gradient norm (GradAccumulator)
    max_radii: torch.Tensor or None    # [G] largest screen radius (pixels); given: also prune Gaussians
                                       # too large on screen or in the world (``DensifyConfig.prunes_large``)
    Returns (new_params, source, fresh, new_ids): new_params [G', ...]; source [G'] int64, the old row each
    new row takes its optimizer step count from (itself, or the parent of a clone or split); fresh [G']
    bool, the rows whose Adam moments start at zero (see ``VisibleAdam.replace``); new_ids [G'] int64.
    survivor: how a round that would prune every Gaussian keeps one (``most_opaque``, the default, on
    these rows; the sharded trainer passes one that picks among every owner's rows).
    Rows in ascending id (the input's kept Gaussians, a cloned one renamed child 0, the clones as child
    1, the split children 0 and 1), so the order is a function of the ids alone: densifying each
    owner's rows and merging them by id gives the rows of densifying all of them together. Every row's
    values depend on its own row and id only.
    """
    means, scales, quats = params["means"], params["scales"], params["quats"]
    big_grad = (grad_avg >= config.grad_threshold) & can_densify(ids)
    largest = torch.exp(scales).amax(dim=1)
    large = largest > config.percent_dense * extent
    clone = big_grad & ~large
    split = big_grad & large

    clone_idx = torch.nonzero(clone).squeeze(1)
    split_once = torch.nonzero(split).squeeze(1)
    split_idx = split_once.repeat(2)
    keep_idx = torch.nonzero(~split).squeeze(1)
    kept_ids = torch.where(clone[keep_idx], child_ids(ids[keep_idx], 0), ids[keep_idx])
    split_ids = torch.cat([child_ids(ids[split_once], 0), child_ids(ids[split_once], 1)])
    new_ids = torch.cat([kept_ids, child_ids(ids[clone_idx], 1), split_ids])

    stds = torch.exp(scales[split_idx])
    # drawn on the host wherever the Gaussians are, so a GPU run splits as the CPU run does
    draws = normals(seed, step, split_ids.cpu().numpy(), 3)
    offsets = torch.from_numpy(draws).to(stds.dtype).to(stds.device) * stds
    split_means = means[split_idx] + torch.einsum("gij,gj->gi", quat_to_rotmat(quats[split_idx]), offsets)
    split_scales = scales[split_idx] - torch.log(torch.tensor(0.8 * 2, dtype=scales.dtype))

    source = torch.cat([keep_idx, clone_idx, split_idx])
    new = {name: value[source] for name, value in params.items()}  # indexing copies: no clone
    n_old = keep_idx.shape[0] + clone_idx.shape[0]
    new["means"][n_old:] = split_means
    new["scales"][n_old:] = split_scales
    fresh = torch.arange(source.shape[0], device=source.device) >= keep_idx.shape[0]

    alive = torch.sigmoid(new["opacities"]) >= config.min_opacity
    if max_radii is not None:
        radii = torch.cat([max_radii[keep_idx], torch.zeros(source.shape[0] - keep_idx.shape[0],
                                                            dtype=max_radii.dtype, device=max_radii.device)])
        alive &= radii <= config.max_screen_radius
        alive &= torch.exp(new["scales"]).amax(dim=1) <= config.max_world_fraction * extent
    alive = (survivor or most_opaque)(new["opacities"], new_ids, alive)
    rows = torch.nonzero(alive).squeeze(1)
    rows = rows[torch.argsort(new_ids[rows])]  # ids are unique: one order
    return {name: value[rows] for name, value in new.items()}, source[rows], fresh[rows], new_ids[rows]


def best_row(opacities: torch.Tensor, ids: torch.Tensor) -> tuple:
    """(opacity logit, id) of the most opaque of Gaussians ``ids`` [g] (the lowest id among equals), or
    (-inf, -1) for none: the candidate ``most_opaque`` keeps, comparable between owners."""
    if not len(ids):
        return -math.inf, -1
    top = opacities.max()
    return float(top), int(ids[opacities == top].min())


def most_opaque(opacities: torch.Tensor, ids: torch.Tensor, alive: torch.Tensor) -> torch.Tensor:
    """``alive`` [g] bool, or, when it keeps none of the g > 0 Gaussians (opacities [g] logits, ids [g]),
    only the most opaque (lowest id among equals): a scene never becomes empty."""
    if alive.any() or not len(ids):
        return alive
    return ids == best_row(opacities, ids)[1]


@torch.no_grad()
def reset_opacity(opt) -> None:
    """The reference's opacity reset on an ``odin_sched.training.optim.VisibleAdam``: opacities clamped to
    at most ``RESET_OPACITY`` (through the sigmoid and back), their Adam moments zeroed, step counts kept."""
    clamped = torch.clamp(torch.sigmoid(opt.params["opacities"].detach()), max=RESET_OPACITY)
    opt.reset_param("opacities", torch.log(clamped / (1.0 - clamped)))


def densify_round(opt, accum: GradAccumulator, step: int, steps: int, batch_size: int, extent: float,
                  config: DensifyConfig, seed: int, survivor=None) -> GradAccumulator:
    """What densification does after batch ``step`` of ``steps`` of a run seeded with ``seed`` (both
    trainers call this after every batch they end a window on): a round of ``densify_and_prune`` on the
    Gaussians of ``opt`` (an ``odin_sched.training.optim.VisibleAdam``, replaced in place with its
    optimizer state and ids carried over) from the statistics in ``accum`` when one is due, then the
    opacity reset when due; survivor: see ``densify_and_prune``. Returns the accumulator to go on with (a
    fresh one after a round, as the reference zeroes its statistics)."""
    if config.due(step, steps, batch_size):
        params = {name: p.detach() for name, p in opt.params.items()}
        max_radii = accum.max_radii if config.prunes_large(step, batch_size) else None
        new, source, fresh, ids = densify_and_prune(params, opt.ids, accum.average(), extent, config, seed, step,
                                                    max_radii, survivor)
        del params  # each old parameter is freed as replace swaps in its new one
        opt.replace(new, source, fresh, ids, copy=False)  # the new rows are this round's own tensors
        accum = GradAccumulator(opt.num_gaussians, opt.device)
    if config.reset_due(step, steps, batch_size):
        reset_opacity(opt)
    return accum


def due_after(config: DensifyConfig | None, step: int, steps: int, batch_size: int) -> bool:
    """Whether densification (a round or an opacity reset) acts after batch ``step``."""
    return config is not None and (config.due(step, steps, batch_size) or config.reset_due(step, steps, batch_size))
