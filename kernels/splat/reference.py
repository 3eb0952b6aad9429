"""Pure-torch reference twin of the rasterizer: dense, differentiable by autograd.

It follows the conventions of docs/rasterizer.md literally, pixel by Gaussian, with no tile lists: every pixel
looks at every visible Gaussian, masked by the tile rule (a Gaussian affects only the pixels of the
16 x 16 tiles that its square [mu - r, mu + r] touches), sorted by view depth (ties by index), with
the alpha clamp, the 1/255 skip and the early stop. Tests compare the Numba kernels against it;
gradients come from torch autograd.
"""

import math

import torch
from torch.utils.checkpoint import checkpoint

from .constants import ALPHA_MAX, ALPHA_MIN, EPS_2D, FOV_CLIP, NEAR_PLANE, RADIUS_SIGMAS, T_MIN, TILE_SIZE
from .sh import _sh_to_colors
from .validate import check_render_inputs

# Pixel x Gaussian elements handled at once by the dense compositing (bounds memory use).
_CHUNK_ELEMENTS = 1 << 22


def _quat_to_rotmat(quats: torch.Tensor) -> torch.Tensor:
    """Rotation matrices [G, 3, 3] of quaternions [G, 4] (w, x, y, z), normalised first."""
    w, x, y, z = (quats / quats.norm(dim=1, keepdim=True)).unbind(1)
    return torch.stack(
        [
            1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y),
            2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x),
            2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y),
        ],
        dim=1,
    ).reshape(-1, 3, 3)


def _project(means, scales, quats, viewmat, K, width, height):
    """Project 3D Gaussians to the image (EWA splatting with the pinhole Jacobian).

    means [G, 3], scales [G, 3] (log), quats [G, 4] (w, x, y, z), viewmat [4, 4], K [3, 3].
    Returns mean2d [G, 2] (pixels), conic [G, 3] (a, b, c of the inverse 2D covariance
    [[a, b], [b, c]]), depth [G] (view z) and radius [G] int32; radius is 0 for culled Gaussians
    (z <= NEAR_PLANE, or the square [mu - r, mu + r] misses the image), whose mean2d and conic are 0.
    mean2d and conic are differentiable.
    """
    rot_view, trans_view = viewmat[:3, :3], viewmat[:3, 3]
    t = means @ rot_view.T + trans_view  # [G, 3]
    depth = t[:, 2]
    front = depth.detach() > NEAR_PLANE
    tz = torch.where(front, depth, torch.ones_like(depth))  # keeps culled rows finite
    tx, ty = t[:, 0], t[:, 1]
    fx, fy, cx, cy = K[0, 0], K[1, 1], K[0, 2], K[1, 2]
    tan_x, tan_y = 0.5 * width / fx, 0.5 * height / fy
    u = torch.clamp(tx / tz, -cx / fx - FOV_CLIP * tan_x, (width - cx) / fx + FOV_CLIP * tan_x)
    v = torch.clamp(ty / tz, -cy / fy - FOV_CLIP * tan_y, (height - cy) / fy + FOV_CLIP * tan_y)
    zero = torch.zeros_like(tz)
    jac = torch.stack([fx / tz, zero, -fx * u / tz, zero, fy / tz, -fy * v / tz], dim=1).reshape(-1, 2, 3)

    rot = _quat_to_rotmat(quats)
    m = rot * torch.exp(scales)[:, None, :]  # R S
    cov3d = m @ m.transpose(1, 2)
    cov_view = rot_view @ cov3d @ rot_view.T
    cov2d = jac @ cov_view @ jac.transpose(1, 2)
    a = cov2d[:, 0, 0] + EPS_2D
    b = cov2d[:, 0, 1]
    c = cov2d[:, 1, 1] + EPS_2D
    det = a * c - b * b
    valid = front & (det.detach() > 0)
    det_safe = torch.where(valid, det, torch.ones_like(det))
    conic = torch.stack([c / det_safe, -b / det_safe, a / det_safe], dim=1)
    mean2d = torch.stack([fx * tx / tz + cx, fy * ty / tz + cy], dim=1)

    with torch.no_grad():
        mid = 0.5 * (a + c)
        lam = mid + torch.sqrt(torch.clamp(mid * mid - det, min=0.0))
        radius = torch.ceil(RADIUS_SIGMAS * torch.sqrt(torch.clamp(lam, min=0.0)))
        mx, my = mean2d[:, 0], mean2d[:, 1]
        on_screen = (mx + radius > 0) & (mx - radius < width) & (my + radius > 0) & (my - radius < height)
        keep = valid & on_screen & (radius > 0)
        radius = torch.where(keep, radius, torch.zeros_like(radius)).to(torch.int32)
    keep2 = keep[:, None]
    mean2d = torch.where(keep2, mean2d, torch.zeros_like(mean2d))
    conic = torch.where(keep2, conic, torch.zeros_like(conic))
    return mean2d, conic, depth.detach(), radius


def _composite(mean2d, conic, opacity, colors, radius, pix_x, pix_y, background):
    """Front-to-back compositing of depth-sorted Gaussians [Gv] at pixels [P]: colour [P, 3], T [P]."""
    tile_x = torch.floor(pix_x / TILE_SIZE)[:, None] * TILE_SIZE  # left edge of the pixel's tile
    tile_y = torch.floor(pix_y / TILE_SIZE)[:, None] * TILE_SIZE
    r = radius.to(mean2d.dtype)[None, :]
    mx, my = mean2d[:, 0][None, :], mean2d[:, 1][None, :]
    in_tiles = (tile_x < mx + r) & (mx - r < tile_x + TILE_SIZE) & (tile_y < my + r) & (my - r < tile_y + TILE_SIZE)
    dx = mx - pix_x[:, None]
    dy = my - pix_y[:, None]
    power = -0.5 * (conic[:, 0] * dx * dx + conic[:, 2] * dy * dy) - conic[:, 1] * dx * dy
    alpha = torch.clamp(opacity[None, :] * torch.exp(power), max=ALPHA_MAX)
    alpha = torch.where(in_tiles & (alpha >= ALPHA_MIN), alpha, torch.zeros_like(alpha))
    with torch.no_grad():  # early stop: keep Gaussians while T after them stays >= T_MIN
        kept = torch.cumprod(1 - alpha, dim=1) >= T_MIN
    alpha = torch.where(kept, alpha, torch.zeros_like(alpha))
    one_minus = 1 - alpha
    trans_after = torch.cumprod(one_minus, dim=1)
    trans_before = torch.cat([torch.ones_like(trans_after[:, :1]), trans_after[:, :-1]], dim=1)
    weights = alpha * trans_before
    final_t = trans_after[:, -1]
    return weights @ colors + final_t[:, None] * background[None, :], final_t


def _render(means, scales, quats, opacities, colors, viewmat, K, width, height, background=None, sh_degree=None):
    """Render an image with the dense torch reference (autograd gives the gradients).

    means [G, 3], scales [G, 3] log, quats [G, 4] wxyz, opacities [G] logit, colors [G, 3] (or, with
    ``sh_degree``, SH coefficients [G, K, 3] evaluated by ``sh._sh_to_colors``), viewmat [4, 4]
    world-to-camera, K [3, 3], background [3] or None (black).
    Returns image [height, width, 3] float32 and visible [G] bool (radius > 0).
    Memory is bounded by compositing chunks of pixels (recomputed in backward by checkpointing).
    """
    check_render_inputs(means, scales, quats, opacities, colors, viewmat, K, width, height, background, sh_degree)
    if background is None:
        background = torch.zeros(3, dtype=means.dtype, device=means.device)
    if sh_degree is not None:
        rot, trans = viewmat[:3, :3].to(torch.float64), viewmat[:3, 3].to(torch.float64)
        campos = (-rot.T @ trans).to(means.dtype)
        colors = _sh_to_colors(means, colors, campos, sh_degree)
    mean2d, conic, depth, radius = _project(means, scales, quats, viewmat, K, width, height)
    visible = radius > 0
    ids = torch.nonzero(visible).flatten()
    ids = ids[torch.sort(depth[ids], stable=True).indices]  # depth order, ties by index
    mean2d, conic, radius = mean2d[ids], conic[ids], radius[ids]
    opacity = torch.sigmoid(opacities[ids])
    color = colors[ids]

    ys, xs = torch.meshgrid(
        torch.arange(height, dtype=means.dtype, device=means.device),
        torch.arange(width, dtype=means.dtype, device=means.device),
        indexing="ij",
    )
    pix_x, pix_y = xs.flatten() + 0.5, ys.flatten() + 0.5
    if ids.numel() == 0:  # background only; tied to the inputs so that loss.backward() still runs
        tie = sum(t.sum() for t in (means, scales, quats, opacities, colors))
        image = background[None, :].expand(height * width, 3) + 0 * tie
        return image.reshape(height, width, 3).contiguous(), visible
    chunk = max(1, _CHUNK_ELEMENTS // ids.numel())
    parts = []
    for start in range(0, height * width, chunk):
        args = (mean2d, conic, opacity, color, radius, pix_x[start:start + chunk], pix_y[start:start + chunk], background)
        if torch.is_grad_enabled() and math.ceil(height * width / chunk) > 1:
            parts.append(checkpoint(_composite, *args, use_reentrant=False)[0])
        else:
            parts.append(_composite(*args)[0])
    return torch.cat(parts).reshape(height, width, 3), visible
