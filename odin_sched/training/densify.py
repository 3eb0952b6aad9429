"""Adaptive density control of 3DGS: clone and split by positional gradient, prune by opacity.

Follows ``GaussianModel.densify_and_prune`` of the reference 3DGS code:

* the screen-space (NDC) positional gradient norm of each Gaussian is accumulated over the steps in
  which it is visible, and averaged;
* a Gaussian whose average reaches ``grad_threshold`` is *cloned* (an identical copy is added) when its
  largest scale is at most ``percent_dense`` x scene extent, and *split* otherwise (replaced by two
  Gaussians sampled from it, scales divided by 1.6);
* Gaussians with activated opacity below ``min_opacity`` are pruned (the most opaque one is always
  kept, so a scene never becomes empty);
* new Gaussians start with zero optimizer state (``VisibleAdam.replace`` with source -1).

The renderer reports gradients for the 3D means only, so the screen-space gradient is recovered from
them through the pinhole projection: camera x enters the image only through u = fx x / z + cx, so
dL/du = (z / fx) dL/dx in camera coordinates (likewise for v), and NDC units multiply by W / 2 (H / 2),
as 3DGS measures it. Only the small contribution of the mean to the projected covariance (through the
EWA Jacobian) makes this an approximation.
"""
import math
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class DensifyConfig:
    """When and how to densify (defaults of the reference 3DGS code)."""

    interval: int = 100           # densify every `interval` steps ...
    start: int = 500              # ... from this step ...
    stop: int = 15_000            # ... until this step (exclusive)
    grad_threshold: float = 0.0002
    percent_dense: float = 0.01
    min_opacity: float = 0.005

    def __post_init__(self):
        if self.interval < 1:
            raise ValueError(f"densify interval must be >= 1, got {self.interval}")
        if self.start < 0 or self.stop < self.start:
            raise ValueError(f"densify steps must satisfy 0 <= start <= stop, got {self.start}, {self.stop}")
        if not (0 < self.grad_threshold < math.inf and 0 < self.percent_dense < math.inf and 0 <= self.min_opacity < 1):
            raise ValueError(f"densify thresholds must be positive numbers (min_opacity in [0, 1)), got "
                             f"grad_threshold {self.grad_threshold}, percent_dense {self.percent_dense}, "
                             f"min_opacity {self.min_opacity}")

    def due(self, step: int) -> bool:
        """Whether to densify after training step ``step`` (1-based)."""
        return self.start <= step < self.stop and step % self.interval == 0


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
    """Running sum of screen-space gradient norms and visibility counts per Gaussian (on ``device``)."""

    def __init__(self, num_gaussians: int, device="cpu"):
        self.total = torch.zeros(num_gaussians, dtype=torch.float32, device=device)
        self.count = torch.zeros(num_gaussians, dtype=torch.int64, device=device)

    def add(self, grad_norm: torch.Tensor, visible: torch.Tensor) -> None:
        """Accumulate ``grad_norm`` ([G]) for the ``visible`` ([G] bool) Gaussians."""
        self.total[visible] += grad_norm[visible].to(torch.float32)
        self.count[visible] += 1

    def add_rows(self, rows: torch.Tensor, grad_norm: torch.Tensor, visible: torch.Tensor) -> None:
        """``add`` for the Gaussians ``rows`` ([g] int64 ids) only: grad_norm, visible [g]."""
        seen = rows[visible]
        self.total[seen] += grad_norm[visible].to(torch.float32)
        self.count[seen] += 1

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
def densify_and_prune(params: dict, grad_avg: torch.Tensor, extent: float, config: DensifyConfig,
                      generator: torch.Generator) -> tuple[dict, torch.Tensor]:
    """One round of clone / split / prune.

    params: dict name -> torch.Tensor  # [G, ...] means, scales (log), quats, opacities (logit) and any others
                                       # (the SH colour sh0, shN), copied to clones and split children
    grad_avg: torch.Tensor             # [G] average screen-space gradient norm (GradAccumulator)
    Returns (new_params, source): new_params [G', ...]; source [G'] int64, the old row a new row keeps
    the optimizer state of, or -1 for a new Gaussian (see ``VisibleAdam.replace``).
    """
    g = grad_avg.shape[0]
    means, scales, quats = params["means"], params["scales"], params["quats"]
    big_grad = grad_avg >= config.grad_threshold
    large = torch.exp(scales).amax(dim=1) > config.percent_dense * extent
    clone = big_grad & ~large
    split = big_grad & large

    clone_idx = torch.nonzero(clone).squeeze(1)
    split_idx = torch.nonzero(split).squeeze(1).repeat(2)
    keep_idx = torch.nonzero(~split).squeeze(1)

    stds = torch.exp(scales[split_idx])
    # drawn by the CPU ``generator`` wherever the Gaussians are, so a GPU run splits as the CPU run does
    offsets = torch.randn(stds.shape, generator=generator, dtype=stds.dtype).to(stds.device) * stds
    split_means = means[split_idx] + torch.einsum("gij,gj->gi", quat_to_rotmat(quats[split_idx]), offsets)
    split_scales = scales[split_idx] - torch.log(torch.tensor(0.8 * 2, dtype=scales.dtype))

    order = torch.cat([keep_idx, clone_idx, split_idx])
    new = {name: value[order].clone() for name, value in params.items()}
    n_old = keep_idx.shape[0] + clone_idx.shape[0]
    new["means"][n_old:] = split_means
    new["scales"][n_old:] = split_scales
    fresh = torch.full((order.shape[0] - keep_idx.shape[0],), -1, dtype=torch.int64, device=keep_idx.device)
    source = torch.cat([keep_idx, fresh])

    alive = torch.sigmoid(new["opacities"]) >= config.min_opacity
    if g and not alive.any():
        alive[torch.argmax(new["opacities"])] = True
    return {name: value[alive] for name, value in new.items()}, source[alive]


def densify_optimizer(opt, accum: GradAccumulator, extent: float, config: DensifyConfig,
                      generator: torch.Generator) -> GradAccumulator:
    """One round of ``densify_and_prune`` on the Gaussians of ``opt`` (an ``odin_sched.training.optim.VisibleAdam``,
    replaced in place with its optimizer state carried over) from the gradients gathered in ``accum``;
    returns the fresh accumulator for the new Gaussians. Both trainers call this at the same steps."""
    params = {name: p.detach() for name, p in opt.params.items()}
    new, source = densify_and_prune(params, accum.average(), extent, config, generator)
    opt.replace(new, source)
    return GradAccumulator(opt.num_gaussians, opt.device)
