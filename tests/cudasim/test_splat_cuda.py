"""CUDA splatting kernels under the simulator (NUMBA_ENABLE_CUDASIM=1) against the torch reference.

A handful of Gaussians on a 32 x 16 image (two tiles): the projection, both raster passes and the
projection backward run as CUDA kernels on simulated device arrays; binning runs in torch on the host.
"""

import numpy as np
import torch
from numba import cuda

from kernels.splat.binning import bin_tiles
from kernels.splat.projection import project, project_backward
from kernels.splat.rasterize_backward import rasterize_backward
from kernels.splat.rasterize_forward import rasterize_forward
from kernels.splat.reference import _project, _render

torch.set_num_threads(1)
WIDTH, HEIGHT = 32, 16
COUNT = 7


def _scene():
    gen = torch.Generator().manual_seed(0)
    means = torch.randn(COUNT, 3, generator=gen) * torch.tensor([0.6, 0.3, 0.3]) + torch.tensor([0.0, 0.0, 3.0])
    means[-1, 2] = -1.0  # behind the camera
    scales = torch.randn(COUNT, 3, generator=gen) * 0.3 - 1.8
    quats = torch.randn(COUNT, 4, generator=gen)
    opacities = torch.randn(COUNT, generator=gen) + 1.0
    colors = torch.rand(COUNT, 3, generator=gen)
    viewmat = torch.eye(4)
    viewmat[:3, 3] = torch.tensor([0.05, -0.02, 0.1])
    K = torch.tensor([[30.0, 0.0, 16.0], [0.0, 30.0, 8.0], [0.0, 0.0, 1.0]])
    return [means, scales, quats, opacities, colors], viewmat, K


def test_cuda_kernels_match_reference_forward_and_backward():
    params, viewmat, K = _scene()
    background = (0.1, 0.2, 0.3)
    leaves = [p.clone().requires_grad_(True) for p in params]
    ref_image, ref_visible = _render(*leaves, viewmat, K, WIDTH, HEIGHT, torch.tensor(background))
    v_image = torch.randn(HEIGHT, WIDTH, 3, generator=torch.Generator().manual_seed(1))
    (ref_image * v_image).sum().backward()

    dev = [cuda.to_device(p.numpy()) for p in params[:3]]
    mean2d, conic, depth, radius = project(*dev, viewmat.numpy(), K.numpy(), WIDTH, HEIGHT)
    ref_proj = [t.detach().numpy() for t in _project(*params[:3], viewmat, K, WIDTH, HEIGHT)]
    np.testing.assert_array_equal(radius.copy_to_host(), ref_proj[3])
    np.testing.assert_allclose(mean2d.copy_to_host(), ref_proj[0], rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(conic.copy_to_host(), ref_proj[1], rtol=1e-4, atol=1e-7)
    assert np.array_equal(radius.copy_to_host() > 0, ref_visible.numpy()) and ref_visible.sum() >= 4

    offsets, ids = bin_tiles(*(torch.from_numpy(a.copy_to_host()) for a in (mean2d, radius, depth)), WIDTH, HEIGHT)
    opacity = cuda.to_device(torch.sigmoid(params[3]).numpy())
    colors = cuda.to_device(params[4].numpy())
    raster = (cuda.to_device(offsets.numpy()), cuda.to_device(ids.numpy()), mean2d, conic, opacity, colors)
    image, final_t, n_contrib = rasterize_forward(*raster, background, WIDTH, HEIGHT)
    np.testing.assert_allclose(image.copy_to_host(), ref_image.detach().numpy(), rtol=0, atol=1e-5)

    v_mean2d, v_conic, v_opacity, v_colors = rasterize_backward(
        *raster, background, WIDTH, HEIGHT, final_t, n_contrib, cuda.to_device(v_image.numpy()))
    grads = project_backward(*dev, viewmat.numpy(), K.numpy(), WIDTH, HEIGHT, radius, v_mean2d, v_conic)
    sig = torch.sigmoid(params[3]).numpy()
    got = [g.copy_to_host() for g in grads] + [v_opacity.copy_to_host() * sig * (1 - sig), v_colors.copy_to_host()]
    for name, value, leaf in zip(("means", "scales", "quats", "opacities", "colors"), got, leaves):
        want = leaf.grad.numpy()
        np.testing.assert_allclose(value, want, rtol=1e-3, atol=1e-4 * np.abs(want).max(), err_msg=name)
    assert np.abs(leaves[0].grad.numpy()[:-1]).min() > 0  # every visible Gaussian got a gradient
