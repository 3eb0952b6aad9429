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
from numba import njit, prange

from kernels._device import blocks_for

from .arrays import check_array, empty, on_device, zeros
from .sh_math import DIR_EPS, SH_C0, SH_C1, SH_C2, SH_C3, backward_one, forward_one

THREADS_PER_BLOCK = 256
MAX_DEGREE = 3


def num_bases(degree: int) -> int:
    """Coefficients per colour channel of SH degree ``degree``: (degree + 1)^2."""
    return (degree + 1) ** 2


# The per-Gaussian bodies read and write arrays, so they are compiled twice: with njit here for the CPU
# kernels and as CUDA device functions in ``cuda_kernels`` (the CUDA simulator cannot pass its arrays
# into @njit code).
_forward_cpu, _backward_cpu = njit(cache=True)(forward_one), njit(cache=True)(backward_one)


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
        from .cuda_kernels import sh_to_colors_cuda

        sh_to_colors_cuda[blocks_for(count, THREADS_PER_BLOCK), THREADS_PER_BLOCK](
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
        from .cuda_kernels import sh_to_colors_backward_cuda

        sh_to_colors_backward_cuda[blocks_for(count, THREADS_PER_BLOCK), THREADS_PER_BLOCK](*args)
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
