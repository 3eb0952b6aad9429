"""Conservative visibility prediction against the real rasterizer, the Adam step bound against
torch.optim.Adam and VisibleAdam, and the margin check against direct numpy."""
import math

import numpy as np
import pytest
import torch

from kernels.splat import render
from kernels.splat.projection import project
from odin_sched.scenes.cells import cell_bounds, kd_cells
from odin_sched.training.optim import VisibleAdam, default_lrs
from odin_sched.scenes.scene_gen import generate_scene
from odin_sched.training.train import scene_extent
from odin_sched.scenes.visibility import (Margin, adam_step_bound, motion_within_margin, predict_visible_cells,
                                          predict_visible_cells_numpy, window_margin)

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


def visible_cells_of(visible, cell_of, num_cells):
    """Cells [K] bool holding at least one visible Gaussian (visible [G] bool, cell_of [G] cell ids)."""
    cells = np.zeros(num_cells, bool)
    cells[np.asarray(cell_of)[np.asarray(visible, bool)]] = True
    return cells


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


@pytest.mark.parametrize("cells", [1, 16, 97])
def test_prediction_kernel_equals_its_numpy_twin(scene, cells):
    """The Numba kernel gives the NumPy twin's [C, K] booleans, with and without a margin, with empty
    cells, and over a camera's boundary (the boundary scene's cells sit on its planes)."""
    gaussians = gaussians_of(scene)
    cell_of = kd_cells(gaussians["means"], cells)
    bounds = cell_bounds(gaussians["means"], gaussians["scales"], cell_of, cells)
    bounds.count[::3] = 0  # every third cell empty
    for margin in (Margin(0.0, 0.0), scene_margin(scene), Margin(5.0, 1.0)):
        kernel = predict_visible_cells(bounds, scene.viewmats, scene.Ks, WIDTH, HEIGHT, margin)
        twin = predict_visible_cells_numpy(bounds, scene.viewmats, scene.Ks, WIDTH, HEIGHT, margin)
        assert np.array_equal(kernel, twin), margin
        assert 0 < kernel.sum() < kernel.size or cells == 1 or margin.means > 1  # both answers occur
    gaussians, viewmat, K, _ = boundary_camera()
    cell_of = kd_cells(gaussians["means"], cells)
    bounds = cell_bounds(gaussians["means"], gaussians["scales"], cell_of, cells)
    for margin in (Margin(0.0, 0.0), Margin(1e-3, 1e-3)):
        kernel = predict_visible_cells(bounds, viewmat[None], K[None], WIDTH, HEIGHT, margin)
        assert np.array_equal(kernel, predict_visible_cells_numpy(bounds, viewmat[None], K[None], WIDTH, HEIGHT,
                                                                  margin))


def test_prediction_is_useful_on_the_city_layout():
    city = generate_scene(1200, 20, WIDTH, HEIGHT, seed=3, layout="city")
    gaussians = gaussians_of(city)
    cell_of = kd_cells(gaussians["means"], NUM_CELLS)
    bounds = cell_bounds(gaussians["means"], gaussians["scales"], cell_of, NUM_CELLS)
    exact = predict_visible_cells(bounds, city.viewmats, city.Ks, WIDTH, HEIGHT, Margin(0.0, 0.0))
    windowed = predict_visible_cells(bounds, city.viewmats, city.Ks, WIDTH, HEIGHT, scene_margin(city))
    # measured: 0.48 of the cells per camera with no margin, 0.63 with a 20-batch margin (0.40 truly visible)
    assert exact.mean(axis=1).mean() < 0.55
    assert windowed.mean(axis=1).mean() < 0.7
    assert np.all(windowed >= exact)  # a margin only adds cells


def tilted_camera():
    """A rotated camera with its principal point off centre: viewmat [4, 4], K [3, 3] (float32)."""
    angle = 0.7
    viewmat = np.eye(4, dtype=np.float32)
    viewmat[:3, :3] = [[math.cos(angle), 0, math.sin(angle)], [0, 1, 0], [-math.sin(angle), 0, math.cos(angle)]]
    viewmat[:3, 3] = [0.3, -0.2, 1.5]
    K = np.array([[30.0, 0, 14.5], [0, 26.0, 13.0], [0, 0, 1]], np.float32)
    return viewmat, K


def to_world(cam_points, viewmat):
    """World points [N, 3] of camera-space points: R^T (p - t)."""
    return (cam_points - viewmat[:3, 3].astype(np.float64)) @ viewmat[:3, :3].astype(np.float64)


def boundary_camera(g=4000, seed=11):
    """The tilted camera and g Gaussians (every other one isotropic) scattered around its frustum's
    edges and its near plane: (gaussians, viewmat [4, 4], K [3, 3], camera-space points [g, 3])."""
    rng = np.random.default_rng(seed)
    viewmat, K = tilted_camera()
    fx, fy, cx, cy = K[0, 0], K[1, 1], K[0, 2], K[1, 2]
    z = np.concatenate([rng.uniform(-1.0, 8.0, g - 200), 0.01 + rng.uniform(-1e-3, 1e-3, 200)])
    reach = np.where(np.arange(g) % 3 == 0, 80.0, 6.0)  # pixels beyond the image; most close to its edges
    u = rng.uniform(-reach, WIDTH + reach)
    v = rng.uniform(-reach, HEIGHT + reach)
    cam_points = np.column_stack([(u - cx) * np.abs(z) / fx, (v - cy) * np.abs(z) / fy, z])
    quats = rng.normal(size=(g, 4))
    gaussians = {
        "means": to_world(cam_points, viewmat).astype(np.float32),
        "scales": np.where(np.arange(g)[:, None] % 2 == 0, rng.uniform(-4.0, 0.5, size=(g, 3)),
                           rng.uniform(-4.0, 0.5, size=(g, 1))).astype(np.float32),
        "quats": (quats / np.linalg.norm(quats, axis=1, keepdims=True)).astype(np.float32),
        "opacities": np.zeros(g, np.float32),
        "colors": np.full((g, 3), 0.5, np.float32),
    }
    return gaussians, viewmat, K, cam_points


def test_boundary_gaussians_of_one_camera():
    """One Gaussian per cell: the prediction covers each visible one and rejects many invisible ones."""
    gaussians, viewmat, K, _ = boundary_camera()
    g = len(gaussians["means"])
    bounds = cell_bounds(gaussians["means"], gaussians["scales"], np.arange(g), g)
    predicted = predict_visible_cells(bounds, viewmat[None], K[None], WIDTH, HEIGHT, Margin(0.0, 0.0))[0]
    visible = rendered_visible(gaussians, viewmat, K)
    assert not np.any(visible & ~predicted)
    assert visible.sum() > 500 and (~predicted).sum() > 1000  # both sides of the boundary are exercised
    assert (predicted & ~visible).sum() < visible.sum()  # and the bound is not absurdly loose


def test_boundary_gaussians_moved_by_the_margin():
    """Gaussians just outside the frustum pulled in by exactly the margin (towards the camera, towards
    the optical axis, at random) and grown by the log-scale margin stay covered; with half the margin
    some would not be."""
    gaussians, viewmat, K, cam_points = boundary_camera(seed=12)
    g = len(gaussians["means"])
    margin = Margin(means=0.3, log_scale=0.5)
    axis_points = to_world(cam_points * [0.0, 0.0, 1.0], viewmat)  # on the optical axis, same depth
    bounds = cell_bounds(gaussians["means"], gaussians["scales"], np.arange(g), g)
    predicted = predict_visible_cells(bounds, viewmat[None], K[None], WIDTH, HEIGHT, margin)[0]
    tighter = predict_visible_cells(bounds, viewmat[None], K[None], WIDTH, HEIGHT,
                                    Margin(0.5 * margin.means, 0.5 * margin.log_scale))[0]
    missed_by_tighter = 0
    for seed, towards in enumerate((to_world(np.zeros((1, 3)), viewmat)[0], axis_points, None)):
        visible = rendered_visible(perturbed(gaussians, margin, seed, towards=towards), viewmat, K)
        assert not np.any(visible & ~predicted)
        missed_by_tighter += (visible & ~tighter).sum()
    assert missed_by_tighter > 0


def corner_gaussians(n, log_margin=0.0, seed=13):
    """Isotropic Gaussians beyond the top-right corner of the tilted camera's image, where the clamped
    Jacobian is largest and the radius bound is tight: (gaussians, camera-space points [n, 3], radius
    [n] of the rasterizer there, grown by exp(log_margin))."""
    rng = np.random.default_rng(seed)
    viewmat, K = tilted_camera()
    fx, fy, cx, cy = (float(a) for a in (K[0, 0], K[1, 1], K[0, 2], K[1, 2]))
    z = rng.uniform(0.5, 6.0, n)
    log_sigma = np.log(z * rng.uniform(3.0, 60.0, n) / fx)
    quats = rng.normal(size=(n, 4))
    gaussians = {
        "scales": np.repeat(log_sigma[:, None], 3, axis=1).astype(np.float32),
        "quats": (quats / np.linalg.norm(quats, axis=1, keepdims=True)).astype(np.float32),
        "opacities": np.zeros(n, np.float32),
        "colors": np.full((n, 3), 0.5, np.float32),
    }

    def placed(du, dv):  # means at pixel (WIDTH + du, -dv), beyond both clamps of x/z and y/z
        cam = np.column_stack([(WIDTH + du - cx) * z / fx, (-dv - cy) * z / fy, z])
        return cam, to_world(cam, viewmat).astype(np.float32)

    grown = dict(gaussians, scales=gaussians["scales"] + np.float32(log_margin))
    _, means = placed(np.full(n, 5.5), np.full(n, 5.5))  # the radius does not depend on where, there
    radius = project(means, grown["scales"], grown["quats"], viewmat, K, WIDTH, HEIGHT)[3].astype(np.float64)
    assert np.all(radius >= 6)
    return gaussians, placed, radius, viewmat, K


def test_corner_gaussians_pin_the_radius_bound():
    """Just visible (square reaching 0.5 px into the image): predicted; a few pixels further out:
    invisible and not predicted, so the radius bound is within 4 px + 0.1 % of the true radius."""
    n = 300
    gaussians, placed, radius, viewmat, K = corner_gaussians(n)
    for shift, expect in ((radius - 0.5, True), (radius * 1.001 + 4.0, False)):
        _, means = placed(shift, shift)
        g = dict(gaussians, means=means)
        bounds = cell_bounds(means, g["scales"], np.arange(n), n)
        predicted = predict_visible_cells(bounds, viewmat[None], K[None], WIDTH, HEIGHT, Margin(0.0, 0.0))[0]
        visible = rendered_visible(g, viewmat, K)
        assert np.all(visible == expect) and np.all(predicted == expect)


def test_corner_gaussians_that_move_into_view():
    """Start outside the corner; move by exactly the margin (outward direction reversed) and grow by the
    log-scale margin, ending just visible: predicted from the start with the margin; a 0.7 x margin
    misses some."""
    n = 300
    margin = Margin(means=0.5, log_scale=0.5)
    gaussians, placed, radius, viewmat, K = corner_gaussians(n, log_margin=margin.log_scale)
    cam_end, end_means = placed(radius - 0.5, radius - 0.5)
    outward = np.array([1.0, -1.0, 0.0]) / math.sqrt(2.0)  # right and up in the camera: away from the image
    start_means = to_world(cam_end + margin.means * outward, viewmat).astype(np.float32)
    end = dict(gaussians, means=end_means, scales=gaussians["scales"] + np.float32(margin.log_scale))
    assert np.all(rendered_visible(end, viewmat, K))
    assert np.all(motion_within_margin(start_means, gaussians["scales"], end_means, end["scales"],
                                       Margin(margin.means * (1 + 1e-4), margin.log_scale * (1 + 1e-4))))  # float32
    bounds = cell_bounds(start_means, gaussians["scales"], np.arange(n), n)
    assert np.all(predict_visible_cells(bounds, viewmat[None], K[None], WIDTH, HEIGHT, margin))
    tighter = Margin(0.7 * margin.means, 0.7 * margin.log_scale)
    assert not np.all(predict_visible_cells(bounds, viewmat[None], K[None], WIDTH, HEIGHT, tighter))


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
              for name, shape in zip(PARAMS[:4] + ("sh0",), ((3,), (3,), (4,), (), (1, 3)))}
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
