"""Per-image culling of the single-process trainer against the rasterizer and against training without it.

Conservative: on random models around random cameras (Gaussians behind the camera, at the near plane,
just outside and just inside every edge of the image, anisotropic and isotropic, tiny and huge), every
Gaussian the rasterizer's projection gives a radius > 0, and every Gaussian in a tile's list, is among
the kept rows. Exact: training with culling equals training without it (``--no-cull``, which renders
every Gaussian) bit for bit, with and without densification, B = 1 and 3. The cells' bounds are checked
against their NumPy twin ``cell_bounds``.
"""
import os
import sys
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from kernels.splat.binning import bin_tiles
from kernels.splat.projection import project
from odin_sched.scenes.cells import cell_bounds
from odin_sched.scenes.point_cloud import init_gaussians
from odin_sched.scenes.scene_gen import generate_scene
from odin_sched.scenes.scene_io import read_scene, write_scene
from odin_sched.odin.program import CellCulling
from odin_sched.training.culling import Culling, box_cells, grid_cells, step_bounds
from odin_sched.training.step import pack_params
from odin_sched.training.train import TrainConfig, train

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "mpi_scripts"))
from tests_support import densify_config  # noqa: E402

WIDTH, HEIGHT = 37, 29  # neither a multiple of the 16-pixel tile


def random_rotation(rng) -> np.ndarray:
    q = rng.normal(size=4)
    w, x, y, z = q / np.linalg.norm(q)
    return np.array([[1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
                     [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
                     [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)]])


def random_cameras(rng, count: int) -> tuple:
    """viewmats [C, 4, 4] and Ks [C, 3, 3] (float32): random orientations near camera 0's, positions
    near the origin, focal lengths 15-60 px, principal points off centre."""
    base = random_rotation(rng)
    viewmats = np.tile(np.eye(4, dtype=np.float32), (count, 1, 1))
    Ks = np.tile(np.eye(3, dtype=np.float32), (count, 1, 1))
    for c in range(count):
        tilt = random_rotation(rng) if c % 4 == 3 else np.eye(3)  # every 4th looks elsewhere entirely
        small = np.linalg.qr(np.eye(3) + 0.15 * rng.normal(size=(3, 3)))[0] if c else np.eye(3)
        viewmats[c, :3, :3] = tilt @ small @ base
        viewmats[c, :3, 3] = rng.normal(scale=0.3, size=3)
        Ks[c, 0, 0], Ks[c, 1, 1] = rng.uniform(15, 60, size=2)
        Ks[c, 0, 2], Ks[c, 1, 2] = WIDTH * rng.uniform(0.3, 0.7), HEIGHT * rng.uniform(0.3, 0.7)
    return viewmats, Ks


def random_model(rng, viewmat, K, count: int) -> dict:
    """Gaussians placed in camera 0's space: depths from behind the camera (-2) through the near plane
    (0.01) to far, screen positions up to 80 px (a third of them) or 4 px beyond the image, log-scales
    from -6 to 1 (every other one isotropic)."""
    fx, fy, cx, cy = (float(a) for a in (K[0, 0], K[1, 1], K[0, 2], K[1, 2]))
    z = np.concatenate([rng.uniform(-2.0, 10.0, count - count // 10), 0.01 + rng.uniform(-2e-3, 2e-3, count // 10)])
    reach = np.where(np.arange(count) % 3 == 0, 80.0, 4.0)
    u, v = rng.uniform(-reach, WIDTH + reach), rng.uniform(-reach, HEIGHT + reach)
    cam = np.column_stack([(u - cx) * np.abs(z) / fx, (v - cy) * np.abs(z) / fy, z])
    means = (cam - viewmat[:3, 3].astype(np.float64)) @ viewmat[:3, :3].astype(np.float64)  # R^T (p - t)
    iso = np.arange(count)[:, None] % 2 == 0
    scales = np.where(iso, rng.uniform(-6.0, 1.0, (count, 1)), rng.uniform(-6.0, 1.0, (count, 3)))
    quats = rng.normal(size=(count, 4))
    return {"means": torch.from_numpy(means.astype(np.float32)), "scales": torch.from_numpy(scales.astype(np.float32)),
            "quats": torch.from_numpy((quats / np.linalg.norm(quats, axis=1, keepdims=True)).astype(np.float32))}


@pytest.mark.parametrize("seed", range(6))
def test_every_gaussian_the_rasterizer_projects_or_bins_is_kept(seed):
    rng = np.random.default_rng(seed)
    viewmats, Ks = random_cameras(rng, 8)
    model = random_model(rng, viewmats[0], Ks[0], 3000)
    scene = SimpleNamespace(viewmats=viewmats, Ks=Ks, width=WIDTH, height=HEIGHT)
    culling = Culling(per_axis=(1, 4, 16)[seed % 3])
    kept = culling.kept_rows(model, torch.arange(3000), scene, np.arange(8))
    projected = binned = culled = near_misses = 0
    for cam, rows in enumerate(kept):
        rows = rows.numpy()
        assert np.all(np.diff(rows) > 0)  # ascending, no repeats
        mean2d, _, depth, radius = project(*(model[k].numpy() for k in ("means", "scales", "quats")),
                                           viewmats[cam], Ks[cam], WIDTH, HEIGHT)
        _, ids = bin_tiles(torch.from_numpy(mean2d), torch.from_numpy(radius), torch.from_numpy(depth), WIDTH, HEIGHT)
        visible = np.flatnonzero(radius > 0)
        assert np.isin(visible, rows).all(), f"camera {cam}: culled a Gaussian of radius > 0"
        assert np.isin(ids.numpy(), rows).all(), f"camera {cam}: culled a Gaussian in a tile's list"
        projected, binned, culled = projected + visible.size, binned + ids.numel(), culled + 3000 - rows.size
        near_misses += np.count_nonzero(np.isin(near_image(model["means"].numpy(), viewmats[cam], Ks[cam]), rows,
                                                invert=True))
    assert projected > 500 and binned > 500  # the cameras see plenty ...
    if culling.per_axis > 1:
        assert culled > 1000  # ... and the cells cut some away,
    if culling.per_axis == 16:
        assert near_misses > 10  # some of them right at the image's edge (measured: 21 and 40)


def near_image(means, viewmat, K) -> np.ndarray:
    """Gaussians in front of the camera whose means project to within 6 px outside the image."""
    cam = means.astype(np.float64) @ viewmat[:3, :3].T.astype(np.float64) + viewmat[:3, 3]
    z = cam[:, 2]
    with np.errstate(divide="ignore", invalid="ignore"):
        u, v = K[0, 0] * cam[:, 0] / z + K[0, 2], K[1, 1] * cam[:, 1] / z + K[1, 2]
    inside = (u > -6) & (u < WIDTH + 6) & (v > -6) & (v < HEIGHT + 6)
    outside = (u < 0) | (u > WIDTH) | (v < 0) | (v > HEIGHT)
    return np.flatnonzero((z > 0.05) & inside & outside)


@pytest.mark.parametrize("seed", range(3))
def test_an_odin_image_step_keeps_every_gaussian_the_rasterizer_projects_or_bins(seed, monkeypatch):
    # the distributed image step's culling (odin_sched.odin.program.CellCulling): the rows of the cells it
    # reads (here 7 slabs of the model along a random axis, as parameter blocks), cut into sub-cells of
    # about 40 Gaussians (75 sub-cells over the model's 3,000)
    monkeypatch.setattr("odin_sched.odin.program.SUB_CELLS", 75)
    rng = np.random.default_rng(10 + seed)
    viewmats, Ks = random_cameras(rng, 4)
    model = random_model(rng, viewmats[0], Ks[0], 3000)
    model.update(opacities=torch.zeros(3000), sh0=torch.zeros(3000, 1, 3), shN=torch.zeros(3000, 0, 3))
    slabs = np.array_split(np.argsort(model["means"][:, seed % 3].numpy(), kind="stable"), 7)
    cells = rng.permutation(7)[:5]  # the cells an image reads, in no particular order
    rows = [np.sort(slabs[c]) for c in cells]
    blocks = [pack_params(model, torch.from_numpy(r)).numpy() for r in rows]
    scene = SimpleNamespace(viewmats=viewmats, Ks=Ks, width=WIDTH, height=HEIGHT)
    culling, projected, culled = CellCulling(), 0, 0
    shard = SimpleNamespace(members=np.concatenate(slabs))  # only what the sub-cells are kept for
    for cam in range(4):
        kept = culling.kept(shard, cells, blocks, 0, scene, cam)
        read = np.concatenate(rows)
        mean2d, _, depth, radius = project(*(model[k].numpy()[read] for k in ("means", "scales", "quats")),
                                           viewmats[cam], Ks[cam], WIDTH, HEIGHT)
        _, ids = bin_tiles(torch.from_numpy(mean2d), torch.from_numpy(radius), torch.from_numpy(depth), WIDTH, HEIGHT)
        kept_ids = np.concatenate([r[k] for r, k in zip(rows, kept)])
        assert all(np.all(np.diff(k) > 0) for k in kept)  # ascending, no repeats
        assert np.isin(read[radius > 0], kept_ids).all(), f"camera {cam}: culled a Gaussian of radius > 0"
        assert np.isin(read[ids.numpy()], kept_ids).all(), f"camera {cam}: culled a Gaussian in a tile's list"
        projected, culled = projected + np.count_nonzero(radius > 0), culled + len(read) - len(kept_ids)
    assert projected > 300 and culled > 150  # the cameras see plenty, the sub-cells cut some away (203-919)
    assert all(len(np.unique(sub)) > 1 for sub, _ in culling.sub.values())  # cells were cut into sub-cells


def test_box_cells_cut_the_box_of_the_means_evenly():
    # points at the centres of a 3 x 3 x 3 lattice of unit boxes spanning [0, 3]^3, plus its two corners
    centres = np.stack(np.meshgrid(*[np.arange(3) + 0.5] * 3, indexing="ij"), axis=-1).reshape(-1, 3)
    means = np.concatenate([centres, [[0.0, 0.0, 0.0], [3.0, 3.0, 3.0]]]).astype(np.float32)
    cell = box_cells(means, 3)
    expected = (np.floor(centres[:, 0]) * 9 + np.floor(centres[:, 1]) * 3 + np.floor(centres[:, 2])).astype(np.int64)
    np.testing.assert_array_equal(cell, np.concatenate([expected, [0, 26]]))
    assert box_cells(np.zeros((0, 3), np.float32), 4).shape == (0,)
    np.testing.assert_array_equal(box_cells(np.ones((5, 3), np.float32), 4), np.zeros(5))  # a point-sized box


def test_step_bounds_equal_numpy_cell_bounds():
    rng = np.random.default_rng(3)
    x = rng.normal(size=5000)
    means = np.column_stack([x, 10 * x + rng.normal(size=5000), 0.1 * rng.normal(size=5000)]).astype(np.float32)
    scales = rng.uniform(-8, 2, size=(5000, 3)).astype(np.float32)
    cell_of = grid_cells(means, 8)
    assert cell_of.min() >= 0 and cell_of.max() < 512
    ours = step_bounds(torch.from_numpy(means), torch.from_numpy(scales), torch.from_numpy(cell_of), 512)
    twin = cell_bounds(means, scales, cell_of, 512)
    assert (twin.count == 0).any()  # empty cells exercised
    for field in ("lo", "hi", "max_sigma", "count"):
        np.testing.assert_array_equal(getattr(ours, field), getattr(twin, field), err_msg=field)


def test_grid_cells_cut_each_axis_at_its_quantiles():
    rng = np.random.default_rng(4)
    means = rng.standard_exponential(size=(8000, 3)).astype(np.float32)
    cell = grid_cells(means, 4)
    slabs = np.stack([cell // 16, cell // 4 % 4, cell % 4], axis=1)
    for axis in range(3):
        order = np.argsort(means[:, axis], kind="stable")
        assert np.all(np.diff(slabs[order, axis]) >= 0)  # slabs follow the coordinate
        np.testing.assert_array_equal(np.bincount(slabs[:, axis], minlength=4), [2000] * 4)


@pytest.fixture(scope="module", params=["city", "one camera sees all"])
def scene_path(tmp_path_factory, request):
    """A city scene, and the same with training camera 1 moved to camera 0's place, which sees every Gaussian:
    a batch with it renders the model as it lies, the batch's other images parts of it."""
    path = tmp_path_factory.mktemp("culling") / "city.h5"
    scene = generate_scene(600, 14, 32, 24, seed=6, layout="city")
    if request.param != "city":
        for field in ("viewmats", "Ks", "images"):
            getattr(scene, field)[1] = getattr(scene, field)[0]
    write_scene(path, scene)
    return path


@pytest.mark.parametrize("batch_size,densify", [(1, True), (3, False), (3, True), (4, False)])
def test_culled_training_equals_rendering_every_gaussian(scene_path, tmp_path, batch_size, densify):
    steps = 7
    scene = read_scene(scene_path)
    kept = Culling().kept_rows(init_gaussians(scene.init_means, scene.init_colors), None, scene,
                               np.arange(scene.num_cameras))
    assert min(len(rows) for rows in kept) < 0.6 * len(scene.init_means)  # culling does cull here
    if np.array_equal(scene.viewmats[1], scene.viewmats[0]):  # the second scene: camera 1 keeps every Gaussian
        assert len(kept[1]) == len(scene.init_means)
    runs = {}
    for cull in (True, False):
        out = tmp_path / f"cull_{cull}.h5"
        result = train(TrainConfig(scene_path, steps, out, batch_size=batch_size, seed=2, eval_every=3,
                                   densify=densify_config({"densify": densify, "steps": steps}), progress=False,
                                   cull=cull))
        runs[cull] = result, read_scene(out)
    (culled, a), (full, b) = runs[True], runs[False]
    np.testing.assert_array_equal(culled.losses, full.losses)
    np.testing.assert_array_equal(culled.psnr, full.psnr)
    assert a.num_gaussians == b.num_gaussians and (a.num_gaussians != len(scene.init_means)) == densify
    for name in ("means", "scales", "quats", "opacities", "sh", "ids"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
