"""Projection of 3D Gaussians to the image and its backward pass (CPU and CUDA kernels).

Forward: mean2d, conic, depth and radius per Gaussian (radius 0 = culled). Backward: gradients of
the means, log-scales and quaternions from those of mean2d and conic. The formulas live in
``scalar_math`` (shared by both targets); the reference twin is ``reference._project``.
"""

import numpy as np
from numba import njit, prange

from kernels._device import blocks_for

from .arrays import camera_tuples, check_array, check_size, empty, on_device, zeros
from .projection_math import project_backward_one, project_one

THREADS_PER_BLOCK = 256


_project_one = njit(cache=True, inline="always")(project_one)
_project_backward_one = njit(cache=True, inline="always")(project_backward_one)


@njit(parallel=True, cache=True)
def _project_cpu(
    means,  # [G, 3] float32
    log_scales,  # [G, 3] float32
    quats,  # [G, 4] float32, (w, x, y, z)
    view,  # 12-tuple: top three rows of the view matrix
    intr,  # (fx, fy, cx, cy)
    width,
    height,
    mean2d,  # [G, 2] float32 out
    conic,  # [G, 3] float32 out
    depth,  # [G] float32 out
    radius,  # [G] int32 out
):
    for g in prange(means.shape[0]):
        _project_one(g, means, log_scales, quats, view, intr, width, height, mean2d, conic, depth, radius)


@njit(parallel=True, cache=True)
def _project_backward_cpu(
    means,  # [G, 3] float32
    log_scales,  # [G, 3] float32
    quats,  # [G, 4] float32
    view,  # 12-tuple
    intr,  # (fx, fy, cx, cy)
    width,
    height,
    radius,  # [G] int32 from the forward pass
    v_mean2d,  # [G, 2] float32
    v_conic,  # [G, 3] float32
    v_means,  # [G, 3] float32 out
    v_log_scales,  # [G, 3] float32 out
    v_quats,  # [G, 4] float32 out
):
    for g in prange(means.shape[0]):
        if radius[g] > 0:
            _project_backward_one(g, means, log_scales, quats, view, intr, width, height, v_mean2d, v_conic, v_means,
                                  v_log_scales, v_quats)


def _check_gaussians(means, log_scales, quats, width, height):
    check_size(width, height)
    check_array("means", means, (None, 3), np.float32)
    count = means.shape[0]
    check_array("log_scales", log_scales, (count, 3), np.float32)
    check_array("quats", quats, (count, 4), np.float32)
    return count


def project(
    means,  # [G, 3] float32
    log_scales,  # [G, 3] float32
    quats,  # [G, 4] float32, (w, x, y, z), normalised here
    viewmat,  # [4, 4] host array, world-to-camera
    K,  # [3, 3] host array
    width: int,
    height: int,
):
    """Project Gaussians: returns mean2d [G, 2], conic [G, 3], depth [G] (float32) and radius [G] int32.

    NumPy inputs run the CPU kernel, device arrays the CUDA kernel (outputs on the same side).
    radius = 0 marks a culled Gaussian (behind the near plane or off screen); its mean2d and conic are 0.
    """
    count = _check_gaussians(means, log_scales, quats, width, height)
    view, intr = camera_tuples(viewmat, K)
    device = on_device((means, log_scales, quats))
    mean2d = empty((count, 2), np.float32, device)
    conic = empty((count, 3), np.float32, device)
    depth = empty((count,), np.float32, device)
    radius = empty((count,), np.int32, device)
    if count == 0:
        return mean2d, conic, depth, radius
    args = (means, log_scales, quats, view, intr, int(width), int(height), mean2d, conic, depth, radius)
    if device:
        from .cuda_kernels import project_cuda

        project_cuda[blocks_for(count, THREADS_PER_BLOCK), THREADS_PER_BLOCK](*args)
    else:
        _project_cpu(*args)
    return mean2d, conic, depth, radius


def project_backward(
    means,  # [G, 3] float32
    log_scales,  # [G, 3] float32
    quats,  # [G, 4] float32
    viewmat,  # [4, 4] host array
    K,  # [3, 3] host array
    width: int,
    height: int,
    radius,  # [G] int32 from project()
    v_mean2d,  # [G, 2] float32, dL/dmean2d
    v_conic,  # [G, 3] float32, dL/dconic
):
    """Backward of ``project``: returns dL/dmeans [G, 3], dL/dlog_scales [G, 3], dL/dquats [G, 4].

    Culled Gaussians (radius 0) get zero gradients.
    """
    count = _check_gaussians(means, log_scales, quats, width, height)
    check_array("radius", radius, (count,), np.int32)
    check_array("v_mean2d", v_mean2d, (count, 2), np.float32)
    check_array("v_conic", v_conic, (count, 3), np.float32)
    view, intr = camera_tuples(viewmat, K)
    device = on_device((means, log_scales, quats, radius, v_mean2d, v_conic))
    v_means = zeros((count, 3), np.float32, device)
    v_log_scales = zeros((count, 3), np.float32, device)
    v_quats = zeros((count, 4), np.float32, device)
    if count == 0:
        return v_means, v_log_scales, v_quats
    args = (means, log_scales, quats, view, intr, int(width), int(height), radius, v_mean2d, v_conic,
            v_means, v_log_scales, v_quats)
    if device:
        from .cuda_kernels import project_backward_cuda

        project_backward_cuda[blocks_for(count, THREADS_PER_BLOCK), THREADS_PER_BLOCK](*args)
    else:
        _project_backward_cpu(*args)
    return v_means, v_log_scales, v_quats
