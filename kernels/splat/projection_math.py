"""The projection stage's per-Gaussian bodies, compiled twice: with ``njit`` for the CPU kernels (in
``projection``) and as CUDA device functions (in ``cuda_kernels``), so that each exists once. They read
and write the stage's arrays at row ``g``; the formulas are ``scalar_math``'s."""

from .scalar_math import project_gaussian, project_gaussian_vjp


def project_one(g, means, log_scales, quats, view, intr, width, height, mean2d, conic, depth, radius):
    """Project Gaussian g: its 2-D mean, conic, depth and pixel radius (0 when culled) into row g of
    ``mean2d`` [G, 2], ``conic`` [G, 3], ``depth`` [G] and ``radius`` [G]."""
    mx, my, ca, cb, cc, z, r = project_gaussian(
        (means[g, 0], means[g, 1], means[g, 2]),
        (log_scales[g, 0], log_scales[g, 1], log_scales[g, 2]),
        (quats[g, 0], quats[g, 1], quats[g, 2], quats[g, 3]),
        view, intr, width, height,
    )
    mean2d[g, 0] = mx
    mean2d[g, 1] = my
    conic[g, 0] = ca
    conic[g, 1] = cb
    conic[g, 2] = cc
    depth[g] = z
    radius[g] = r


def project_backward_one(g, means, log_scales, quats, view, intr, width, height, v_mean2d, v_conic, v_means,
                         v_log_scales, v_quats):
    """Gradients of Gaussian g's mean [3], log-scales [3] and quaternion [4] from those of its 2-D mean
    and conic, into row g of ``v_means``, ``v_log_scales`` and ``v_quats`` (for a projected Gaussian)."""
    vm, vs, vq = project_gaussian_vjp(
        (means[g, 0], means[g, 1], means[g, 2]),
        (log_scales[g, 0], log_scales[g, 1], log_scales[g, 2]),
        (quats[g, 0], quats[g, 1], quats[g, 2], quats[g, 3]),
        view, intr, width, height,
        (v_mean2d[g, 0], v_mean2d[g, 1]),
        (v_conic[g, 0], v_conic[g, 1], v_conic[g, 2]),
    )
    for i in range(3):
        v_means[g, i] = vm[i]
        v_log_scales[g, i] = vs[i]
    for i in range(4):
        v_quats[g, i] = vq[i]
