"""Conservative visibility prediction against the real rasterizer, the Adam step bound against
torch.optim.Adam and VisibleAdam, and the margin check against direct numpy."""
import math

import numpy as np
import pytest
import torch

from kernels.splat import render
from odin_sched.cells import cell_bounds, kd_cells
from odin_sched.optim import VisibleAdam, default_lrs
from odin_sched.scene_gen import generate_scene
from odin_sched.train import scene_extent
from odin_sched.visibility import (Margin, adam_step_bound, motion_within_margin, predict_visible_cells,
                                   visible_cells_of, window_margin)

WIDTH, HEIGHT = 32, 24  # W != H, neither a multiple of the 16-pixel tile
NUM_CELLS = 16
WINDOW = 20  # batches
BATCHED_BETAS = (0.9 ** 4, 0.999 ** 4)
PARAMS = ("means", "scales", "quats", "opacities", "colors")


@pytest.fixture(scope="module", params=[("city", 1200), ("objects", 400)], ids=["city", "objects"])
def scene(request):
    layout, gaussians = request.param
    return generate_scene(gaussians, 20, WIDTH, HEIGHT, seed=3, layout=layout)


def gaussians_of(scene):
    return {name: np.asarray(getattr(scene, name), np.float32) for name in PARAMS}


def rendered_visible(gaussians, viewmat, K):
    """The rasterizer's visible mask [G] (radius > 0) of one camera."""
    tensors = {name: torch.from_numpy(np.ascontiguousarray(v)) for name, v in gaussians.items()}
    with torch.no_grad():
        _, visible = render(**tensors, viewmat=torch.from_numpy(viewmat), K=torch.from_numpy(K),
                            width=WIDTH, height=HEIGHT)
    return visible.numpy()


def scene_margin(scene):
    lrs = default_lrs(scene_extent(scene.viewmats))
    return window_margin(lrs["means"], lrs["scales"], (0.9, 0.999), WINDOW)


def assert_covered(predicted, gaussians, viewmats, Ks, cell_of, per_camera=None):
    """Every cell holding a rendered-visible Gaussian is predicted, for every camera."""
    for cam in range(len(viewmats)):
        g = per_camera(cam) if per_camera else gaussians
        truth = visible_cells_of(rendered_visible(g, viewmats[cam], Ks[cam]), cell_of, NUM_CELLS)
        missed = np.flatnonzero(truth & ~predicted[cam])
        assert missed.size == 0, f"camera {cam}: visible cells {missed.tolist()} not predicted"


def test_zero_margin_prediction_covers_rendered_visibility(scene):
    gaussians = gaussians_of(scene)
    cell_of = kd_cells(gaussians["means"], NUM_CELLS)
    bounds = cell_bounds(gaussians["means"], gaussians["scales"], cell_of, NUM_CELLS)
    predicted = predict_visible_cells(bounds, scene.viewmats, scene.Ks, WIDTH, HEIGHT, Margin(0.0, 0.0))
    assert predicted.shape == (20, NUM_CELLS) and predicted.dtype == bool
    assert_covered(predicted, gaussians, scene.viewmats, scene.Ks, cell_of)


def perturbed(gaussians, margin, seed, towards=None):
    """Every mean moved by exactly margin.means (random direction, or towards the point ``towards``),
    every log-scale grown by exactly margin.log_scale, fresh random rotations."""
    rng = np.random.default_rng(seed)
    means = gaussians["means"].astype(np.float64)
    direction = rng.normal(size=means.shape) if towards is None else towards - means
    direction /= np.linalg.norm(direction, axis=1, keepdims=True)
    quats = rng.normal(size=gaussians["quats"].shape)
    return dict(gaussians, means=(means + margin.means * direction).astype(np.float32),
                scales=(gaussians["scales"] + margin.log_scale).astype(np.float32),
                quats=(quats / np.linalg.norm(quats, axis=1, keepdims=True)).astype(np.float32))


def test_window_margin_prediction_covers_gaussians_moved_to_the_margin(scene):
    gaussians = gaussians_of(scene)
    margin = scene_margin(scene)
    cell_of = kd_cells(gaussians["means"], NUM_CELLS)
    bounds = cell_bounds(gaussians["means"], gaussians["scales"], cell_of, NUM_CELLS)
    predicted = predict_visible_cells(bounds, scene.viewmats, scene.Ks, WIDTH, HEIGHT, margin)
    moved = perturbed(gaussians, margin, seed=7)
    assert_covered(predicted, moved, scene.viewmats, scene.Ks, cell_of)
    # the worst direction for each camera: every Gaussian moved towards it (bigger and nearer)
    centres = -np.einsum("cji,cj->ci", scene.viewmats[:, :3, :3], scene.viewmats[:, :3, 3]).astype(np.float64)
    assert_covered(predicted, None, scene.viewmats, scene.Ks, cell_of,
                   per_camera=lambda cam: perturbed(gaussians, margin, seed=cam, towards=centres[cam]))


def test_prediction_is_useful_on_the_city_layout():
    city = generate_scene(1200, 20, WIDTH, HEIGHT, seed=3, layout="city")
    gaussians = gaussians_of(city)
    cell_of = kd_cells(gaussians["means"], NUM_CELLS)
    bounds = cell_bounds(gaussians["means"], gaussians["scales"], cell_of, NUM_CELLS)
    exact = predict_visible_cells(bounds, city.viewmats, city.Ks, WIDTH, HEIGHT, Margin(0.0, 0.0))
    windowed = predict_visible_cells(bounds, city.viewmats, city.Ks, WIDTH, HEIGHT, scene_margin(city))
    # measured: 0.50 of the cells per camera with no margin, 0.69 with a 20-batch margin
    assert exact.mean(axis=1).mean() < 0.6
    assert windowed.mean(axis=1).mean() < 0.8
    assert np.all(windowed >= exact)  # a margin only adds cells


def test_boundary_gaussians_of_one_camera():
    """Gaussians scattered around the frustum's edges and the near plane, one per cell: the prediction
    covers each visible one and rejects many invisible ones."""
    rng = np.random.default_rng(11)
    g = 4000
    z = np.concatenate([rng.uniform(-1.0, 8.0, g - 200), 0.01 + rng.uniform(-1e-3, 1e-3, 200)])
    fx, fy, cx, cy = 30.0, 26.0, 14.5, 13.0  # principal point off centre
    u = rng.uniform(-80.0, WIDTH + 80.0, g)
    v = rng.uniform(-80.0, HEIGHT + 80.0, g)
    cam_points = np.column_stack([(u - cx) * np.abs(z) / fx, (v - cy) * np.abs(z) / fy, z])
    angle = 0.7
    rot = np.array([[math.cos(angle), 0, math.sin(angle)], [0, 1, 0], [-math.sin(angle), 0, math.cos(angle)]])
    trans = np.array([0.3, -0.2, 1.5])
    viewmat = np.eye(4, dtype=np.float32)
    viewmat[:3, :3], viewmat[:3, 3] = rot, trans
    K = np.array([[fx, 0, cx], [0, fy, cy], [0, 0, 1]], np.float32)
    quats = rng.normal(size=(g, 4))
    gaussians = {
        "means": ((cam_points - trans) @ rot).astype(np.float32),  # R^T (p_cam - t)
        "scales": rng.uniform(-4.0, 0.5, size=(g, 3)).astype(np.float32),
        "quats": (quats / np.linalg.norm(quats, axis=1, keepdims=True)).astype(np.float32),
        "opacities": np.zeros(g, np.float32),
        "colors": np.full((g, 3), 0.5, np.float32),
    }
    cell_of = np.arange(g)
    bounds = cell_bounds(gaussians["means"], gaussians["scales"], cell_of, g)
    predicted = predict_visible_cells(bounds, viewmat[None], K[None], WIDTH, HEIGHT, Margin(0.0, 0.0))[0]
    visible = rendered_visible(gaussians, viewmat, K)
    assert not np.any(visible & ~predicted)
    assert visible.sum() > 500 and (~predicted).sum() > 1000  # both sides of the boundary are exercised
    assert (predicted & ~visible).sum() < visible.sum()  # and the bound is not absurdly loose


def adam_updates(grads, betas, lr=1.0):
    """|update| / lr of torch.optim.Adam (eps = 0) at every step; grads [T, N], one sequence a column."""
    param = torch.zeros(grads.shape[1], dtype=torch.float64, requires_grad=True)
    opt = torch.optim.Adam([param], lr=lr, betas=betas, eps=0.0)
    ratios = np.empty(grads.shape)
    for t, g in enumerate(grads):
        before = param.detach().clone()
        param.grad = torch.from_numpy(g)
        opt.step()
        ratios[t] = (param.detach() - before).abs().numpy() / lr
    return ratios


def gradient_sequences(betas, steps, seed=0):
    """Random, heavy-tailed and adversarial gradient sequences [steps, N] (no zeros)."""
    b1, b2 = betas
    rng = np.random.default_rng(seed)
    t = np.arange(steps, dtype=np.float64)[:, None]
    sign = np.where(t % 2 == 0, 1.0, -1.0)
    columns = [
        rng.normal(size=(steps, 8)),
        rng.standard_cauchy(size=(steps, 8)),
        np.where(t == 0, 1e3, 1e-6),                     # one large gradient, then tiny ones
        np.where(t == steps // 2, 1e3, 1e-6),            # a spike after a long quiet spell
        sign,                                            # alternating signs
        sign * 1.01 ** t,                                # alternating, growing
        0.5 ** (t / 4),                                  # geometric decay
        1.05 ** t,                                       # geometric growth
        np.exp(t * math.log(b2 / b1)),                   # the Cauchy-Schwarz equality case
        np.exp(t * math.log(b2 / b1)) * (1 + 0.1 * rng.uniform(size=(steps, 1))),
    ]
    return np.column_stack(columns)


@pytest.mark.parametrize("betas,steps", [((0.9, 0.999), 1000), (BATCHED_BETAS, 300)], ids=["default", "batched"])
def test_adam_step_bound_against_torch(betas, steps):
    bound = adam_step_bound(*betas)
    ratios = adam_updates(gradient_sequences(betas, steps), betas)
    assert np.all(np.isfinite(ratios))
    assert ratios.max() <= bound * (1 + 1e-9)
    assert ratios.max() > 0.75 * bound  # the equality sequence gets close
    b1, b2 = betas
    assert bound > (1 - b1) / math.sqrt(1 - b2)  # above Kingma & Ba's typical bound
    assert bound == pytest.approx((1 - b1) / math.sqrt((1 - b2) * (1 - b1 * b1 / b2)), rel=1e-9)


def test_adam_step_bound_rejects_unbounded_betas():
    with pytest.raises(ValueError):
        adam_step_bound(0.9, 0.8)  # b1^2 > b2: the ratio is unbounded
    with pytest.raises(ValueError):
        adam_step_bound(1.0, 0.999)


@pytest.mark.parametrize("betas", [(0.9, 0.999), BATCHED_BETAS], ids=["default", "batched"])
def test_visible_adam_stays_within_the_window_margin(betas):
    """Mid-training windows of VisibleAdam under adversarial gradients stay inside window_margin."""
    g = 64
    gen = torch.Generator().manual_seed(0)
    lrs = default_lrs(10.0)
    params = {name: torch.randn((g,) + shape, generator=gen)
              for name, shape in zip(PARAMS, ((3,), (3,), (4,), (), (3,)))}
    opt = VisibleAdam(params, lrs, betas=betas)
    growth = betas[1] / betas[0]
    signs = {name: torch.sign(torch.randn(p.shape, generator=gen)) for name, p in params.items()}
    moves = []
    for window in range(3):
        start = {k: opt.params[k].detach().numpy().copy() for k in ("means", "scales")}
        for step in range(WINDOW):
            j = window * WINDOW + step
            for name, p in opt.params.items():
                p.grad = signs[name] * growth ** (j % 60)  # the equality sequence, restarted now and then
            opt.step(torch.rand(g, generator=gen) < 0.8)
        margin = window_margin(lrs["means"], lrs["scales"], betas, WINDOW)
        end = {k: opt.params[k].detach().numpy() for k in ("means", "scales")}
        assert np.all(motion_within_margin(start["means"], start["scales"], end["means"], end["scales"], margin))
        moves.append(np.linalg.norm(end["means"] - start["means"], axis=1).max() / margin.means)
    assert max(moves) > 0.2  # the margin is not vacuous


def test_motion_within_margin_on_both_sides_of_the_boundary():
    margin = Margin(means=0.625, log_scale=0.25)
    start_means = np.zeros((6, 3), np.float32)
    start_scales = np.full((6, 3), -2.0, np.float32)
    end_means = np.array([[0.375, 0.5, 0.0],     # exactly at the mean margin (5/8): inside
                          [0.375, 0.5, 1e-3],    # just beyond
                          [0.0, 0.0, 0.0],
                          [0.0, 0.0, 0.0],
                          [-0.1, 0.2, -0.3],
                          [0.5, 0.5, 0.0]], np.float32)
    end_scales = start_scales.copy()
    end_scales[2, 1] += 0.25   # exactly at the log-scale margin: inside
    end_scales[3, 2] += 0.2501  # just beyond
    end_scales[4] -= 10.0       # shrinking is always fine
    expected = [True, False, True, False, True, False]
    got = motion_within_margin(start_means, start_scales, end_means, end_scales, margin)
    direct = ((np.sqrt(((end_means.astype(np.float64) - start_means) ** 2).sum(axis=1)) <= margin.means)
              & ((end_scales.astype(np.float64) - start_scales).max(axis=1) <= margin.log_scale))
    assert got.tolist() == expected == direct.tolist()
    rng = np.random.default_rng(0)  # random moves straddling both limits
    start, start_log = rng.normal(size=(500, 3)), rng.normal(size=(500, 3))
    end, end_log = start + 0.35 * rng.normal(size=(500, 3)), start_log + 0.2 * rng.normal(size=(500, 3))
    direct = ((np.linalg.norm(end - start, axis=1) <= margin.means)
              & np.all(end_log - start_log <= margin.log_scale, axis=1))
    got = motion_within_margin(start, start_log, end, end_log, margin)
    assert np.array_equal(got, direct) and 50 < got.sum() < 450
