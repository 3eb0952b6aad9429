"""Rasterization forward: front-to-back alpha compositing per 16 x 16 tile (CPU and CUDA kernels).

Per pixel, the tile's depth-sorted Gaussians are composited with alpha = min(0.99, o * G), Gaussians
with alpha < 1/255 skipped, stopping before T would drop below 1e-4; C = sum c a T + T_final * bg.
It saves what the backward pass needs: the final transmittance and the number of list entries up to
the last contributing Gaussian, per pixel.
"""

import numpy as np
from numba import njit, prange

from .arrays import check_array, check_size, empty, on_device
from .binning import tile_grid
from .constants import ALPHA_MIN, T_MIN, TILE_PIXELS, TILE_SIZE
from .scalar_math import pixel_alpha, pixel_extent, pixel_gaussian, pixel_span

THREADS_PER_BLOCK = TILE_PIXELS  # one thread per pixel of a tile


@njit(parallel=True, cache=True, error_model="numpy")
def _rasterize_forward_cpu(
    tile_offsets,  # [T + 1] int32
    gauss_ids,  # [I] int32, per tile in depth order
    mean2d,  # [G, 2] float32
    conic,  # [G, 3] float32
    opacity,  # [G] float32, activated (sigmoid)
    colors,  # [G, 3] float32
    background,  # (r, g, b)
    width,
    height,
    image,  # [H, W, 3] float32 out
    final_t,  # [H, W] float32 out
    n_contrib,  # [H, W] int32 out
):
    tiles_x = (width + TILE_SIZE - 1) // TILE_SIZE
    for tile in prange(tile_offsets.shape[0] - 1):
        x0 = (tile % tiles_x) * TILE_SIZE
        y0 = (tile // tiles_x) * TILE_SIZE
        bw = min(TILE_SIZE, width - x0)
        bh = min(TILE_SIZE, height - y0)
        trans = np.ones((bh, bw))
        rgb = np.zeros((bh, bw, 3))
        last = np.zeros((bh, bw), np.int32)
        done = np.zeros((bh, bw), np.bool_)
        active = bh * bw
        start = tile_offsets[tile]
        # Gaussian-major: each Gaussian visits only the pixels of its 1/255 box, pixels keep state
        for k in range(start, tile_offsets[tile + 1]):
            if active == 0:
                break
            g = gauss_ids[k]
            mx, my, op = mean2d[g, 0], mean2d[g, 1], opacity[g]
            ca, cb, cc = conic[g, 0], conic[g, 1], conic[g, 2]
            hx, hy = pixel_extent(ca, cb, cc, op)
            if hx < 0.0:
                continue
            xa, xb = pixel_span(mx, hx, x0, bw)
            ya, yb = pixel_span(my, hy, y0, bh)
            for j in range(ya, yb):
                for i in range(xa, xb):
                    if done[j, i]:
                        continue
                    alpha = pixel_alpha(op, pixel_gaussian(mx, my, ca, cb, cc, x0 + i + 0.5, y0 + j + 0.5))
                    if alpha < ALPHA_MIN:
                        continue
                    t_next = trans[j, i] * (1.0 - alpha)
                    if t_next < T_MIN:
                        done[j, i] = True
                        active -= 1
                        continue
                    weight = alpha * trans[j, i]
                    for ch in range(3):
                        rgb[j, i, ch] += colors[g, ch] * weight
                    trans[j, i] = t_next
                    last[j, i] = k - start + 1
        for j in range(bh):
            for i in range(bw):
                for ch in range(3):
                    image[y0 + j, x0 + i, ch] = rgb[j, i, ch] + trans[j, i] * background[ch]
                final_t[y0 + j, x0 + i] = trans[j, i]
                n_contrib[y0 + j, x0 + i] = last[j, i]


def check_raster_inputs(tile_offsets, gauss_ids, mean2d, conic, opacity, colors, background, width, height):
    """ValueError unless the rasterizer inputs agree in shape and dtype; returns the tile count."""
    check_size(width, height)
    tiles_x, tiles_y = tile_grid(width, height)
    check_array("tile_offsets", tile_offsets, (tiles_x * tiles_y + 1,), np.int32)
    check_array("gauss_ids", gauss_ids, (None,), np.int32)
    check_array("mean2d", mean2d, (None, 2), np.float32)
    count = mean2d.shape[0]
    check_array("conic", conic, (count, 3), np.float32)
    check_array("opacity", opacity, (count,), np.float32)
    check_array("colors", colors, (count, 3), np.float32)
    if len(background) != 3:
        raise ValueError(f"background must be 3 numbers, got {len(background)}")
    return tiles_x * tiles_y


def rasterize_forward(
    tile_offsets,  # [T + 1] int32, from bin_tiles
    gauss_ids,  # [I] int32, from bin_tiles
    mean2d,  # [G, 2] float32
    conic,  # [G, 3] float32
    opacity,  # [G] float32, activated
    colors,  # [G, 3] float32
    background,  # (r, g, b) floats
    width: int,
    height: int,
):
    """Composite the binned Gaussians: returns image [H, W, 3] float32, final_t [H, W] float32
    (transmittance left after the last contributor) and n_contrib [H, W] int32 (list entries of the
    pixel's tile up to and including its last contributor). CPU kernel for NumPy inputs, CUDA for
    device arrays."""
    tiles = check_raster_inputs(tile_offsets, gauss_ids, mean2d, conic, opacity, colors, background, width, height)
    device = on_device((tile_offsets, gauss_ids, mean2d, conic, opacity, colors))
    image = empty((height, width, 3), np.float32, device)
    final_t = empty((height, width), np.float32, device)
    n_contrib = empty((height, width), np.int32, device)
    args = (tile_offsets, gauss_ids, mean2d, conic, opacity, colors, tuple(float(b) for b in background),
            int(width), int(height), image, final_t, n_contrib)
    if device:
        from .cuda_kernels import rasterize_forward_cuda

        rasterize_forward_cuda[tiles, THREADS_PER_BLOCK](*args)
    else:
        _rasterize_forward_cpu(*args)
    return image, final_t, n_contrib
