"""Rendering with only some of the Gaussians gives the same image and the same gradients, bit for bit,
as rendering with all of them, provided every visible Gaussian is among the rendered ones (order kept).

The distributed trainer relies on this: a rank renders an image with only the Gaussians of the cells
the image can see. The oracle is the render with all Gaussians.
"""
import numpy as np
import pytest
import torch

from kernels.splat import render
from kernels.splat.activation import _sigmoid, sigmoid, sigmoid_vjp
from odin_sched.scenes.scene_gen import generate_scene

NAMES = ("means", "scales", "quats", "opacities", "colors")


def _grads(params, scene, cam, weights, sh_degree):
    leaves = {k: v.clone().requires_grad_(True) for k, v in params.items()}
    image, visible = render(**leaves, viewmat=torch.from_numpy(scene.viewmats[cam]),
                            K=torch.from_numpy(scene.Ks[cam]), width=scene.width, height=scene.height,
                            sh_degree=sh_degree)
    (image * weights).sum().backward()
    return image.detach(), visible, {k: v.grad for k, v in leaves.items()}


@pytest.mark.parametrize("layout,sh_degree", [("city", None), ("objects", None), ("city", 3)])
def test_subset_render_is_bitwise_equal(layout, sh_degree):
    scene = generate_scene(600, 6, 40, 28, seed=3, layout=layout)
    params = {k: torch.from_numpy(getattr(scene, k)) for k in NAMES}
    rng = np.random.default_rng(0)
    if sh_degree is not None:  # view-dependent colour: SH coefficients [G, 16, 3]
        params["colors"] = torch.from_numpy(rng.standard_normal((scene.num_gaussians, 16, 3)).astype(np.float32))
    seen = 0
    for cam in range(scene.num_cameras):
        weights = torch.from_numpy(rng.standard_normal((scene.height, scene.width, 3)).astype(np.float32))
        image, visible, grads = _grads(params, scene, cam, weights, sh_degree)
        seen += int(visible.any())
        keep = visible.numpy() | (rng.random(scene.num_gaussians) < 0.3)  # all visible + some others
        idx = torch.from_numpy(np.flatnonzero(keep))
        sub_image, sub_visible, sub_grads = _grads({k: v[idx] for k, v in params.items()}, scene, cam, weights,
                                                   sh_degree)
        assert torch.equal(sub_image, image)
        assert torch.equal(sub_visible, visible[idx])
        for name in NAMES:
            assert torch.equal(sub_grads[name], grads[name][idx]), name
    assert seen >= scene.num_cameras // 2


def test_sigmoid_kernel_matches_torch_and_ignores_position():
    x = torch.randn(5003) * 6
    y = torch.from_numpy(sigmoid(x.numpy()))
    torch.testing.assert_close(y, _sigmoid(x), rtol=2e-7, atol=0)
    idx = torch.sort(torch.randperm(5003)[:1777]).values
    assert torch.equal(torch.from_numpy(sigmoid(x[idx].numpy())), y[idx])
    v = torch.randn(5003)
    expected = torch.autograd.grad(torch.sigmoid(x.requires_grad_(True)), x, v)[0]
    got = torch.from_numpy(sigmoid_vjp(y.numpy(), v.numpy()))
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)
