"""Synthetic ground-truth scenes for training (the logic behind ``pregel generate-scene``).

Two layouts, both seeded and deterministic (world z is up):

* ``objects``: a few textured objects (sphere, box, cylinder, cone) made of Gaussians standing on a
  checkered ground disc; cameras on a ring around them, looking at the centre.
* ``city``: a grid of city blocks, each a small cluster (a building of random height on its own ground
  patch) spread over a large area; cameras fly along the streets low over it, looking ahead and down,
  so that each camera sees only a small part of the scene. With ``views_per_spot`` K > 1 the flight
  stops at C / K spots and takes K views side by side at each (``SPOT_STEP`` apart across the street,
  looking the same way, the spot's first view in the middle), so that with K = 8 every held-out camera
  (each spot's first) sees what the seven training cameras around it see.

Images are rendered from the ground truth with ``kernels.splat.render`` (black background), each from
the Gaussians of the k-d cells that may touch it (``odin_sched.scenes.visibility``, the test the
trainers cull with: the same pixels; at 10,000,000 Gaussians projecting every one for each of 48
images took 47 s of the 56). The
initial point cloud for training imitates structure from motion: a random subsample of the
ground-truth means with positional noise, coloured with the ground-truth colours plus noise. Every
8th camera (index 0, 8, 16, ...) is held out of training for evaluation.
"""
import math

import numpy as np
import torch

from odin_sched.scenes.cells import cut_cells
from odin_sched.scenes.scene_io import HOLDOUT_EVERY, Scene
from odin_sched.scenes.visibility import Margin, predict_visible_cells
from pregel.errors import InputError
from pregel.memory import require_memory
from pregel.progress import Progress

LAYOUTS = ("objects", "city")
FOCAL_FACTOR = 0.9  # focal length in units of the image width (about 58 degrees field of view)
SPOT_STEP = 0.4  # world units between the side-by-side views of one city spot (streets are 4 wide)
RENDER_CELLS = 1024  # k-d cells whose boxes decide which Gaussians an image renders
CITY_CHUNK = 2048  # city blocks built at once (bounds the temporary arrays)
SHAPES = {"means": (3,), "scales": (3,), "quats": (4,), "opacities": (), "colors": (3,)}  # a Gaussian's arrays


def _uniform(unit, low, high):
    """``low + (high - low) * unit``: numpy's ``Generator.uniform`` applied to draws ``unit`` of
    ``Generator.random`` (the two consume the stream alike)."""
    return low + (high - low) * unit


def _surfel_shapes(points, colors, spacing, scale_unit, opacity_unit, quat_normal):
    """Gaussians at surface points [n, 3] with colours [n, 3]: isotropic-ish, sized to overlap neighbours
    ``spacing`` (scalar or [n, 1]) apart, from the generator's draws: scale_unit [n, 3] and opacity_unit [n]
    uniform in [0, 1), quat_normal [n, 4] standard normal."""
    scales = np.log(spacing * _uniform(scale_unit, 0.45, 0.7))
    opacity = _uniform(opacity_unit, 0.85, 0.98)
    return {
        "means": points,
        "scales": scales,
        "quats": quat_normal / np.linalg.norm(quat_normal, axis=1, keepdims=True),
        "opacities": np.log(opacity / (1.0 - opacity)),
        "colors": np.clip(colors, 0.0, 1.0),
    }


def _surfels(points, colors, spacing, rng):
    """Gaussians at surface points: ``_surfel_shapes`` with its draws taken from ``rng``."""
    n = points.shape[0]
    scale_unit, opacity_unit = rng.random((n, 3)), rng.random(n)
    return _surfel_shapes(points, colors, spacing, scale_unit, opacity_unit, rng.standard_normal((n, 4)))


def _concat(parts):
    return {k: np.concatenate([p[k] for p in parts]).astype(np.float32) for k in parts[0]}


def _ground_points(center, size, palette, cell, xy_unit, noise):
    """Points and colours [n, 3] of a checkered square of side ``size`` at z = 0 around ``center`` ([2] or
    [n, 2]), from draws xy_unit [n, 2] uniform in [0, 1) and noise [n, 3] standard normal."""
    xy = center + _uniform(xy_unit, -0.5 * size, 0.5 * size)
    checker = (np.floor(xy[:, 0] / cell) + np.floor(xy[:, 1] / cell)).astype(int) % 2
    pts = np.column_stack([xy, np.zeros(len(xy))])
    return pts, palette[checker] + (0.0 + 0.02 * noise)


def _ground(n, center, size, palette, cell, rng):
    """Checkered square of side ``size`` at z = 0 around ``center`` (x, y)."""
    xy_unit = rng.random((n, 2))
    pts, colors = _ground_points(center, size, palette, cell, xy_unit, rng.standard_normal((n, 3)))
    return pts, colors, math.sqrt(size * size / n)


def _box_areas(half):
    """Face areas [..., 6] of boxes with half sides ``half`` [..., 3] (faces -x, +x, -y, +y, -z, +z)."""
    h0, h1, h2 = half[..., 0], half[..., 1], half[..., 2]
    return np.stack([h1 * h2, h1 * h2, h0 * h2, h0 * h2, h0 * h1, h0 * h1], axis=-1)


def _box_points(half, face, u_unit):
    """Offsets [n, 3] of points on the surfaces of axis-aligned boxes (half sides ``half`` [3] or [n, 3])
    from the centres, on faces ``face`` [n], and their vertical stripe's number [n] (int), from draws
    u_unit [n, 3] uniform in [0, 1)."""
    n = len(face)
    half = np.broadcast_to(half, (n, 3))
    u = _uniform(u_unit, -1, 1) * half
    axis, sign = face // 2, np.where(face % 2 == 0, -1.0, 1.0)
    u[np.arange(n), axis] = sign * half[np.arange(n), axis]
    return u, np.floor((u[:, 0] + u[:, 1]) / (0.5 * np.maximum(half[:, 0], half[:, 1]))).astype(int)


def _sphere(n, center, radius, palette, rng):
    d = rng.standard_normal((n, 3))
    d /= np.linalg.norm(d, axis=1, keepdims=True)
    band = (np.floor((d[:, 2] + 1.0) * 2.5)).astype(int) % len(palette)  # latitude bands
    return center + radius * d, palette[band], math.sqrt(4 * math.pi * radius ** 2 / n)


def _box(n, center, half, palette, rng):
    """Points on the surface of an axis-aligned box (faces picked by area), vertical stripes."""
    areas = _box_areas(half)
    face = rng.choice(6, size=n, p=areas / areas.sum())
    u, stripe = _box_points(half, face, rng.random((n, 3)))
    return center + u, palette[stripe % len(palette)], math.sqrt(4 * areas.sum() / n)


def _cylinder(n, center, radius, height, palette, rng, cone=False):
    """Side surface of a vertical cylinder (or cone) standing on z = center z, horizontal rings."""
    h = height * (1 - np.sqrt(rng.uniform(0, 1, n))) if cone else rng.uniform(0, height, n)
    r = radius * (1 - h / height) if cone else np.full(n, radius)
    phi = rng.uniform(0, 2 * math.pi, n)
    pts = center + np.column_stack([r * np.cos(phi), r * np.sin(phi), h])
    ring = (np.floor(4 * h / height).astype(int) + (phi > math.pi)) % len(palette)
    area = math.pi * radius * (math.hypot(radius, height) if cone else 2 * height)
    return pts, palette[ring], math.sqrt(area / n)


def _look_at(eye, target, up=(0.0, 0.0, 1.0)):
    """World-to-camera matrix [4, 4] of a camera at ``eye`` looking at ``target`` (OpenCV axes:
    x right, y down, z forward)."""
    forward = target - eye
    forward /= np.linalg.norm(forward)
    right = np.cross(forward, np.asarray(up))
    right /= np.linalg.norm(right)
    down = np.cross(forward, right)
    rot = np.stack([right, down, forward])
    view = np.eye(4)
    view[:3, :3] = rot
    view[:3, 3] = -rot @ eye
    return view


def _objects_layout(g, c, rng):
    palettes = [np.array(p, float) for p in (
        [[0.85, 0.2, 0.15], [0.95, 0.8, 0.2], [0.2, 0.3, 0.8]],
        [[0.2, 0.7, 0.3], [0.9, 0.9, 0.85]],
        [[0.6, 0.3, 0.7], [0.95, 0.55, 0.1], [0.15, 0.6, 0.65]],
        [[0.9, 0.45, 0.55], [0.3, 0.25, 0.2]],
    )]
    ground_palette = np.array([[0.45, 0.45, 0.4], [0.7, 0.68, 0.6]])
    n_ground = int(0.4 * g)
    n_obj = np.full(4, (g - n_ground) // 4)
    n_obj[: (g - n_ground) % 4] += 1
    shapes = [
        _sphere(n_obj[0], np.array([0.9, 0.6, 0.8]), 0.8, palettes[0], rng),
        _box(n_obj[1], np.array([-1.0, 0.7, 0.6]), np.array([0.6, 0.5, 0.6]), palettes[1], rng),
        _cylinder(n_obj[2], np.array([-0.6, -1.1, 0.0]), 0.5, 1.6, palettes[2], rng),
        _cylinder(n_obj[3], np.array([1.0, -1.0, 0.0]), 0.6, 1.4, palettes[3], rng, cone=True),
        _ground(n_ground, np.zeros(2), 6.0, ground_palette, 1.0, rng),
    ]
    gaussians = _concat([_surfels(p, col, s, rng) for p, col, s in shapes])
    angles = 2 * math.pi * np.arange(c) / c
    heights = 2.6 + 0.6 * np.sin(3 * angles)
    eyes = np.column_stack([5.5 * np.cos(angles), 5.5 * np.sin(angles), heights])
    viewmats = np.stack([_look_at(e, np.array([0.0, 0.0, 0.5])) for e in eyes])
    return gaussians, viewmats


def _blockwise(ground, box, blocks):
    """Rows [blocks * (n_ground + n_box), k] of ``blocks`` blocks, each its ground rows then its box rows,
    from the ground rows [blocks * n_ground, k] and box rows [blocks * n_box, k], block after block."""
    k = ground.shape[1]
    rows = np.empty((blocks, (len(ground) + len(box)) // blocks, k))
    n_ground = len(ground) // blocks
    rows[:, :n_ground] = ground.reshape(blocks, n_ground, k)
    rows[:, n_ground:] = box.reshape(blocks, -1, k)
    return rows.reshape(-1, k)


def _city_blocks(rng, blocks, per_side, pitch, count, ground_palette):
    """The Gaussians (dict of float64 arrays, ``_surfel_shapes``) of the city blocks ``blocks`` [B] (numbers
    on a grid ``per_side`` blocks wide, ``pitch`` apart) of ``count`` Gaussians each, rows block by block
    (a third the ground patch, then the building), with the draws of ``rng`` that building them one block
    at a time would take, in that order (per block: height, half sides, palette, ground points, box faces
    and points, then the ground's and the box's surfels). The draws are the only loop over the blocks:
    numpy's normal draws take a varying number of the generator's words, so the blocks' runs of uniform
    and normal draws cannot be drawn as one; the rest is vectorised over the blocks."""
    nb, ng = len(blocks), count // 3
    nx = count - ng  # the box's
    widths = [12, 2 * ng, nx, 3 * nx, 3 * ng, ng, 3 * nx, nx]  # the uniform draws of a block, in order
    uniform, normal = np.empty((nb, sum(widths))), np.empty((nb, 7 * ng + 4 * nx))
    uniform_cuts = np.cumsum([0, 12 + 2 * ng, 4 * nx + 4 * ng, 4 * nx])
    normal_cuts = [0, 3 * ng, 7 * ng, 7 * ng + 4 * nx]
    for b in range(nb):
        for k in range(3):  # one call per run, uniform and normal runs alternating as a block's build draws
            rng.random(out=uniform[b, uniform_cuts[k]:uniform_cuts[k + 1]])
            rng.standard_normal(out=normal[b, normal_cuts[k]:normal_cuts[k + 1]])
    head, xy, face_unit, u_unit, ground_scale, ground_opacity, box_scale, box_opacity = np.split(
        uniform, np.cumsum(widths)[:-1], axis=1)
    noise, ground_quat, box_quat = np.split(normal, normal_cuts[1:3], axis=1)

    centers = (np.stack([blocks % per_side, blocks // per_side], axis=1).astype(float) + 0.5) * pitch
    height = _uniform(head[:, 0], 2.0, 6.0)
    half = np.column_stack([_uniform(head[:, 1], 1.5, 2.8), _uniform(head[:, 2], 1.5, 2.8), height / 2])
    palettes = _uniform(head[:, 3:], 0.15, 0.95).reshape(nb, 3, 3)
    ground_pts, ground_colors = _ground_points(np.repeat(centers, ng, axis=0), 6.0, ground_palette, 1.5,
                                               xy.reshape(-1, 2), noise.reshape(-1, 3))
    areas = _box_areas(half)
    cdf = np.cumsum(areas / areas.sum(axis=1, keepdims=True), axis=1)  # numpy's choice(6, p=...): its cdf,
    cdf /= cdf[:, -1:]
    face = (cdf[:, None, :] <= face_unit[:, :, None]).sum(axis=2).ravel()  # searchsorted(side="right")
    u, stripe = _box_points(np.repeat(half, nx, axis=0), face, u_unit.reshape(-1, 3))
    box_pts = np.repeat(np.column_stack([centers, height / 2]), nx, axis=0) + u
    box_colors = palettes[np.repeat(np.arange(nb), nx), stripe % 3]
    spacing = np.repeat(np.column_stack([np.full(nb, math.sqrt(36.0 / ng)), np.sqrt(4 * areas.sum(axis=1) / nx)]),
                        [ng, nx], axis=1).reshape(-1, 1)
    return _surfel_shapes(_blockwise(ground_pts, box_pts, nb), _blockwise(ground_colors, box_colors, nb), spacing,
                          _blockwise(ground_scale.reshape(-1, 3), box_scale.reshape(-1, 3), nb),
                          _blockwise(ground_opacity.reshape(-1, 1), box_opacity.reshape(-1, 1), nb)[:, 0],
                          _blockwise(ground_quat.reshape(-1, 4), box_quat.reshape(-1, 4), nb))


def _city_layout(g, c, rng, views_per_spot=1):
    blocks_per_side = max(2, int(round(math.sqrt(g / 300))))  # about 300 Gaussians per block
    pitch = 10.0  # block spacing (block 6 wide, streets 4 wide)
    n_blocks = blocks_per_side ** 2
    ground_palette = np.array([[0.35, 0.35, 0.38], [0.5, 0.5, 0.48]])
    # blocks of g // n_blocks Gaussians, the first g % n_blocks one more; built CITY_CHUNK blocks of one size
    # at a time, in block order
    larger = g % n_blocks
    cuts = sorted(set(range(0, n_blocks, CITY_CHUNK)) | {larger, n_blocks})
    gaussians = {k: np.empty((g,) + shape, np.float32) for k, shape in SHAPES.items()}
    row = 0
    for lo, hi in zip(cuts[:-1], cuts[1:]):
        count = g // n_blocks + (lo < larger)
        for k, v in _city_blocks(rng, np.arange(lo, hi), blocks_per_side, pitch, count, ground_palette).items():
            gaussians[k][row:row + len(v)] = v
        row += (hi - lo) * count
    # fly-through: along the streets between block rows, in a serpentine, looking ahead and down, stopping
    # at `spots` places and taking `views_per_spot` views side by side (across the street) at each
    span = blocks_per_side * pitch
    spots = -(-c // views_per_spot)
    spot, side = np.divmod(np.arange(c), views_per_spot)
    t = (spot + 0.5) / spots * blocks_per_side
    row = np.minimum(np.floor(t), blocks_per_side - 1)
    frac = t - row
    direction = np.where(row % 2 == 0, 1.0, -1.0)
    x = np.where(direction > 0, frac, 1 - frac) * span
    across = np.where(side % 2 == 1, -1, 1) * ((side + 1) // 2)  # 0, -1, 1, -2, 2, ...: view 0 in the middle
    y = (row + 1.0) * pitch + across * SPOT_STEP  # street between block rows
    eyes = np.column_stack([x, y, np.full(c, 12.0)])
    targets = eyes + np.column_stack([6.0 * direction, np.zeros(c), np.full(c, -8.0)])
    viewmats = np.stack([_look_at(e, tgt) for e, tgt in zip(eyes, targets)])
    return gaussians, viewmats


def scene_geometry(gaussians: int, cameras: int, width: int, height: int, rng, layout: str,
                   views_per_spot: int = 1) -> tuple:
    """The ground-truth Gaussians and cameras of a layout, without images (the simulator's metadata-only
    scenes use it for millions of Gaussians): (dict of float32 arrays means [G, 3], scales [G, 3],
    quats [G, 4], opacities [G], colors [G, 3]; viewmats [C, 4, 4] float32; Ks [C, 3, 3] float32).
    ``rng``: a numpy Generator (advanced by the call); views_per_spot: the city's views per spot
    (module docstring; 1 for the objects layout)."""
    if layout == "objects":
        gauss, viewmats = _objects_layout(gaussians, cameras, rng)
    else:
        gauss, viewmats = _city_layout(gaussians, cameras, rng, views_per_spot)
    focal = FOCAL_FACTOR * width
    K = np.array([[focal, 0, 0.5 * width], [0, focal, 0.5 * height], [0, 0, 1]], np.float32)
    return gauss, viewmats.astype(np.float32), np.tile(K, (cameras, 1, 1))


def rendered_cells(means: np.ndarray, log_scales: np.ndarray, viewmats: np.ndarray, Ks: np.ndarray, width: int,
                   height: int) -> tuple:
    """(cell_of [G] int32, visible [C, K] bool): ``RENDER_CELLS`` k-d cells of the Gaussians (means, log
    scales [G, 3]) and the cells that may hold a Gaussian with a screen radius > 0 in each camera
    (viewmats [C, 4, 4], Ks [C, 3, 3]); a camera's image is the render of those cells' Gaussians alone."""
    cell_of, bounds = cut_cells(means, log_scales, min(RENDER_CELLS, len(means)))
    return cell_of, predict_visible_cells(bounds, viewmats, Ks, width, height, Margin(means=0.0, log_scale=0.0))


def generate_scene(gaussians: int, cameras: int, width: int, height: int, seed: int = 0,
                   layout: str = "objects", init_fraction: float = 0.5, init_noise: float = 0.5,
                   views_per_spot: int = 1, progress: bool = False) -> Scene:
    """Build a ground-truth scene, render its images and draw the initial point cloud.

    gaussians: number of ground-truth Gaussians G; cameras: number of cameras C (>= 2);
    width, height: image size; layout: 'objects' or 'city';
    init_fraction: share of the ground-truth means kept in the initial point cloud;
    init_noise: standard deviation of its positional noise, in units of the mean ground-truth scale;
    views_per_spot: city cameras taken side by side at each spot of the fly-through (module docstring);
    progress: a bar on a terminal, else a line on stderr every ``Progress.LINE_SECONDS``, counting the images.
    Returns a Scene (G Gaussians, C cameras and uint8 images, /init point cloud, held-out cameras).
    """
    from kernels.splat import render

    if layout not in LAYOUTS:
        raise InputError(f"`layout` must be one of {', '.join(LAYOUTS)}, got {layout!r}")
    if gaussians < 16:
        raise InputError(f"`gaussians` must be at least 16, got {gaussians}")
    if cameras < 2:
        raise InputError(f"`cameras` must be at least 2 (one is held out), got {cameras}")
    if views_per_spot < 1 or (views_per_spot > 1 and layout != "city"):
        raise InputError(f"`views_per_spot` must be 1, or more with the city layout, got {views_per_spot} "
                         f"with {layout!r}")
    if width < 1 or height < 1:
        raise InputError(f"`width` and `height` must be positive, got {width} x {height}")
    if not 0.0 < init_fraction <= 1.0 or init_noise < 0.0:
        raise InputError("init_fraction must be in (0, 1] and init_noise >= 0")
    require_memory(cameras * height * width * 3, f"{cameras} images of `width` {width} x `height` {height}")
    bar = Progress(cameras, enabled=progress, unit="image")  # its clock starts here: the geometry counts
    rng = np.random.default_rng(seed)
    gauss, viewmats, Ks = scene_geometry(gaussians, cameras, width, height, rng, layout, views_per_spot)

    tensors = {k: torch.from_numpy(v) for k, v in gauss.items()}
    cell_of, visible = rendered_cells(gauss["means"], gauss["scales"], viewmats, Ks, width, height)
    bar.update(0, f"{gaussians:,} Gaussians placed")
    images = np.zeros((cameras, height, width, 3), np.uint8)  # an image that no Gaussian reaches stays black
    with torch.no_grad():
        for i in range(cameras):
            rows = torch.from_numpy(np.flatnonzero(visible[i][cell_of]))
            if len(rows):
                image, _ = render(**{k: v[rows] for k, v in tensors.items()}, viewmat=torch.from_numpy(viewmats[i]),
                                  K=torch.from_numpy(Ks[i]), width=width, height=height)
                images[i] = np.round(np.clip(image.numpy(), 0.0, 1.0) * 255.0).astype(np.uint8)
            bar.update(i + 1)
    bar.close()

    n_init = max(1, int(round(init_fraction * gaussians)))
    pick = np.sort(rng.choice(gaussians, size=n_init, replace=False))
    sigma = init_noise * float(np.exp(gauss["scales"]).mean())
    init_means = gauss["means"][pick] + rng.normal(0.0, sigma, (n_init, 3))
    init_colors = np.clip(gauss["colors"][pick] + rng.normal(0.0, 0.05, (n_init, 3)), 0.0, 1.0)
    return Scene(**gauss, viewmats=viewmats, Ks=Ks, images=images, width=width, height=height,
                 init_means=init_means.astype(np.float32), init_colors=init_colors.astype(np.float32),
                 heldout=np.arange(cameras) % HOLDOUT_EVERY == 0,
                 attrs={"layout": layout, "seed": seed, "views_per_spot": views_per_spot,
                        "generator": "odin_sched.scenes.scene_gen"})
