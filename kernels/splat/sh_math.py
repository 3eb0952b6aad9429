"""The per-Gaussian SH formulas of ``sh`` (basis, its gradient, the view direction, one Gaussian's colour
and its backward), shared by the CPU kernels (``sh``, compiled with njit) and the CUDA kernels
(``cuda_kernels``, compiled as device functions), so that neither module imports the other.
"""

import math

from numba import njit

#: smallest |mean - camera centre| divided by (as torch.nn.functional.normalize's eps)
DIR_EPS = 1e-12

SH_C0 = 0.28209479177387814
SH_C1 = 0.4886025119029199
SH_C2 = (1.0925484305920792, -1.0925484305920792, 0.31539156525252005, -1.0925484305920792, 0.5462742152960396)
SH_C3 = (-0.5900435899266435, 2.890611442640554, -0.4570457994644658, 0.3731763325901154,
         -0.4570457994644658, 1.445305721320277, -0.5900435899266435)


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


def forward_one(g, means, coeffs, campos, degree, colors):
    """Colour of Gaussian g: max(sum_k b_k c_k + 0.5, 0) per channel, into colors [G, 3], from means [G, 3]
    and coeffs [G, K, 3] (the first (degree + 1)^2 of the K bases)."""
    bases = (degree + 1) * (degree + 1)
    x, y, z, _ = view_direction(means[g, 0], means[g, 1], means[g, 2], campos)
    b = sh_basis(degree, x, y, z)
    for ch in range(3):
        acc = 0.0
        for k in range(bases):
            acc += b[k] * coeffs[g, k, ch]
        colors[g, ch] = max(acc + 0.5, 0.0)


def backward_one(g, means, coeffs, campos, degree, v_colors, v_means, v_coeffs):
    """Gradients of Gaussian g: per channel v = dL/dcolour (0 where clamped), dL/dc_k = b_k v and
    dL/ddirection = sum_k (sum_ch v c_k) db_k, then through the normalisation to the mean. means [G, 3],
    coeffs [G, K, 3] and v_colors [G, 3] in; v_means [G, 3] and v_coeffs [G, K, 3] out."""
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
