"""Tile binning: which Gaussians touch which 16 x 16 tile, each tile's list in depth order.

The Gaussians on screen are sorted by depth (torch's stable sort, on the tensors' device); then on the CPU a
Numba counting sort puts each one into every tile it touches, tile by tile in that order (two passes, no
array per tile pair but the output). CUDA tensors run the torch twin ``_bin_tiles`` (a second stable sort,
by tile, of every tile pair), which needs no CUDA kernel of its own; both give the same lists.
"""

import numpy as np
import torch
from numba import njit

from .constants import TILE_SIZE


def tile_grid(width: int, height: int):
    """Number of tiles across and down: (ceil(width / 16), ceil(height / 16))."""
    return (width + TILE_SIZE - 1) // TILE_SIZE, (height + TILE_SIZE - 1) // TILE_SIZE


@njit(cache=True)
def _tile_span(x, y, r, tiles_x, tiles_y):
    """Tiles x0 .. x1 - 1 across and y0 .. y1 - 1 down that the square [x - r, x + r] x [y - r, y + r]
    touches (float32 arithmetic, as the twin's), clipped to the grid."""
    size = np.float32(TILE_SIZE)
    x0 = int(min(max(np.floor((x - r) / size), np.float32(0)), np.float32(tiles_x)))
    x1 = int(min(max(np.ceil((x + r) / size), np.float32(0)), np.float32(tiles_x)))
    y0 = int(min(max(np.floor((y - r) / size), np.float32(0)), np.float32(tiles_y)))
    y1 = int(min(max(np.ceil((y + r) / size), np.float32(0)), np.float32(tiles_y)))
    return x0, x1, y0, y1


@njit(cache=True)
def _bin_tiles_cpu(
    ids,  # [n] int64, the Gaussians with radius > 0 in depth order
    mean2d,  # [G, 2] float32
    radius,  # [G] int32
    tiles_x,
    tiles_y,
):
    tile_offsets = np.zeros(tiles_x * tiles_y + 1, np.int64)
    for i in range(ids.shape[0]):  # count each tile's Gaussians
        g = ids[i]
        x0, x1, y0, y1 = _tile_span(mean2d[g, 0], mean2d[g, 1], np.float32(radius[g]), tiles_x, tiles_y)
        for ty in range(y0, y1):
            for tx in range(x0, x1):
                tile_offsets[ty * tiles_x + tx + 1] += 1
    for t in range(tiles_x * tiles_y):
        tile_offsets[t + 1] += tile_offsets[t]
    cursor = tile_offsets[:-1].copy()
    gauss_ids = np.empty(tile_offsets[-1], np.int32)
    for i in range(ids.shape[0]):  # place them, in depth order within every tile
        g = ids[i]
        x0, x1, y0, y1 = _tile_span(mean2d[g, 0], mean2d[g, 1], np.float32(radius[g]), tiles_x, tiles_y)
        for ty in range(y0, y1):
            for tx in range(x0, x1):
                t = ty * tiles_x + tx
                gauss_ids[cursor[t]] = g
                cursor[t] += 1
    return tile_offsets.astype(np.int32), gauss_ids


def _depth_order(radius: torch.Tensor, depth: torch.Tensor) -> torch.Tensor:
    """The Gaussians with radius > 0, [n] int64, by depth, ties by index."""
    ids = torch.nonzero(radius > 0).flatten()
    return ids[torch.sort(depth[ids], stable=True).indices]


def _bin_tiles(mean2d, radius, depth, width, height):
    """Torch twin of :func:`bin_tiles` (same arguments and results, any device)."""
    tiles_x, tiles_y = tile_grid(width, height)
    device = mean2d.device
    ids = _depth_order(radius, depth)
    r = radius[ids].to(mean2d.dtype)
    mx, my = mean2d[ids, 0], mean2d[ids, 1]
    x0 = torch.clamp(torch.floor((mx - r) / TILE_SIZE), 0, tiles_x).to(torch.int64)
    x1 = torch.clamp(torch.ceil((mx + r) / TILE_SIZE), 0, tiles_x).to(torch.int64)
    y0 = torch.clamp(torch.floor((my - r) / TILE_SIZE), 0, tiles_y).to(torch.int64)
    y1 = torch.clamp(torch.ceil((my + r) / TILE_SIZE), 0, tiles_y).to(torch.int64)
    span_x = x1 - x0
    counts = span_x * (y1 - y0)
    total = int(counts.sum())
    owner = torch.repeat_interleave(torch.arange(ids.numel(), device=device), counts)
    first = torch.cumsum(counts, 0) - counts
    within = torch.arange(total, device=device) - first[owner]
    tile = (y0[owner] + within // span_x[owner]) * tiles_x + x0[owner] + within % span_x[owner]
    order = torch.sort(tile, stable=True).indices  # keeps the depth order inside each tile
    gauss_ids = ids[owner[order]].to(torch.int32)
    per_tile = torch.bincount(tile, minlength=tiles_x * tiles_y)
    tile_offsets = torch.zeros(tiles_x * tiles_y + 1, dtype=torch.int32, device=device)
    tile_offsets[1:] = torch.cumsum(per_tile, 0)
    return tile_offsets, gauss_ids


def bin_tiles(
    mean2d: torch.Tensor,  # [G, 2] float32
    radius: torch.Tensor,  # [G] int32, 0 = culled
    depth: torch.Tensor,  # [G] float32 view depth
    width: int,
    height: int,
):
    """Per-tile Gaussian lists: tile_offsets [T + 1] int32 and gauss_ids [I] int32, on the tensors' device.

    Tile t (row-major over the tile grid) owns gauss_ids[tile_offsets[t]:tile_offsets[t + 1]], the
    Gaussians whose square [mu - r, mu + r] touches it (tiles floor((mu - r)/16) .. ceil((mu + r)/16)
    - 1, clipped to the grid), sorted by depth with ties broken by index.
    """
    if mean2d.device.type != "cpu":
        return _bin_tiles(mean2d, radius, depth, width, height)
    ids = _depth_order(radius, depth)
    offsets, gauss_ids = _bin_tiles_cpu(ids.numpy(), mean2d.detach().numpy(), radius.numpy(), *tile_grid(width, height))
    return torch.from_numpy(offsets), torch.from_numpy(gauss_ids)
