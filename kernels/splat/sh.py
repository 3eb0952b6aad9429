"""View-dependent colour from spherical harmonics (degrees 0 to 3): the stage before rasterization.

Per Gaussian and camera, as the reference 3DGS code evaluates it (``utils/sh_utils.py`` and its CUDA
``computeColorFromSH``): the direction d = (mean - camera centre) / |mean - camera centre|, the real
SH basis of d with the reference's constants and signs (coefficient k of 16 in the order of the
reference: band 0, then band 1 as (-y, z, -x), ...), colour = sum_k basis_k(d) coeffs[k] + 0.5, then
clamped at 0. Only the first (degree + 1)^2 coefficients are read, so a model with more (a higher
maximum degree) renders at a lower active degree. The backward pass gives the coefficients' gradient
and the means' (through the direction); a channel clamped at 0 passes no gradient.

``sh_to_colors`` / ``sh_to_colors_backward`` run the CPU kernel on NumPy arrays and the CUDA kernel
on device arrays; ``_sh_to_colors`` is the torch reference twin (gradients by autograd).
"""

import math

import numpy as np
import torch
from numba import cuda, njit, prange

from kernels._device import blocks_for

from .arrays import check_array, empty, on_device, zeros

THREADS_PER_BLOCK = 256
MAX_DEGREE = 3
#: smallest |mean - camera centre| divided by (as torch.nn.functional.normalize's eps)
DIR_EPS = 1e-12

SH_C0 = 0.28209479177387814
SH_C1 = 0.4886025119029199
SH_C2 = (1.0925484305920792, -1.0925484305920792, 0.31539156525252005, -1.0925484305920792, 0.5462742152960396)
SH_C3 = (-0.5900435899266435, 2.890611442640554, -0.4570457994644658, 0.3731763325901154,
         -0.4570457994644658, 1.445305721320277, -0.5900435899266435)


def num_bases(degree: int) -> int:
    """Coefficients per colour channel of SH degree ``degree``: (degree + 1)^2."""
    return (degree + 1) ** 2


@njit(cache=True)
def sh_basis(degree, x, y, z):
    """The 16 basis values at the unit direction (x, y, z); those above ``degree`` are 0."""
    b1 = b2 = b3 = b4 = b5 = b6 = b7 = b8 = 0.0
    b9 = b10 = b11 = b12 = b13 = b14 = b15 = 0.0
    if degree > 0:
        b1 = -SH_C1 * y
        b2 = SH_C1 * z
        b3 = -SH_C1 * x
    if degree > 1:
        xx, yy, zz = x * x, y * y, z * z
        b4 = SH_C2[0] * x * y
        b5 = SH_C2[1] * y * z
        b6 = SH_C2[2] * (2.0 * zz - xx - yy)
        b7 = SH_C2[3] * x * z
        b8 = SH_C2[4] * (xx - yy)
        if degree > 2:
            b9 = SH_C3[0] * y * (3.0 * xx - yy)
            b10 = SH_C3[1] * x * y * z
            b11 = SH_C3[2] * y * (4.0 * zz - xx - yy)
            b12 = SH_C3[3] * z * (2.0 * zz - 3.0 * xx - 3.0 * yy)
            b13 = SH_C3[4] * x * (4.0 * zz - xx - yy)
            b14 = SH_C3[5] * z * (xx - yy)
            b15 = SH_C3[6] * x * (xx - 3.0 * yy)
    return (SH_C0, b1, b2, b3, b4, b5, b6, b7, b8, b9, b10, b11, b12, b13, b14, b15)


@njit(cache=True)
def sh_basis_gradient(k, x, y, z):
    """d/d(x, y, z) of basis value ``k`` (1..15) at (x, y, z), the coordinates taken as independent."""
    xx, yy, zz = x * x, y * y, z * z
    if k == 1:
        return 0.0, -SH_C1, 0.0
    if k == 2:
        return 0.0, 0.0, SH_C1
    if k == 3:
        return -SH_C1, 0.0, 0.0
    if k == 4:
        return SH_C2[0] * y, SH_C2[0] * x, 0.0
    if k == 5:
        return 0.0, SH_C2[1] * z, SH_C2[1] * y
    if k == 6:
        return -2.0 * SH_C2[2] * x, -2.0 * SH_C2[2] * y, 4.0 * SH_C2[2] * z
    if k == 7:
        return SH_C2[3] * z, 0.0, SH_C2[3] * x
    if k == 8:
        return 2.0 * SH_C2[4] * x, -2.0 * SH_C2[4] * y, 0.0
    if k == 9:
        return 6.0 * SH_C3[0] * x * y, 3.0 * SH_C3[0] * (xx - yy), 0.0
    if k == 10:
        return SH_C3[1] * y * z, SH_C3[1] * x * z, SH_C3[1] * x * y
    if k == 11:
        return -2.0 * SH_C3[2] * x * y, SH_C3[2] * (4.0 * zz - xx - 3.0 * yy), 8.0 * SH_C3[2] * y * z
    if k == 12:
        return -6.0 * SH_C3[3] * x * z, -6.0 * SH_C3[3] * y * z, SH_C3[3] * (6.0 * zz - 3.0 * xx - 3.0 * yy)
    if k == 13:
        return SH_C3[4] * (4.0 * zz - 3.0 * xx - yy), -2.0 * SH_C3[4] * x * y, 8.0 * SH_C3[4] * x * z
    if k == 14:
        return 2.0 * SH_C3[5] * x * z, -2.0 * SH_C3[5] * y * z, SH_C3[5] * (xx - yy)
    if k == 15:
        return 3.0 * SH_C3[6] * (xx - yy), -6.0 * SH_C3[6] * x * y, 0.0
    return 0.0, 0.0, 0.0


@njit(cache=True)
def view_direction(mx, my, mz, campos):
    """Unit direction from the camera centre to the mean, and 1 / max(distance, DIR_EPS)."""
    rx, ry, rz = mx - campos[0], my - campos[1], mz - campos[2]
    inv = 1.0 / max(math.sqrt(rx * rx + ry * ry + rz * rz), DIR_EPS)
    return rx * inv, ry * inv, rz * inv, inv


@njit(cache=True)
def direction_vjp(x, y, z, inv, vx, vy, vz):
    """dL/dmean from dL/d(direction): (I - d d^T) / |r| (just / DIR_EPS where |r| <= DIR_EPS)."""
    if inv < 1.0 / DIR_EPS:
        dot = x * vx + y * vy + z * vz
        vx, vy, vz = vx - x * dot, vy - y * dot, vz - z * dot
    return vx * inv, vy * inv, vz * inv


def _forward_one(g, means, coeffs, campos, degree, colors):
    """Colour of Gaussian g: max(sum_k b_k c_k + 0.5, 0) per channel."""
    bases = (degree + 1) * (degree + 1)
    x, y, z, _ = view_direction(means[g, 0], means[g, 1], means[g, 2], campos)
    b = sh_basis(degree, x, y, z)
    for ch in range(3):
        acc = 0.0
        for k in range(bases):
            acc += b[k] * coeffs[g, k, ch]
        colors[g, ch] = max(acc + 0.5, 0.0)


def _backward_one(g, means, coeffs, campos, degree, v_colors, v_means, v_coeffs):
    """Gradients of Gaussian g: per channel v = dL/dcolour (0 where clamped), dL/dc_k = b_k v and
    dL/ddirection = sum_k (sum_ch v c_k) db_k, then through the normalisation to the mean."""
    bases = (degree + 1) * (degree + 1)
    x, y, z, inv = view_direction(means[g, 0], means[g, 1], means[g, 2], campos)
    b = sh_basis(degree, x, y, z)
    a0 = a1 = a2 = 0.0
    for k in range(bases):
        a0 += b[k] * coeffs[g, k, 0]
        a1 += b[k] * coeffs[g, k, 1]
        a2 += b[k] * coeffs[g, k, 2]
    v0 = v_colors[g, 0] if a0 + 0.5 >= 0.0 else 0.0
    v1 = v_colors[g, 1] if a1 + 0.5 >= 0.0 else 0.0
    v2 = v_colors[g, 2] if a2 + 0.5 >= 0.0 else 0.0
    vx = vy = vz = 0.0
    for k in range(bases):
        v_coeffs[g, k, 0] = b[k] * v0
        v_coeffs[g, k, 1] = b[k] * v1
        v_coeffs[g, k, 2] = b[k] * v2
        w = v0 * coeffs[g, k, 0] + v1 * coeffs[g, k, 1] + v2 * coeffs[g, k, 2]
        dx, dy, dz = sh_basis_gradient(k, x, y, z)
        vx += w * dx
        vy += w * dy
        vz += w * dz
    v_means[g, 0], v_means[g, 1], v_means[g, 2] = direction_vjp(x, y, z, inv, vx, vy, vz)


# The per-Gaussian bodies read and write arrays, so they are compiled twice: with njit for the CPU
# kernels and as CUDA device functions (the CUDA simulator cannot pass its arrays into @njit code).
_forward_cpu, _forward_device = njit(cache=True)(_forward_one), cuda.jit(device=True)(_forward_one)
_backward_cpu, _backward_device = njit(cache=True)(_backward_one), cuda.jit(device=True)(_backward_one)


@njit(parallel=True, cache=True)
def _sh_to_colors_cpu(
    means,  # [G, 3] float32
    coeffs,  # [G, K, 3] float32
    campos,  # (x, y, z) camera centre
    degree,  # active degree, (degree + 1)^2 <= K
    colors,  # [G, 3] float32 out
):
    for g in prange(means.shape[0]):
        _forward_cpu(g, means, coeffs, campos, degree, colors)


@cuda.jit
def _sh_to_colors_cuda(means, coeffs, campos, degree, colors):
    g = cuda.grid(1)
    if g < means.shape[0]:
        _forward_device(g, means, coeffs, campos, degree, colors)


@njit(parallel=True, cache=True)
def _sh_to_colors_backward_cpu(
    means,  # [G, 3] float32
    coeffs,  # [G, K, 3] float32
    campos,  # (x, y, z)
    degree,
    v_colors,  # [G, 3] float32, dL/dcolors
    v_means,  # [G, 3] float32 out, zero-filled
    v_coeffs,  # [G, K, 3] float32 out, zero-filled (coefficients above the degree stay 0)
):
    for g in prange(means.shape[0]):
        _backward_cpu(g, means, coeffs, campos, degree, v_colors, v_means, v_coeffs)


@cuda.jit
def _sh_to_colors_backward_cuda(means, coeffs, campos, degree, v_colors, v_means, v_coeffs):
    g = cuda.grid(1)
    if g < means.shape[0]:
        _backward_device(g, means, coeffs, campos, degree, v_colors, v_means, v_coeffs)


def _check(means, coeffs, campos, degree) -> tuple:
    check_array("means", means, (None, 3), np.float32)
    count = means.shape[0]
    check_array("coeffs", coeffs, (count, None, 3), np.float32)
    if isinstance(degree, bool) or not isinstance(degree, (int, np.integer)) or not 0 <= degree <= MAX_DEGREE:
        raise ValueError(f"degree must be an int in [0, {MAX_DEGREE}], got {degree!r}")
    if coeffs.shape[1] < num_bases(degree):
        raise ValueError(f"coeffs has {coeffs.shape[1]} coefficients per channel; degree {degree} needs "
                         f"{num_bases(degree)}")
    centre = tuple(float(c) for c in np.asarray(campos, dtype=np.float64).reshape(-1))
    if len(centre) != 3 or not all(math.isfinite(c) for c in centre):
        raise ValueError(f"campos must be 3 finite numbers, got {campos!r}")
    return count, centre


def sh_to_colors(
    means,  # [G, 3] float32
    coeffs,  # [G, K, 3] float32, K >= (degree + 1)^2
    campos,  # [3] camera centre in world coordinates (host numbers)
    degree: int,  # active SH degree, 0..3
):
    """Colours [G, 3] float32 of the Gaussians seen from ``campos``: SH of the view direction + 0.5,
    clamped at 0. NumPy inputs run the CPU kernel, device arrays the CUDA kernel."""
    count, centre = _check(means, coeffs, campos, degree)
    device = on_device((means, coeffs))
    colors = empty((count, 3), np.float32, device)
    if count and device:
        _sh_to_colors_cuda[blocks_for(count, THREADS_PER_BLOCK), THREADS_PER_BLOCK](
            means, coeffs, centre, int(degree), colors)
    elif count:
        _sh_to_colors_cpu(means, coeffs, centre, int(degree), colors)
    return colors


def sh_to_colors_backward(means, coeffs, campos, degree: int, v_colors):
    """Backward of ``sh_to_colors`` from dL/dcolors [G, 3]: returns dL/dmeans [G, 3] (through the view
    direction) and dL/dcoeffs [G, K, 3] (0 above the degree and for clamped channels), float32."""
    count, centre = _check(means, coeffs, campos, degree)
    check_array("v_colors", v_colors, (count, 3), np.float32)
    device = on_device((means, coeffs, v_colors))
    v_means = zeros((count, 3), np.float32, device)
    v_coeffs = zeros(tuple(coeffs.shape), np.float32, device)
    args = (means, coeffs, centre, int(degree), v_colors, v_means, v_coeffs)
    if count and device:
        _sh_to_colors_backward_cuda[blocks_for(count, THREADS_PER_BLOCK), THREADS_PER_BLOCK](*args)
    elif count:
        _sh_to_colors_backward_cpu(*args)
    return v_means, v_coeffs


def camera_centre(viewmat) -> np.ndarray:
    """World position [3] float64 of the camera with world-to-camera matrix ``viewmat`` [4, 4]: -R^T t."""
    viewmat = np.asarray(viewmat, dtype=np.float64)
    return -viewmat[:3, :3].T @ viewmat[:3, 3]


def _sh_basis(degree: int, dirs: torch.Tensor) -> torch.Tensor:
    """Reference twin of ``sh_basis``: [..., (degree + 1)^2] basis values at unit directions [..., 3],
    the polynomials of the reference code's ``eval_sh``."""
    x, y, z = dirs.unbind(-1)
    out = [torch.full_like(x, SH_C0)]
    if degree > 0:
        out += [-SH_C1 * y, SH_C1 * z, -SH_C1 * x]
    if degree > 1:
        xx, yy, zz = x * x, y * y, z * z
        out += [SH_C2[0] * x * y, SH_C2[1] * y * z, SH_C2[2] * (2 * zz - xx - yy), SH_C2[3] * x * z,
                SH_C2[4] * (xx - yy)]
        if degree > 2:
            out += [SH_C3[0] * y * (3 * xx - yy), SH_C3[1] * x * y * z, SH_C3[2] * y * (4 * zz - xx - yy),
                    SH_C3[3] * z * (2 * zz - 3 * xx - 3 * yy), SH_C3[4] * x * (4 * zz - xx - yy),
                    SH_C3[5] * z * (xx - yy), SH_C3[6] * x * (xx - 3 * yy)]
    return torch.stack(out, dim=-1)


def _sh_to_colors(means: torch.Tensor, coeffs: torch.Tensor, campos: torch.Tensor, degree: int) -> torch.Tensor:
    """Reference twin of ``sh_to_colors`` in torch (differentiable by autograd).

    means [G, 3], coeffs [G, K, 3], campos [3]; returns colours [G, 3]."""
    dirs = torch.nn.functional.normalize(means - campos, dim=-1, eps=DIR_EPS)
    bases = num_bases(degree)
    raw = (_sh_basis(degree, dirs)[:, :, None] * coeffs[:, :bases]).sum(dim=1) + 0.5
    return torch.clamp_min(raw, 0.0)
