"""Numba CPU splatting kernels against the dense torch reference (autograd as the gradient oracle)
and the projection against gsplat's pure-torch implementation."""

import math

import numpy as np
import pytest
import torch

from kernels.splat import render
from kernels.splat.binning import _bin_tiles, bin_tiles, tile_grid
from kernels.splat.constants import TILE_SIZE
from kernels.splat.projection import project, project_backward
from kernels.splat.rasterize_forward import rasterize_forward
from kernels.splat.reference import _project, _render
from kernels.splat.validate import all_finite

torch.set_num_threads(1)
WIDTH, HEIGHT = 64, 48  # non-square, 4 x 3 tiles
NAMES = ("means", "scales", "quats", "opacities", "colors")


def _rotation(quat):
    w, x, y, z = (quat / quat.norm()).tolist()
    return torch.tensor([
        [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
        [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
        [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
    ])


def make_scene(count, width=WIDTH, height=HEIGHT, seed=0, opacity_shift=0.0):
    """Gaussians around a point 4 units in front of a slightly rotated camera; a few behind it, some
    outside the field of view (clamped Jacobian), some nearly opaque (alpha clamp)."""
    gen = torch.Generator().manual_seed(seed)
    rot = _rotation(torch.tensor([1.0, 0.0, 0.0, 0.0]) + 0.15 * torch.randn(4, generator=gen))
    cam = torch.randn(count, 3, generator=gen) * torch.tensor([1.3, 1.0, 0.8]) + torch.tensor([0.0, 0.0, 4.0])
    cam[: count // 20, 2] = -torch.rand(count // 20, generator=gen)  # behind the camera
    viewmat = torch.eye(4)
    viewmat[:3, :3] = rot
    viewmat[:3, 3] = torch.tensor([0.1, -0.2, 0.3])
    means = (cam - viewmat[:3, 3]) @ rot  # world points that land on `cam` in the camera frame
    scales = torch.randn(count, 3, generator=gen) * 0.5 - 2.2
    quats = torch.randn(count, 4, generator=gen)
    opacities = torch.randn(count, generator=gen) * 2.0 + opacity_shift
    colors = torch.rand(count, 3, generator=gen)
    focal = 0.9 * width
    K = torch.tensor([[focal, 0.0, 0.52 * width], [0.0, 1.05 * focal, 0.47 * height], [0.0, 0.0, 1.0]])
    return [means, scales, quats, opacities, colors], viewmat, K


def _both(params, viewmat, K, background=None, width=WIDTH, height=HEIGHT, seed=0):
    """Render with the kernels and the reference, backprop the same random loss; return both results."""
    weights = torch.randn(height, width, 3, generator=torch.Generator().manual_seed(seed + 100))
    out = []
    for fn in (render, _render):
        leaves = [p.clone().requires_grad_(True) for p in params]
        image, visible = fn(*leaves, viewmat, K, width, height, background)
        (image * weights).sum().backward()
        out.append((image.detach(), visible, [leaf.grad for leaf in leaves]))
    return out


def _assert_grads_close(grads, ref_grads):
    for name, got, want in zip(NAMES, grads, ref_grads):
        scale = float(want.abs().max())
        assert torch.isfinite(got).all(), name
        torch.testing.assert_close(got, want, rtol=1e-3, atol=1e-4 * scale + 1e-7, msg=name)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_forward_and_gradients_match_reference(seed):
    params, viewmat, K = make_scene(300, seed=seed)
    background = torch.tensor([0.2, 0.5, 0.9]) if seed == 1 else None
    (image, visible, grads), (ref_image, ref_visible, ref_grads) = _both(params, viewmat, K, background, seed=seed)
    assert image.shape == (HEIGHT, WIDTH, 3) and image.dtype == torch.float32
    torch.testing.assert_close(image, ref_image, rtol=0, atol=1e-5)
    assert torch.equal(visible, ref_visible)
    assert 0 < int(visible.sum()) < 300
    _assert_grads_close(grads, ref_grads)


def test_early_stop_and_alpha_clamp_match_reference():
    # dense, mostly opaque Gaussians: transmittance hits the 1e-4 stop and alpha the 0.99 clamp
    params, viewmat, K = make_scene(400, seed=5, opacity_shift=6.0)
    params[1] = params[1] + 0.6
    (image, _, grads), (ref_image, _, ref_grads) = _both(params, viewmat, K, torch.tensor([1.0, 1.0, 1.0]))
    torch.testing.assert_close(image, ref_image, rtol=0, atol=1e-5)
    _assert_grads_close(grads, ref_grads)
    mean2d, conic, depth, radius = project(*(p.numpy() for p in params[:3]), viewmat.numpy(), K.numpy(), WIDTH, HEIGHT)
    offsets, ids = bin_tiles(torch.from_numpy(mean2d), torch.from_numpy(radius), torch.from_numpy(depth), WIDTH, HEIGHT)
    opacity = torch.sigmoid(params[3]).numpy()
    _, final_t, n_contrib = rasterize_forward(offsets.numpy(), ids.numpy(), mean2d, conic, opacity,
                                              params[4].numpy(), (1.0, 1.0, 1.0), WIDTH, HEIGHT)
    assert (final_t < 1e-3).mean() > 0.2  # the early stop is exercised
    assert opacity.max() > 0.99


def test_projection_matches_reference_and_gsplat():
    from gsplat.cuda import _torch_impl as gs

    params, viewmat, K = make_scene(300, seed=3)
    means, scales, quats = params[:3]
    mean2d, conic, depth, radius = project(means.numpy(), scales.numpy(), quats.numpy(), viewmat.numpy(), K.numpy(),
                                           WIDTH, HEIGHT)
    ref = [t.detach() for t in _project(means, scales, quats, viewmat, K, WIDTH, HEIGHT)]
    np.testing.assert_array_equal(radius, ref[3].numpy())
    np.testing.assert_allclose(mean2d, ref[0].numpy(), rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(conic, ref[1].numpy(), rtol=1e-4, atol=1e-7)
    np.testing.assert_allclose(depth, ref[2].numpy(), rtol=1e-6, atol=1e-6)

    # gsplat: same EWA projection, conic and depth; its radius rule (3.33 sigma per axis) differs
    covars, _ = gs._quat_scale_to_covar_preci(quats, torch.exp(scales), compute_preci=False)
    g_radii, g_mean2d, g_depth, g_conic, _ = gs._fully_fused_projection(means, covars, viewmat[None], K[None],
                                                                          WIDTH, HEIGHT)
    on = radius > 0
    np.testing.assert_allclose(mean2d[on], g_mean2d[0].numpy()[on], rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(conic[on], g_conic[0].numpy()[on], rtol=1e-4, atol=1e-7)
    np.testing.assert_allclose(depth, g_depth[0].numpy(), rtol=1e-6, atol=1e-6)
    behind = g_depth[0].numpy() <= 0.01
    assert behind.any() and (radius[behind] == 0).all() and (g_radii[0].numpy()[behind] == 0).all()


def test_projection_backward_matches_autograd():
    params, viewmat, K = make_scene(300, seed=4)
    params[0] = params[0] * torch.tensor([2.5, 2.5, 1.0])  # many means outside the field of view (clamped)
    leaves = [p.clone().requires_grad_(True) for p in params[:3]]
    mean2d, conic, _, radius = _project(*leaves, viewmat, K, WIDTH, HEIGHT)
    gen = torch.Generator().manual_seed(9)
    v_mean2d, v_conic = torch.randn(300, 2, generator=gen), torch.randn(300, 3, generator=gen) * 30
    ((mean2d * v_mean2d).sum() + (conic * v_conic).sum()).backward()
    grads = project_backward(*(p.numpy() for p in params[:3]), viewmat.numpy(), K.numpy(), WIDTH, HEIGHT,
                             radius.numpy(), v_mean2d.numpy(), v_conic.numpy())
    u = mean2d.detach()[:, 0]
    assert ((radius > 0) & ((u < 0) | (u > WIDTH))).any()  # some visible Gaussians have clamped Jacobians
    for got, leaf in zip(grads, leaves):
        want = leaf.grad
        torch.testing.assert_close(torch.from_numpy(got), want, rtol=1e-3, atol=1e-4 * float(want.abs().max()))


@pytest.mark.parametrize("binner", [bin_tiles, _bin_tiles])
def test_binning_lists_every_touched_tile_in_depth_order(binner):
    params, viewmat, K = make_scene(300, seed=6)
    mean2d, conic, depth, radius = (torch.from_numpy(a) for a in project(
        *(p.numpy() for p in params[:3]), viewmat.numpy(), K.numpy(), WIDTH, HEIGHT))
    depth[:50] = depth[50:100]  # ties, to be broken by index
    offsets, ids = binner(mean2d, radius, depth, WIDTH, HEIGHT)
    tiles_x, tiles_y = tile_grid(WIDTH, HEIGHT)
    assert (tiles_x, tiles_y) == (4, 3) and offsets.shape == (13,)
    for tile in range(tiles_x * tiles_y):
        x0, y0 = (tile % tiles_x) * TILE_SIZE, (tile // tiles_x) * TILE_SIZE
        expected = [
            g for g in range(300)
            if radius[g] > 0
            and x0 < mean2d[g, 0] + radius[g] and mean2d[g, 0] - radius[g] < x0 + TILE_SIZE
            and y0 < mean2d[g, 1] + radius[g] and mean2d[g, 1] - radius[g] < y0 + TILE_SIZE
        ]
        expected.sort(key=lambda g: (float(depth[g]), g))
        assert ids[offsets[tile]:offsets[tile + 1]].tolist() == expected


@pytest.mark.parametrize("size", [(96, 72), (1280, 720), (1000, 17)])
def test_binning_kernel_equals_its_torch_twin(size):
    """The counting sort against the twin's sort of every tile pair: Gaussians off screen, straddling and
    beyond the edges, culled (radius 0), wider than the image, depth ties."""
    width, height = size
    rng = np.random.default_rng(width)
    count = 20_000
    mean2d = torch.from_numpy(rng.uniform(-200, [width + 200, height + 200], (count, 2)).astype(np.float32))
    radius = torch.from_numpy(np.where(rng.random(count) < 0.2, 0, rng.integers(1, 60, count)).astype(np.int32))
    radius[:5] = 3 * max(width, height)
    depth = torch.from_numpy(rng.integers(0, 500, count).astype(np.float32))
    got, want = bin_tiles(mean2d, radius, depth, width, height), _bin_tiles(mean2d, radius, depth, width, height)
    assert got[0].dtype == want[0].dtype == got[1].dtype == want[1].dtype == torch.int32
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1]) and len(got[1]) > 10_000


def test_no_visible_gaussian_gives_background_and_zero_gradients():
    params, viewmat, K = make_scene(50, seed=7)
    behind = torch.tensor([0.3, -0.2, -5.0]) - viewmat[:3, 3]  # camera frame, 5 units behind
    params[0] = (behind @ viewmat[:3, :3]).expand(50, 3) + 0.1 * params[0]
    background = torch.tensor([0.3, 0.6, 0.1])
    (image, visible, grads), (ref_image, ref_visible, ref_grads) = _both(params, viewmat, K, background)
    assert not visible.any() and not ref_visible.any()
    torch.testing.assert_close(image, background.expand(HEIGHT, WIDTH, 3), rtol=0, atol=0)
    torch.testing.assert_close(ref_image, image, rtol=0, atol=0)
    for grad, ref_grad in zip(grads, ref_grads):
        assert grad is not None and not grad.any()
        assert ref_grad is not None and not ref_grad.any()


def test_behind_camera_gaussians_are_invisible_with_zero_gradient():
    params, viewmat, K = make_scene(200, seed=8)
    (_, visible, grads), (_, ref_visible, ref_grads) = _both(params, viewmat, K)
    depth = (params[0] @ viewmat[:3, :3].T + viewmat[:3, 3])[:, 2]
    behind = depth <= 0.01
    assert behind.sum() >= 10
    assert not visible[behind].any()
    assert torch.equal(visible, ref_visible)
    for grad in grads:
        assert not grad[behind].any()
    _assert_grads_close(grads, ref_grads)


def test_degenerate_scales_match_reference():
    params, viewmat, K = make_scene(200, seed=10)
    params[1][:60, 0] = -25.0  # flat discs
    params[1][60:100] = -25.0  # points: only the 0.3-pixel blur remains
    (image, visible, grads), (ref_image, ref_visible, ref_grads) = _both(params, viewmat, K)
    assert torch.isfinite(image).all()
    torch.testing.assert_close(image, ref_image, rtol=0, atol=1e-5)
    assert torch.equal(visible, ref_visible) and visible[60:100].any()
    _assert_grads_close(grads, ref_grads)


def test_gaussian_covering_the_whole_image():
    params, viewmat, K = make_scene(40, seed=11)
    cam_centre = -viewmat[:3, :3].T @ viewmat[:3, 3]
    params[0][0] = cam_centre + viewmat[2, :3] * 3.0  # 3 units straight ahead
    params[1][0] = torch.tensor([0.5, 0.5, 0.5])  # ~1.6 units wide: fills the view
    params[3][0] = 0.0
    (image, visible, grads), (ref_image, _, ref_grads) = _both(params, viewmat, K)
    mean2d, _, _, radius = _project(*params[:3], viewmat, K, WIDTH, HEIGHT)
    assert visible[0] and radius[0] > WIDTH
    torch.testing.assert_close(image, ref_image, rtol=0, atol=1e-5)
    _assert_grads_close(grads, ref_grads)
    faint = [p.clone() for p in params]
    faint[3][0] = -30.0  # the same scene without the big Gaussian's contribution
    without, _ = render(*faint, viewmat, K, WIDTH, HEIGHT)
    corners = (slice(None, None, HEIGHT - 1), slice(None, None, WIDTH - 1))
    assert ((image[corners] - without[corners]).abs().amax(-1) > 0.05).all()  # it reaches every corner


@pytest.mark.parametrize("fn", [render, _render])
@pytest.mark.parametrize("which", range(7))
@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_non_finite_input_raises(fn, which, bad):
    params, viewmat, K = make_scene(20, seed=12)
    args = [*params, viewmat, K]
    args[which] = args[which].clone()
    args[which].view(-1)[0] = bad
    name = [*NAMES, "viewmat", "K"][which]
    with pytest.raises(ValueError, match=f"{name} contains NaN or inf"):
        fn(*args, WIDTH, HEIGHT)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_all_finite_matches_torch_isfinite(bad):
    """``all_finite``'s one pass against torch's ``isfinite(...).all()`` (its twin), on contiguous, strided
    and empty tensors with one bad value anywhere (first, inside, last) or none."""
    gen = torch.Generator().manual_seed(21)
    base = torch.randn(1000, 15, 3, generator=gen)
    answers = []
    for where in (None, 0, 12_345, base.numel() - 1):
        x = base.clone()
        if where is not None:
            x.view(-1)[where] = bad
        for view in (x, x[:, 3:, 1], x[::3], x[:0]):
            answers.append(all_finite(view))
            assert answers[-1] == bool(torch.isfinite(view).all())
    assert answers.count(False) == 5  # the whole tensor three times, x[::3] with the first and the last value


def test_bad_arguments_raise():
    params, viewmat, K = make_scene(20, seed=13)
    with pytest.raises(ValueError, match="quats contains a zero quaternion"):
        render(params[0], params[1], torch.zeros(20, 4), *params[3:], viewmat, K, WIDTH, HEIGHT)
    with pytest.raises(ValueError, match=r"colors must have shape \[20, 3\]"):
        render(*params[:4], params[4][:, :2], viewmat, K, WIDTH, HEIGHT)
    with pytest.raises(ValueError, match="must be float32"):
        render(params[0].double(), *params[1:], viewmat, K, WIDTH, HEIGHT)
    with pytest.raises(ValueError, match="width must be a positive int"):
        render(*params, viewmat, K, 0, HEIGHT)
    with pytest.raises(ValueError, match=r"background must have shape \[3\]"):
        render(*params, viewmat, K, WIDTH, HEIGHT, torch.zeros(4))


def test_visible_is_radius_positive_and_render_is_deterministic():
    params, viewmat, K = make_scene(300, seed=14)
    image_a, visible = render(*params, viewmat, K, WIDTH, HEIGHT)
    image_b, _ = render(*params, viewmat, K, WIDTH, HEIGHT)
    radius = _project(*params[:3], viewmat, K, WIDTH, HEIGHT)[3]
    assert visible.dtype == torch.bool and torch.equal(visible, radius > 0)
    assert torch.equal(image_a, image_b)
    assert not visible.all() and visible.any()


@pytest.mark.parametrize("fn", [render, _render])
def test_empty_scene_renders_background(fn):
    leaves = [torch.zeros(shape, requires_grad=True) for shape in ((0, 3), (0, 3), (0, 4), (0,), (0, 3))]
    _, viewmat, K = make_scene(1)
    background = torch.tensor([0.25, 0.5, 0.75])
    image, visible = fn(*leaves, viewmat, K, WIDTH, HEIGHT, background)
    image.sum().backward()
    assert visible.shape == (0,)
    torch.testing.assert_close(image, background.expand(HEIGHT, WIDTH, 3), rtol=0, atol=0)
    assert all(leaf.grad is not None and leaf.grad.numel() == 0 for leaf in leaves)
