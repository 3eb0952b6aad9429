"""The CUDA kernels of the splatting stages (projection, opacity activation, SH colours, rasterization
forward and backward), each the twin of its stage's CPU kernel with the same arguments.

They sit apart from their stages so that only a device run imports ``numba.cuda``: each stage's
dispatch function imports this module when it is given device arrays, and a CPU run (every rank of a
CPU training job) never loads numba-cuda (about 60 MB per process, measured in
docs/odin-measurements.md, "Memory per process at this size"). The per-Gaussian formulas are the
``@njit`` helpers of ``scalar_math`` and ``sh_math``, which numba-cuda compiles as device functions.
"""

import math

import numba
from numba import cuda

from .constants import ALPHA_MIN, T_MIN, TILE_PIXELS, TILE_SIZE
from .projection_math import project_backward_one, project_one
from .scalar_math import pixel_alpha, pixel_alpha_vjp, pixel_gaussian
from .sh_math import backward_one, forward_one

# The SH and projection bodies read and write arrays, so they are compiled twice: with njit for the CPU
# kernels (in ``sh`` and ``projection``) and here as CUDA device functions (the CUDA simulator cannot pass
# its arrays into @njit code).
sh_forward_device, sh_backward_device = cuda.jit(device=True)(forward_one), cuda.jit(device=True)(backward_one)
project_device = cuda.jit(device=True)(project_one)
project_backward_device = cuda.jit(device=True)(project_backward_one)


@cuda.jit
def sigmoid_cuda(x, out):
    """``activation._sigmoid_cpu``'s twin: out [G] = sigmoid(x [G]) (float32), one thread per entry."""
    g = cuda.grid(1)
    if g < x.shape[0]:
        out[g] = 1.0 / (1.0 + math.exp(-x[g]))


@cuda.jit
def sigmoid_vjp_cuda(y, v_y, out):
    """``activation._sigmoid_vjp_cpu``'s twin: out [G] = dL/dx from y = sigmoid(x) [G] and v_y = dL/dy [G]
    (float32), one thread per entry."""
    g = cuda.grid(1)
    if g < y.shape[0]:
        out[g] = v_y[g] * y[g] * (1.0 - y[g])


@cuda.jit
def project_cuda(means, log_scales, quats, view, intr, width, height, mean2d, conic, depth, radius):
    """``projection._project_cpu``'s twin, one thread per Gaussian: means [G, 3], log_scales [G, 3], quats
    [G, 4] in; mean2d [G, 2], conic [G, 3], depth [G], radius [G] int32 out."""
    g = cuda.grid(1)
    if g >= means.shape[0]:
        return
    project_device(g, means, log_scales, quats, view, intr, width, height, mean2d, conic, depth, radius)


@cuda.jit
def project_backward_cuda(
    means, log_scales, quats, view, intr, width, height, radius, v_mean2d, v_conic, v_means, v_log_scales, v_quats
):
    """``projection._project_backward_cpu``'s twin, one thread per Gaussian (those of radius [G] <= 0 left
    alone): v_mean2d [G, 2] and v_conic [G, 3] in; v_means [G, 3], v_log_scales [G, 3], v_quats [G, 4] out."""
    g = cuda.grid(1)
    if g >= means.shape[0] or radius[g] <= 0:
        return
    project_backward_device(g, means, log_scales, quats, view, intr, width, height, v_mean2d, v_conic, v_means,
                            v_log_scales, v_quats)


@cuda.jit
def sh_to_colors_cuda(means, coeffs, campos, degree, colors):
    """``sh._sh_to_colors_cpu``'s twin, one thread per Gaussian: means [G, 3], coeffs [G, K, 3] in;
    colors [G, 3] out."""
    g = cuda.grid(1)
    if g < means.shape[0]:
        sh_forward_device(g, means, coeffs, campos, degree, colors)


@cuda.jit
def sh_to_colors_backward_cuda(means, coeffs, campos, degree, v_colors, v_means, v_coeffs):
    """``sh._sh_to_colors_backward_cpu``'s twin, one thread per Gaussian: v_colors [G, 3] in; v_means
    [G, 3] and v_coeffs [G, K, 3] (zero-filled) out."""
    g = cuda.grid(1)
    if g < means.shape[0]:
        sh_backward_device(g, means, coeffs, campos, degree, v_colors, v_means, v_coeffs)


@cuda.jit(device=True)
def tile_pixel(width, height):
    """(tile, thread, x, y, inside the image) of this thread of a raster kernel: one block per tile of
    TILE_SIZE x TILE_SIZE pixels, tiles row-major, one thread per pixel."""
    tile = cuda.blockIdx.x
    tid = cuda.threadIdx.x
    tiles_x = (width + TILE_SIZE - 1) // TILE_SIZE
    x = (tile % tiles_x) * TILE_SIZE + tid % TILE_SIZE
    y = (tile // tiles_x) * TILE_SIZE + tid // TILE_SIZE
    return tile, tid, x, y, x < width and y < height


@cuda.jit(device=True)
def stage_gaussian(sh_geom, sh_color, slot, g, mean2d, conic, opacity, colors):
    """Copy Gaussian ``g``'s 2-D geometry (mean, conic, opacity) and colour into shared-memory slot
    ``slot`` (a device function of the CUDA raster kernels, forward and backward)."""
    sh_geom[slot, 0] = mean2d[g, 0]
    sh_geom[slot, 1] = mean2d[g, 1]
    sh_geom[slot, 2] = conic[g, 0]
    sh_geom[slot, 3] = conic[g, 1]
    sh_geom[slot, 4] = conic[g, 2]
    sh_geom[slot, 5] = opacity[g]
    sh_color[slot, 0] = colors[g, 0]
    sh_color[slot, 1] = colors[g, 1]
    sh_color[slot, 2] = colors[g, 2]


@cuda.jit
def rasterize_forward_cuda(
    tile_offsets, gauss_ids, mean2d, conic, opacity, colors, background, width, height, image, final_t, n_contrib
):
    """``rasterize_forward._rasterize_forward_cpu``'s twin: tile_offsets [T + 1], gauss_ids [I] (int32),
    mean2d [G, 2], conic [G, 3], opacity [G], colors [G, 3] in; image [H, W, 3], final_t [H, W], n_contrib
    [H, W] int32 out."""
    # one block per tile, one thread per pixel, Gaussians staged in shared memory in batches
    tile, tid, x, y, inside = tile_pixel(width, height)
    px = x + 0.5
    py = y + 0.5
    sh_geom = cuda.shared.array((TILE_PIXELS, 6), numba.float32)  # mx, my, ca, cb, cc, opacity
    sh_color = cuda.shared.array((TILE_PIXELS, 3), numba.float32)
    start = tile_offsets[tile]
    end = tile_offsets[tile + 1]
    trans = 1.0
    acc0 = 0.0
    acc1 = 0.0
    acc2 = 0.0
    last = 0
    done = not inside
    for batch in range(start, end, TILE_PIXELS):
        # barrier before refilling shared memory; the whole block leaves once every pixel is done
        if cuda.syncthreads_and(numba.int32(1 if done else 0)):
            break
        k = batch + tid
        if k < end:
            stage_gaussian(sh_geom, sh_color, tid, gauss_ids[k], mean2d, conic, opacity, colors)
        cuda.syncthreads()
        count = min(TILE_PIXELS, end - batch)
        j = 0
        while not done and j < count:
            gauss = pixel_gaussian(sh_geom[j, 0], sh_geom[j, 1], sh_geom[j, 2], sh_geom[j, 3], sh_geom[j, 4], px, py)
            alpha = pixel_alpha(sh_geom[j, 5], gauss)
            if alpha >= ALPHA_MIN:
                t_next = trans * (1.0 - alpha)
                if t_next < T_MIN:
                    done = True
                else:
                    weight = alpha * trans
                    acc0 += sh_color[j, 0] * weight
                    acc1 += sh_color[j, 1] * weight
                    acc2 += sh_color[j, 2] * weight
                    trans = t_next
                    last = batch + j - start + 1
            j += 1
    if inside:
        image[y, x, 0] = acc0 + trans * background[0]
        image[y, x, 1] = acc1 + trans * background[1]
        image[y, x, 2] = acc2 + trans * background[2]
        final_t[y, x] = trans
        n_contrib[y, x] = last


@cuda.jit
def rasterize_backward_cuda(
    tile_offsets, gauss_ids, mean2d, conic, opacity, colors, background, width, height,
    final_t, n_contrib, v_image, v_mean2d, v_conic, v_opacity, v_colors,
):
    """``rasterize_backward._rasterize_backward_cpu``'s twin: the forward's arguments and outputs final_t
    [H, W], n_contrib [H, W], and v_image [H, W, 3] in; v_mean2d [G, 2], v_conic [G, 3], v_opacity [G],
    v_colors [G, 3] accumulated into."""
    # one block per tile, one thread per pixel; batches of Gaussians staged back to front
    tile, tid, x, y, inside = tile_pixel(width, height)
    px = x + 0.5
    py = y + 0.5
    sh_geom = cuda.shared.array((TILE_PIXELS, 6), numba.float32)
    sh_color = cuda.shared.array((TILE_PIXELS, 3), numba.float32)
    sh_id = cuda.shared.array(TILE_PIXELS, numba.int32)
    sh_count = cuda.shared.array(1, numba.int32)
    start = tile_offsets[tile]
    trans = 1.0
    last = 0
    gr = 0.0
    gg = 0.0
    gb = 0.0
    if inside:
        trans = final_t[y, x]
        last = n_contrib[y, x]
        gr = v_image[y, x, 0]
        gg = v_image[y, x, 1]
        gb = v_image[y, x, 2]
    rest0 = background[0]
    rest1 = background[1]
    rest2 = background[2]
    if tid == 0:
        sh_count[0] = 0
    cuda.syncthreads()
    cuda.atomic.max(sh_count, 0, last)
    cuda.syncthreads()
    end = start + sh_count[0]
    for batch_end in range(end, start, -TILE_PIXELS):
        cuda.syncthreads()  # everyone is done with the previous batch
        k = batch_end - 1 - tid
        if k >= start:
            g = gauss_ids[k]
            sh_id[tid] = g
            stage_gaussian(sh_geom, sh_color, tid, g, mean2d, conic, opacity, colors)
        cuda.syncthreads()
        for j in range(min(TILE_PIXELS, batch_end - start)):
            if batch_end - 1 - j - start >= last:
                continue
            mx = sh_geom[j, 0]
            my = sh_geom[j, 1]
            ca = sh_geom[j, 2]
            cb = sh_geom[j, 3]
            cc = sh_geom[j, 4]
            op = sh_geom[j, 5]
            gauss = pixel_gaussian(mx, my, ca, cb, cc, px, py)
            alpha = pixel_alpha(op, gauss)
            if alpha < ALPHA_MIN:
                continue
            t_i = trans / (1.0 - alpha)
            c0 = sh_color[j, 0]
            c1 = sh_color[j, 1]
            c2 = sh_color[j, 2]
            g = sh_id[j]
            weight = alpha * t_i
            cuda.atomic.add(v_colors, (g, 0), numba.float32(weight * gr))
            cuda.atomic.add(v_colors, (g, 1), numba.float32(weight * gg))
            cuda.atomic.add(v_colors, (g, 2), numba.float32(weight * gb))
            v_alpha = t_i * ((c0 - rest0) * gr + (c1 - rest1) * gg + (c2 - rest2) * gb)
            rest0 = alpha * c0 + (1.0 - alpha) * rest0
            rest1 = alpha * c1 + (1.0 - alpha) * rest1
            rest2 = alpha * c2 + (1.0 - alpha) * rest2
            trans = t_i
            d0, d1, d2, d3, d4, d5 = pixel_alpha_vjp(mx, my, ca, cb, cc, op, px, py, gauss, v_alpha)
            cuda.atomic.add(v_mean2d, (g, 0), numba.float32(d0))
            cuda.atomic.add(v_mean2d, (g, 1), numba.float32(d1))
            cuda.atomic.add(v_conic, (g, 0), numba.float32(d2))
            cuda.atomic.add(v_conic, (g, 1), numba.float32(d3))
            cuda.atomic.add(v_conic, (g, 2), numba.float32(d4))
            cuda.atomic.add(v_opacity, g, numba.float32(d5))
