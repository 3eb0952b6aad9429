"""Per-Gaussian and per-pixel scalar math shared by the CPU and the CUDA kernels.

These are ``@njit`` functions of scalars and tuples only: the CPU kernels call them directly and the
CUDA kernels call them as device functions (numba-cuda compiles ``@njit`` functions for the GPU), so
the formulas exist once. A 3 x 3 matrix is a row-major 9-tuple, a symmetric 3 x 3 matrix the 6-tuple
(xx, xy, xz, yy, yz, zz), a view matrix the 12-tuple of its top three rows.

Numba's on-disk cache of a kernel does not notice edits to these helpers (they live in another
file): after changing this module, delete kernels/splat/__pycache__/*.nbi and *.nbc.
"""

import math

from numba import njit

from .constants import ALPHA_MAX, EPS_2D, FOV_CLIP, NEAR_PLANE, RADIUS_SIGMAS


@njit(cache=True)
def rotation(qw, qx, qy, qz):
    """Rotation matrix (9-tuple) of the normalised quaternion (w, x, y, z)."""
    return (
        1.0 - 2.0 * (qy * qy + qz * qz), 2.0 * (qx * qy - qw * qz), 2.0 * (qx * qz + qw * qy),
        2.0 * (qx * qy + qw * qz), 1.0 - 2.0 * (qx * qx + qz * qz), 2.0 * (qy * qz - qw * qx),
        2.0 * (qx * qz - qw * qy), 2.0 * (qy * qz + qw * qx), 1.0 - 2.0 * (qx * qx + qy * qy),
    )


@njit(cache=True)
def normalised(qw, qx, qy, qz):
    """(w, x, y, z) / norm and the norm."""
    norm = math.sqrt(qw * qw + qx * qx + qy * qy + qz * qz)
    return qw / norm, qx / norm, qy / norm, qz / norm, norm


@njit(cache=True)
def congruence(m, s):
    """m s m^T for a 3 x 3 matrix m (9-tuple) and a symmetric s (6-tuple); result symmetric."""
    # rows of m s
    a0 = m[0] * s[0] + m[1] * s[1] + m[2] * s[2]
    a1 = m[0] * s[1] + m[1] * s[3] + m[2] * s[4]
    a2 = m[0] * s[2] + m[1] * s[4] + m[2] * s[5]
    b0 = m[3] * s[0] + m[4] * s[1] + m[5] * s[2]
    b1 = m[3] * s[1] + m[4] * s[3] + m[5] * s[4]
    b2 = m[3] * s[2] + m[4] * s[4] + m[5] * s[5]
    c0 = m[6] * s[0] + m[7] * s[1] + m[8] * s[2]
    c1 = m[6] * s[1] + m[7] * s[3] + m[8] * s[4]
    c2 = m[6] * s[2] + m[7] * s[4] + m[8] * s[5]
    return (
        a0 * m[0] + a1 * m[1] + a2 * m[2],
        a0 * m[3] + a1 * m[4] + a2 * m[5],
        a0 * m[6] + a1 * m[7] + a2 * m[8],
        b0 * m[3] + b1 * m[4] + b2 * m[5],
        b0 * m[6] + b1 * m[7] + b2 * m[8],
        c0 * m[6] + c1 * m[7] + c2 * m[8],
    )


@njit(cache=True)
def covariance_world(rot, sx, sy, sz):
    """R S S^T R^T (6-tuple) for rotation rot (9-tuple) and linear scales sx, sy, sz."""
    return congruence(rot, (sx * sx, 0.0, 0.0, sy * sy, 0.0, sz * sz))


@njit(cache=True)
def clip_limits(focal, centre, size):
    """Clamp interval of x/z (or y/z): [-c/f - 0.3 tan, (size - c)/f + 0.3 tan], tan = size / (2 f)."""
    tan_half = 0.5 * size / focal
    return -centre / focal - FOV_CLIP * tan_half, (size - centre) / focal + FOV_CLIP * tan_half


@njit(cache=True)
def camera_point(view, x, y, z):
    """View-space point of a world point (view: 12-tuple of the top rows of the view matrix)."""
    return (
        view[0] * x + view[1] * y + view[2] * z + view[3],
        view[4] * x + view[5] * y + view[6] * z + view[7],
        view[8] * x + view[9] * y + view[10] * z + view[11],
    )


@njit(cache=True)
def covariance_2d(cov_view, tx, ty, tz, intr, width, height):
    """EWA 2D covariance (a, b, c) = J V J^T, before the 0.3 diagonal, and the clamped u, v.

    intr = (fx, fy, cx, cy); J is the pinhole Jacobian at the clamped (u, v) = (x/z, y/z).
    """
    fx, fy, cx, cy = intr
    lo_x, hi_x = clip_limits(fx, cx, width)
    lo_y, hi_y = clip_limits(fy, cy, height)
    u = min(max(tx / tz, lo_x), hi_x)
    v = min(max(ty / tz, lo_y), hi_y)
    j00 = fx / tz
    j02 = -fx * u / tz
    j11 = fy / tz
    j12 = -fy * v / tz
    xx, xy, xz, yy, yz, zz = cov_view
    # J V with J = [[j00, 0, j02], [0, j11, j12]]
    r00 = j00 * xx + j02 * xz
    r01 = j00 * xy + j02 * yz
    r02 = j00 * xz + j02 * zz
    r11 = j11 * yy + j12 * yz
    r12 = j11 * yz + j12 * zz
    return r00 * j00 + r02 * j02, r01 * j11 + r02 * j12, r11 * j11 + r12 * j12, u, v


@njit(cache=True)
def project_gaussian(mean, log_scale, quat, view, intr, width, height):
    """Project one Gaussian: (mean_x, mean_y, conic_a, conic_b, conic_c, depth, radius).

    mean, log_scale: 3-tuples; quat: (w, x, y, z) 4-tuple; view: 12-tuple; intr: (fx, fy, cx, cy).
    radius is 0 (and the other outputs but depth are 0) when the Gaussian is culled: depth <= NEAR,
    non-positive determinant, or its square [mu - r, mu + r] misses the image.
    """
    tx, ty, tz = camera_point(view, mean[0], mean[1], mean[2])
    if not tz > NEAR_PLANE:
        return 0.0, 0.0, 0.0, 0.0, 0.0, tz, 0
    qw, qx, qy, qz, _ = normalised(quat[0], quat[1], quat[2], quat[3])
    cov_world = covariance_world(
        rotation(qw, qx, qy, qz), math.exp(log_scale[0]), math.exp(log_scale[1]), math.exp(log_scale[2])
    )
    cov_view = congruence((view[0], view[1], view[2], view[4], view[5], view[6], view[8], view[9], view[10]), cov_world)
    a, b, c, _, _ = covariance_2d(cov_view, tx, ty, tz, intr, width, height)
    a += EPS_2D
    c += EPS_2D
    det = a * c - b * b
    if not det > 0.0:
        return 0.0, 0.0, 0.0, 0.0, 0.0, tz, 0
    mx = intr[0] * tx / tz + intr[2]
    my = intr[1] * ty / tz + intr[3]
    mid = 0.5 * (a + c)
    lam = mid + math.sqrt(max(mid * mid - det, 0.0))
    r = math.ceil(RADIUS_SIGMAS * math.sqrt(lam))
    if not (mx + r > 0.0 and mx - r < width and my + r > 0.0 and my - r < height and r > 0.0):
        return 0.0, 0.0, 0.0, 0.0, 0.0, tz, 0
    return mx, my, c / det, -b / det, a / det, tz, int(r)


@njit(cache=True)
def project_gaussian_vjp(mean, log_scale, quat, view, intr, width, height, v_mean2d, v_conic):
    """Gradients of one visible Gaussian's mean (3), log-scale (3) and quaternion (4), as tuples.

    v_mean2d = dL/d(mean_x, mean_y), v_conic = dL/d(conic_a, conic_b, conic_c) with the conic used as
    [[a, b], [b, c]]; the chain goes through the inverse, the EWA covariance (with the clamped
    Jacobian), the world covariance R S S^T R^T, the quaternion normalisation and the camera transform.
    """
    fx, fy, cx, cy = intr
    rv = (view[0], view[1], view[2], view[4], view[5], view[6], view[8], view[9], view[10])
    tx, ty, tz = camera_point(view, mean[0], mean[1], mean[2])
    qw, qx, qy, qz, qnorm = normalised(quat[0], quat[1], quat[2], quat[3])
    rot = rotation(qw, qx, qy, qz)
    sx, sy, sz = math.exp(log_scale[0]), math.exp(log_scale[1]), math.exp(log_scale[2])
    cov_view = congruence(rv, covariance_world(rot, sx, sy, sz))
    a, b, c, u, v = covariance_2d(cov_view, tx, ty, tz, intr, width, height)
    a += EPS_2D
    c += EPS_2D
    det = a * c - b * b
    ca, cb, cc = c / det, -b / det, a / det

    # conic = inv(Sigma2): dL/dSigma2 = -C G C with G = [[ga, gb/2], [gb/2, gc]]
    ga, gb, gc = v_conic[0], 0.5 * v_conic[1], v_conic[2]
    p00 = ga * ca + gb * cb
    p01 = ga * cb + gb * cc
    p10 = gb * ca + gc * cb
    p11 = gb * cb + gc * cc
    s00 = -(ca * p00 + cb * p10)
    s01 = -(ca * p01 + cb * p11)
    s11 = -(cb * p01 + cc * p11)

    # Sigma2 = J V J^T: dL/dV = J^T S J, dL/dJ = 2 S J V
    lo_x, hi_x = clip_limits(fx, cx, width)
    lo_y, hi_y = clip_limits(fy, cy, height)
    j00, j02, j11, j12 = fx / tz, -fx * u / tz, fy / tz, -fy * v / tz
    xx, xy, xz, yy, yz, zz = cov_view
    # S J (2 x 3), J = [[j00, 0, j02], [0, j11, j12]]
    sj00, sj01, sj02 = s00 * j00, s01 * j11, s00 * j02 + s01 * j12
    sj10, sj11, sj12 = s01 * j00, s11 * j11, s01 * j02 + s11 * j12
    v_view = (
        j00 * sj00,
        j00 * sj01,
        j00 * sj02,
        j11 * sj11,
        j11 * sj12,
        j02 * sj02 + j12 * sj12,
    )
    # only J00, J02, J11, J12 depend on the point: dL/dJ_ik = 2 sum_j (S J)_ij V_jk
    vj00 = 2.0 * (sj00 * xx + sj01 * xy + sj02 * xz)
    vj02 = 2.0 * (sj00 * xz + sj01 * yz + sj02 * zz)
    vj11 = 2.0 * (sj10 * xy + sj11 * yy + sj12 * yz)
    vj12 = 2.0 * (sj10 * xz + sj11 * yz + sj12 * zz)

    # view-space point: through the mean2d and the Jacobian (u, v clamped to the field of view)
    tz2 = tz * tz
    v_tx = v_mean2d[0] * fx / tz
    v_ty = v_mean2d[1] * fy / tz
    v_tz = -(v_mean2d[0] * fx * tx + v_mean2d[1] * fy * ty) / tz2
    v_tz += -vj00 * fx / tz2 - vj11 * fy / tz2 + vj02 * fx * u / tz2 + vj12 * fy * v / tz2
    v_u = -vj02 * fx / tz
    v_v = -vj12 * fy / tz
    if lo_x <= tx / tz <= hi_x:
        v_tx += v_u / tz
        v_tz -= v_u * tx / tz2
    if lo_y <= ty / tz <= hi_y:
        v_ty += v_v / tz
        v_tz -= v_v * ty / tz2
    v_mean = (
        rv[0] * v_tx + rv[3] * v_ty + rv[6] * v_tz,
        rv[1] * v_tx + rv[4] * v_ty + rv[7] * v_tz,
        rv[2] * v_tx + rv[5] * v_ty + rv[8] * v_tz,
    )

    # V = W Sigma3 W^T: dL/dSigma3 = W^T (dL/dV) W (a congruence by W^T)
    rvt = (rv[0], rv[3], rv[6], rv[1], rv[4], rv[7], rv[2], rv[5], rv[8])
    g = congruence(rvt, v_view)
    # Sigma3 = M M^T, M = R diag(s): dL/dM = 2 G M
    m = (rot[0] * sx, rot[1] * sy, rot[2] * sz, rot[3] * sx, rot[4] * sy, rot[5] * sz,
         rot[6] * sx, rot[7] * sy, rot[8] * sz)
    gm0 = 2.0 * (g[0] * m[0] + g[1] * m[3] + g[2] * m[6])
    gm1 = 2.0 * (g[0] * m[1] + g[1] * m[4] + g[2] * m[7])
    gm2 = 2.0 * (g[0] * m[2] + g[1] * m[5] + g[2] * m[8])
    gm3 = 2.0 * (g[1] * m[0] + g[3] * m[3] + g[4] * m[6])
    gm4 = 2.0 * (g[1] * m[1] + g[3] * m[4] + g[4] * m[7])
    gm5 = 2.0 * (g[1] * m[2] + g[3] * m[5] + g[4] * m[8])
    gm6 = 2.0 * (g[2] * m[0] + g[4] * m[3] + g[5] * m[6])
    gm7 = 2.0 * (g[2] * m[1] + g[4] * m[4] + g[5] * m[7])
    gm8 = 2.0 * (g[2] * m[2] + g[4] * m[5] + g[5] * m[8])
    # log-scales: dL/ds_j = sum_i dL/dM_ij R_ij, times s_j for the log
    v_scale = (
        (gm0 * rot[0] + gm3 * rot[3] + gm6 * rot[6]) * sx,
        (gm1 * rot[1] + gm4 * rot[4] + gm7 * rot[7]) * sy,
        (gm2 * rot[2] + gm5 * rot[5] + gm8 * rot[8]) * sz,
    )
    # rotation: dL/dR_ij = dL/dM_ij s_j, then through R(q) and the normalisation
    r00, r01, r02 = gm0 * sx, gm1 * sy, gm2 * sz
    r10, r11, r12 = gm3 * sx, gm4 * sy, gm5 * sz
    r20, r21, r22 = gm6 * sx, gm7 * sy, gm8 * sz
    nw = 2.0 * (qz * (r10 - r01) + qy * (r02 - r20) + qx * (r21 - r12))
    nx = 2.0 * (qy * (r01 + r10) + qz * (r02 + r20) + qw * (r21 - r12)) - 4.0 * qx * (r11 + r22)
    ny = 2.0 * (qx * (r01 + r10) + qw * (r02 - r20) + qz * (r12 + r21)) - 4.0 * qy * (r00 + r22)
    nz = 2.0 * (qw * (r10 - r01) + qx * (r02 + r20) + qy * (r12 + r21)) - 4.0 * qz * (r00 + r11)
    dot = qw * nw + qx * nx + qy * ny + qz * nz
    v_quat = ((nw - qw * dot) / qnorm, (nx - qx * dot) / qnorm, (ny - qy * dot) / qnorm, (nz - qz * dot) / qnorm)
    return v_mean, v_scale, v_quat


@njit(cache=True)
def pixel_gaussian(mx, my, ca, cb, cc, px, py):
    """exp(-0.5 d^T C d) at the pixel centre (px, py), d = mu - p, C = [[ca, cb], [cb, cc]]."""
    dx = mx - px
    dy = my - py
    return math.exp(-0.5 * (ca * dx * dx + cc * dy * dy) - cb * dx * dy)


@njit(cache=True)
def pixel_alpha(opacity, gauss):
    """alpha = min(ALPHA_MAX, opacity * gauss)."""
    return min(ALPHA_MAX, opacity * gauss)


@njit(cache=True)
def pixel_alpha_vjp(mx, my, ca, cb, cc, opacity, px, py, gauss, v_alpha):
    """dL/d(mean_x, mean_y, conic_a, conic_b, conic_c, opacity) of one pixel's alpha given dL/dalpha
    (gauss = pixel_gaussian at that pixel). Zero where alpha is clamped at ALPHA_MAX."""
    if opacity * gauss > ALPHA_MAX:
        return 0.0, 0.0, 0.0, 0.0, 0.0, 0.0
    dx = mx - px
    dy = my - py
    v_power = opacity * gauss * v_alpha
    return (
        -(ca * dx + cb * dy) * v_power,
        -(cc * dy + cb * dx) * v_power,
        -0.5 * dx * dx * v_power,
        -dx * dy * v_power,
        -0.5 * dy * dy * v_power,
        gauss * v_alpha,
    )


@njit(cache=True)
def pixel_extent(ca, cb, cc, opacity):
    """Half-widths (hx, hy) of a box around the mean outside which alpha < ALPHA_MIN for sure.

    alpha >= 1/255 needs d^T C d <= 2 ln(255 opacity); that ellipse lies within |dx| <= sqrt(e Sxx),
    |dy| <= sqrt(e Syy) with S = C^-1. One pixel of margin absorbs rounding. (-1, -1) when the
    Gaussian cannot reach 1/255 anywhere.
    """
    level = 255.0 * opacity
    det = ca * cc - cb * cb
    if not level > 1.0 or not det > 0.0:
        return -1.0, -1.0
    e = 2.0 * math.log(level)
    return math.sqrt(e * cc / det) + 1.0, math.sqrt(e * ca / det) + 1.0


@njit(cache=True)
def pixel_span(centre, half_width, origin, size):
    """Local pixel indices [lo, hi) of a tile row/column (pixels origin .. origin + size - 1) whose
    centres lie within centre +- half_width."""
    lo = max(0.0, math.ceil(centre - half_width - 0.5 - origin))
    hi = min(float(size), math.floor(centre + half_width - 0.5 - origin) + 1.0)
    return int(lo), int(max(lo, hi))
