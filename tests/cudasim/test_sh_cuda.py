"""The SH colour CUDA kernels under the simulator (NUMBA_ENABLE_CUDASIM=1) against the torch twin,
forward and backward, degrees 0 to 3 (a handful of Gaussians)."""

import numpy as np
import pytest
import torch
from numba import cuda

from kernels._device import SIMULATED
from kernels.splat.sh import _sh_to_colors, sh_to_colors, sh_to_colors_backward

torch.set_num_threads(1)


@pytest.mark.parametrize("degree", (0, 1, 2, 3))
def test_cuda_sh_kernels_match_the_twin(degree):
    gen = torch.Generator().manual_seed(degree)
    means = torch.randn(6, 3, generator=gen)
    coeffs = torch.randn(6, 16, 3, generator=gen) * 1.5
    campos = torch.tensor([0.2, 0.1, -3.0])
    v = torch.randn(6, 3, generator=gen)
    m, c = means.clone().requires_grad_(True), coeffs.clone().requires_grad_(True)
    expected = _sh_to_colors(m, c, campos, degree)
    ((expected * v).sum() + 0 * m.sum()).backward()

    dev = [cuda.to_device(t.numpy()) for t in (means, coeffs)]
    colors = sh_to_colors(*dev, campos.numpy(), degree)
    assert cuda.devicearray.is_cuda_ndarray(colors)
    np.testing.assert_allclose(colors.copy_to_host(), expected.detach().numpy(), rtol=0, atol=2e-6)
    v_means, v_coeffs = sh_to_colors_backward(*dev, campos.numpy(), degree, cuda.to_device(v.numpy()))
    np.testing.assert_allclose(v_means.copy_to_host(), m.grad.numpy(), rtol=0, atol=2e-5)
    np.testing.assert_allclose(v_coeffs.copy_to_host(), c.grad.numpy(), rtol=0, atol=1e-6)


def test_render_on_device_with_sh_matches_the_cpu_render():
    from kernels.splat import render

    gen = torch.Generator().manual_seed(9)
    count = 5
    means = torch.randn(count, 3, generator=gen) * 0.3 + torch.tensor([0.0, 0.0, 3.0])
    scales = torch.randn(count, 3, generator=gen) * 0.3 - 1.5
    quats = torch.randn(count, 4, generator=gen)
    opacities = torch.randn(count, generator=gen) + 1.0
    coeffs = torch.randn(count, 9, 3, generator=gen) * 0.5
    K = torch.tensor([[20.0, 0.0, 8.0], [0.0, 20.0, 8.0], [0.0, 0.0, 1.0]])
    out = []
    for on_device in (False, True):
        # on a real GPU the device run takes CUDA tensors; the simulator's takes CPU tensors
        device = "cuda" if on_device and not SIMULATED else "cpu"
        leaves = [t.clone().to(device).requires_grad_(True) for t in (means, scales, quats, opacities, coeffs)]
        image, _ = render(*leaves, torch.eye(4, device=device), K.to(device), 16, 16, on_device=on_device,
                          sh_degree=2)
        image.sum().backward()
        out.append((image.detach().cpu().numpy(), leaves[0].grad.cpu().numpy(), leaves[4].grad.cpu().numpy()))
    for cpu, dev in zip(*out):
        np.testing.assert_allclose(dev, cpu, rtol=1e-4, atol=1e-5)
