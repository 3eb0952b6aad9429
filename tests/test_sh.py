"""Spherical-harmonics colours (``kernels.splat.sh``) against gsplat's torch implementation, the
closed forms of the reference constants and torch autograd through the reference twin; and ``render``
with SH coefficients against the dense torch reference renderer."""

import math

import numpy as np
import pytest
import torch
from gsplat.cuda._torch_impl import _spherical_harmonics

from kernels.splat import render
from kernels.splat.reference import _render
from kernels.splat.sh import (SH_C0, SH_C1, SH_C2, SH_C3, _sh_basis, _sh_to_colors, camera_centre, num_bases,
                              sh_to_colors, sh_to_colors_backward)

torch.set_num_threads(1)
DEGREES = (0, 1, 2, 3)


def _gaussians(count=64, scale=1.5, seed=0):
    gen = torch.Generator().manual_seed(seed)
    means = torch.randn(count, 3, generator=gen)
    coeffs = torch.randn(count, 16, 3, generator=gen) * scale  # large enough that some channels clamp
    campos = torch.tensor([0.3, -0.2, -4.0])
    return means, coeffs, campos


def test_constants_are_the_real_sh_normalisations():
    """The reference code's constants, from the closed forms of the real SH normalisations."""
    r = 1 / math.sqrt(math.pi)
    assert SH_C0 == pytest.approx(0.5 * r, rel=1e-15) and SH_C0 == 0.28209479177387814
    assert SH_C1 == pytest.approx(0.5 * math.sqrt(3) * r, rel=1e-15)
    c2 = (0.5 * math.sqrt(15), -0.5 * math.sqrt(15), 0.25 * math.sqrt(5), -0.5 * math.sqrt(15), 0.25 * math.sqrt(15))
    assert SH_C2 == pytest.approx(tuple(c * r for c in c2), rel=1e-15)
    c3 = (-0.25 * math.sqrt(35 / 2), 0.5 * math.sqrt(105), -0.25 * math.sqrt(21 / 2), 0.25 * math.sqrt(7),
          -0.25 * math.sqrt(21 / 2), 0.25 * math.sqrt(105), -0.25 * math.sqrt(35 / 2))
    assert SH_C3 == pytest.approx(tuple(c * r for c in c3), rel=1e-15)


def test_basis_is_orthonormal_on_the_sphere():
    """The 16 basis functions integrate to the identity over the unit sphere (a Fibonacci lattice)."""
    n = 200_000
    i = torch.arange(n, dtype=torch.float64) + 0.5
    z = 1 - 2 * i / n
    phi = math.pi * (1 + 5 ** 0.5) * i
    rho = torch.sqrt(1 - z * z)
    dirs = torch.stack([rho * torch.cos(phi), rho * torch.sin(phi), z], dim=1)
    basis = _sh_basis(3, dirs)
    gram = basis.T @ basis * (4 * math.pi / n)
    np.testing.assert_allclose(gram.numpy(), np.eye(16), atol=1e-4)


@pytest.mark.parametrize("degree", DEGREES)
def test_colors_match_gsplat_torch_sh(degree):
    means, coeffs, campos = _gaussians()
    expected = torch.clamp_min(_spherical_harmonics(degree, means - campos, coeffs) + 0.5, 0.0)
    assert (expected == 0).any() and (expected > 0).any()
    np.testing.assert_allclose(_sh_to_colors(means, coeffs, campos, degree).numpy(), expected.numpy(),
                               rtol=0, atol=2e-6)
    np.testing.assert_allclose(sh_to_colors(means.numpy(), coeffs.numpy(), campos.numpy(), degree),
                               expected.numpy(), rtol=0, atol=2e-6)


@pytest.mark.parametrize("degree", DEGREES)
def test_twin_gradients_match_autograd_through_gsplat(degree):
    means, coeffs, campos = _gaussians(seed=1)
    v = torch.randn(means.shape[0], 3, generator=torch.Generator().manual_seed(2))
    grads = []
    for fn in (lambda m, c: _sh_to_colors(m, c, campos, degree),
               lambda m, c: torch.clamp_min(_spherical_harmonics(degree, m - campos, c) + 0.5, 0.0)):
        m, c = means.clone().requires_grad_(True), coeffs.clone().requires_grad_(True)
        ((fn(m, c) * v).sum() + 0 * m.sum()).backward()
        grads.append((m.grad.numpy(), c.grad.numpy()))
    np.testing.assert_allclose(grads[0][0], grads[1][0], rtol=0, atol=2e-5)
    np.testing.assert_allclose(grads[0][1], grads[1][1], rtol=0, atol=2e-6)


@pytest.mark.parametrize("degree", DEGREES)
def test_cpu_backward_matches_autograd_through_the_twin(degree):
    means, coeffs, campos = _gaussians(seed=3)
    v = torch.randn(means.shape[0], 3, generator=torch.Generator().manual_seed(4))
    m, c = means.clone().requires_grad_(True), coeffs.clone().requires_grad_(True)
    colors = _sh_to_colors(m, c, campos, degree)
    ((colors * v).sum() + 0 * m.sum()).backward()
    v_means, v_coeffs = sh_to_colors_backward(means.numpy(), coeffs.numpy(), campos.numpy(), degree, v.numpy())
    np.testing.assert_allclose(v_means, m.grad.numpy(), rtol=0, atol=2e-5)
    np.testing.assert_allclose(v_coeffs, c.grad.numpy(), rtol=0, atol=1e-6)
    bases = num_bases(degree)
    assert not v_coeffs[:, bases:].any()  # coefficients above the degree are not used
    clamped = colors.detach().numpy() == 0
    assert clamped.any() and not v_coeffs[:, :bases][np.broadcast_to(clamped[:, None], v_coeffs[:, :bases].shape)].any()
    if degree == 0:
        assert not v_means.any()  # the DC colour does not depend on the direction


def test_bad_arguments_raise_one_clear_error():
    means, coeffs, campos = _gaussians(count=3)
    with pytest.raises(ValueError, match="degree must be an int in"):
        sh_to_colors(means.numpy(), coeffs.numpy(), campos.numpy(), 4)
    with pytest.raises(ValueError, match="degree 2 needs 9"):
        sh_to_colors(means.numpy(), coeffs[:, :4].contiguous().numpy(), campos.numpy(), 2)


def _camera():
    viewmat = torch.eye(4)
    angle = 0.3
    viewmat[:3, :3] = torch.tensor([[math.cos(angle), 0.0, math.sin(angle)], [0.0, 1.0, 0.0],
                                    [-math.sin(angle), 0.0, math.cos(angle)]])
    viewmat[:3, 3] = torch.tensor([0.1, -0.05, 3.0])
    K = torch.tensor([[40.0, 0.0, 24.0], [0.0, 40.0, 16.0], [0.0, 0.0, 1.0]])
    return viewmat, K


def _splats(count=24, seed=5):
    gen = torch.Generator().manual_seed(seed)
    means = torch.randn(count, 3, generator=gen) * 0.6
    scales = torch.randn(count, 3, generator=gen) * 0.3 - 2.0
    quats = torch.randn(count, 4, generator=gen)
    opacities = torch.randn(count, generator=gen) + 1.0
    coeffs = torch.randn(count, 16, 3, generator=gen) * 0.6
    return [means, scales, quats, opacities, coeffs]


@pytest.mark.parametrize("degree", DEGREES)
def test_render_with_sh_matches_the_reference_renderer(degree):
    params = _splats()
    viewmat, K = _camera()
    v_image = torch.randn(32, 48, 3, generator=torch.Generator().manual_seed(6))
    out = []
    for fn in (render, _render):
        leaves = [p.clone().requires_grad_(True) for p in params]
        image, visible = fn(*leaves, viewmat, K, 48, 32, sh_degree=degree)
        (image * v_image).sum().backward()
        out.append((image.detach().numpy(), [leaf.grad.numpy() for leaf in leaves]))
    assert visible.sum() >= 10
    np.testing.assert_allclose(out[0][0], out[1][0], rtol=0, atol=2e-5)
    for name, ours, ref in zip(("means", "scales", "quats", "opacities", "coeffs"), out[0][1], out[1][1]):
        np.testing.assert_allclose(ours, ref, rtol=1e-3, atol=2e-4, err_msg=name)


def test_render_at_degree_0_equals_render_of_the_dc_colour():
    """RGB c as its DC coefficient (c - 0.5) / C0 renders as c (as the reference's RGB2SH)."""
    params = _splats()
    viewmat, K = _camera()
    rgb = torch.rand(params[0].shape[0], 3, generator=torch.Generator().manual_seed(7))
    direct, _ = render(*params[:4], rgb, viewmat, K, 48, 32)
    via_sh, _ = render(*params[:4], ((rgb - 0.5) / SH_C0)[:, None, :], viewmat, K, 48, 32, sh_degree=0)
    np.testing.assert_allclose(via_sh.numpy(), direct.numpy(), rtol=0, atol=1e-6)


def test_camera_centre_is_minus_rotation_transpose_times_translation():
    viewmat, _ = _camera()
    centre = camera_centre(viewmat.numpy())
    world = np.append(centre, 1.0)
    np.testing.assert_allclose((viewmat.numpy().astype(np.float64) @ world)[:3], 0.0, atol=1e-6)
