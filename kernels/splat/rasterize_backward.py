"""Rasterization backward: gradients of mean2d, conic, opacity and colour from dL/dimage.

Per pixel the contributors are revisited back to front, recovering T_i = T_{i+1} / (1 - alpha_i)
from the saved final transmittance, with R the colour seen behind Gaussian i (background included):
dL/dc_i = alpha_i T_i dL/dC and dL/dalpha_i = T_i (c_i - R_i) . dL/dC; the alpha chain is
``scalar_math.pixel_alpha_vjp``. The CPU kernel works tile-parallel into per-intersection rows and
reduces them serially (deterministic); the CUDA kernel adds with atomics.
"""

import numpy as np
from numba import njit, prange

from .arrays import check_array, on_device, zeros
from .constants import ALPHA_MIN, TILE_SIZE
from .rasterize_forward import THREADS_PER_BLOCK, check_raster_inputs
from .scalar_math import pixel_alpha, pixel_alpha_vjp, pixel_extent, pixel_gaussian, pixel_span


@njit(parallel=True, cache=True, error_model="numpy")
def _rasterize_backward_cpu(
    tile_offsets,  # [T + 1] int32
    gauss_ids,  # [I] int32
    mean2d,  # [G, 2] float32
    conic,  # [G, 3] float32
    opacity,  # [G] float32, activated
    colors,  # [G, 3] float32
    background,  # (r, g, b)
    width,
    height,
    final_t,  # [H, W] float32 from the forward pass
    n_contrib,  # [H, W] int32 from the forward pass
    v_image,  # [H, W, 3] float32, dL/dimage
    v_mean2d,  # [G, 2] float32, accumulated into
    v_conic,  # [G, 3] float32, accumulated into
    v_opacity,  # [G] float32, accumulated into
    v_colors,  # [G, 3] float32, accumulated into
):
    tiles_x = (width + TILE_SIZE - 1) // TILE_SIZE
    per_isect = np.zeros((gauss_ids.shape[0], 9))  # mean2d (2), conic (3), opacity, colour (3)
    for tile in prange(tile_offsets.shape[0] - 1):
        x0 = (tile % tiles_x) * TILE_SIZE
        y0 = (tile // tiles_x) * TILE_SIZE
        bw = min(TILE_SIZE, width - x0)
        bh = min(TILE_SIZE, height - y0)
        start = tile_offsets[tile]
        trans = np.empty((bh, bw))
        rest = np.empty((bh, bw, 3))
        count = 0
        for j in range(bh):
            for i in range(bw):
                trans[j, i] = final_t[y0 + j, x0 + i]
                count = max(count, n_contrib[y0 + j, x0 + i])
                for ch in range(3):
                    rest[j, i, ch] = background[ch]
        for local in range(count - 1, -1, -1):
            k = start + local
            g = gauss_ids[k]
            mx, my, op = mean2d[g, 0], mean2d[g, 1], opacity[g]
            ca, cb, cc = conic[g, 0], conic[g, 1], conic[g, 2]
            hx, hy = pixel_extent(ca, cb, cc, op)
            if hx < 0.0:
                continue
            xa, xb = pixel_span(mx, hx, x0, bw)
            ya, yb = pixel_span(my, hy, y0, bh)
            c0, c1, c2 = colors[g, 0], colors[g, 1], colors[g, 2]
            a0 = a1 = a2 = a3 = a4 = a5 = a6 = a7 = a8 = 0.0
            for j in range(ya, yb):
                for i in range(xa, xb):
                    if local >= n_contrib[y0 + j, x0 + i]:
                        continue
                    px = x0 + i + 0.5
                    py = y0 + j + 0.5
                    gauss = pixel_gaussian(mx, my, ca, cb, cc, px, py)
                    alpha = pixel_alpha(op, gauss)
                    if alpha < ALPHA_MIN:
                        continue
                    t_i = trans[j, i] / (1.0 - alpha)
                    gr, gg, gb = v_image[y0 + j, x0 + i, 0], v_image[y0 + j, x0 + i, 1], v_image[y0 + j, x0 + i, 2]
                    weight = alpha * t_i
                    a6 += weight * gr
                    a7 += weight * gg
                    a8 += weight * gb
                    v_alpha = t_i * ((c0 - rest[j, i, 0]) * gr + (c1 - rest[j, i, 1]) * gg + (c2 - rest[j, i, 2]) * gb)
                    rest[j, i, 0] = alpha * c0 + (1.0 - alpha) * rest[j, i, 0]
                    rest[j, i, 1] = alpha * c1 + (1.0 - alpha) * rest[j, i, 1]
                    rest[j, i, 2] = alpha * c2 + (1.0 - alpha) * rest[j, i, 2]
                    trans[j, i] = t_i
                    d0, d1, d2, d3, d4, d5 = pixel_alpha_vjp(mx, my, ca, cb, cc, op, px, py, gauss, v_alpha)
                    a0 += d0
                    a1 += d1
                    a2 += d2
                    a3 += d3
                    a4 += d4
                    a5 += d5
            per_isect[k, 0] = a0
            per_isect[k, 1] = a1
            per_isect[k, 2] = a2
            per_isect[k, 3] = a3
            per_isect[k, 4] = a4
            per_isect[k, 5] = a5
            per_isect[k, 6] = a6
            per_isect[k, 7] = a7
            per_isect[k, 8] = a8
    for k in range(gauss_ids.shape[0]):
        g = gauss_ids[k]
        v_mean2d[g, 0] += per_isect[k, 0]
        v_mean2d[g, 1] += per_isect[k, 1]
        v_conic[g, 0] += per_isect[k, 2]
        v_conic[g, 1] += per_isect[k, 3]
        v_conic[g, 2] += per_isect[k, 4]
        v_opacity[g] += per_isect[k, 5]
        v_colors[g, 0] += per_isect[k, 6]
        v_colors[g, 1] += per_isect[k, 7]
        v_colors[g, 2] += per_isect[k, 8]


def rasterize_backward(
    tile_offsets,  # [T + 1] int32
    gauss_ids,  # [I] int32
    mean2d,  # [G, 2] float32
    conic,  # [G, 3] float32
    opacity,  # [G] float32, activated
    colors,  # [G, 3] float32
    background,  # (r, g, b) floats
    width: int,
    height: int,
    final_t,  # [H, W] float32 from rasterize_forward
    n_contrib,  # [H, W] int32 from rasterize_forward
    v_image,  # [H, W, 3] float32, dL/dimage
):
    """Backward of ``rasterize_forward``: returns dL/dmean2d [G, 2], dL/dconic [G, 3],
    dL/dopacity [G] (activated opacity) and dL/dcolors [G, 3], all float32."""
    check_raster_inputs(tile_offsets, gauss_ids, mean2d, conic, opacity, colors, background, width, height)
    check_array("final_t", final_t, (height, width), np.float32)
    check_array("n_contrib", n_contrib, (height, width), np.int32)
    check_array("v_image", v_image, (height, width, 3), np.float32)
    device = on_device((tile_offsets, gauss_ids, mean2d, conic, opacity, colors, final_t, n_contrib, v_image))
    count = mean2d.shape[0]
    v_mean2d = zeros((count, 2), np.float32, device)
    v_conic = zeros((count, 3), np.float32, device)
    v_opacity = zeros((count,), np.float32, device)
    v_colors = zeros((count, 3), np.float32, device)
    args = (tile_offsets, gauss_ids, mean2d, conic, opacity, colors, tuple(float(b) for b in background),
            int(width), int(height), final_t, n_contrib, v_image, v_mean2d, v_conic, v_opacity, v_colors)
    if device:
        from .cuda_kernels import rasterize_backward_cuda

        rasterize_backward_cuda[tile_offsets.shape[0] - 1, THREADS_PER_BLOCK](*args)
    else:
        _rasterize_backward_cpu(*args)
    return v_mean2d, v_conic, v_opacity, v_colors
