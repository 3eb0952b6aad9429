"""Tile binning: which Gaussians touch which 16 x 16 tile, each tile's list in depth order.

Vectorised torch (runs on the tensors' device, CPU or CUDA), so it needs no separate CUDA kernel.
"""

import torch

from .constants import TILE_SIZE


def tile_grid(width: int, height: int):
    """Number of tiles across and down: (ceil(width / 16), ceil(height / 16))."""
    return (width + TILE_SIZE - 1) // TILE_SIZE, (height + TILE_SIZE - 1) // TILE_SIZE


def bin_tiles(
    mean2d: torch.Tensor,  # [G, 2] float32
    radius: torch.Tensor,  # [G] int32, 0 = culled
    depth: torch.Tensor,  # [G] float32 view depth
    width: int,
    height: int,
):
    """Per-tile Gaussian lists: tile_offsets [T + 1] int32 and gauss_ids [I] int32.

    Tile t (row-major over the tile grid) owns gauss_ids[tile_offsets[t]:tile_offsets[t + 1]], the
    Gaussians whose square [mu - r, mu + r] touches it (tiles floor((mu - r)/16) .. ceil((mu + r)/16)
    - 1, clipped to the grid), sorted by depth with ties broken by index.
    """
    tiles_x, tiles_y = tile_grid(width, height)
    device = mean2d.device
    ids = torch.nonzero(radius > 0).flatten()
    ids = ids[torch.sort(depth[ids], stable=True).indices]  # depth order, ties by index
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
