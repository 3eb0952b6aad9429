"""The CUDA Adam kernel (``kernels.adam_cuda``) against the CPU kernel (the same numbers) and the torch twin."""
import torch

from kernels.adam import _adam_rows, adam_rows
from kernels.adam_cuda import adam_rows_cuda
from pregel.device_path import torch_device

BETAS, EPS = (0.9, 0.999), 1e-15


def test_cuda_kernel_equals_the_cpu_kernel_and_leaves_other_rows():
    g, tail = 40, (5, 3)
    gen = torch.Generator().manual_seed(0)
    start = [torch.randn((g,) + tail, generator=gen), 0.1 * torch.randn((g,) + tail, generator=gen),
             0.01 * torch.rand((g,) + tail, generator=gen)]
    rows = torch.tensor([1, 4, 5, 17, 30, 39])
    grads = torch.randn(9, *tail, generator=gen)  # more gradient rows than stepped ones, picked out of order
    grad_rows = torch.tensor([8, 0, 3, 3, 6, 1])
    t = torch.tensor([1.0, 2.0, 7.0, 30.0, 3.0, 1.0], dtype=torch.float64)
    size, bias2 = (1e-2 / (1 - BETAS[0] ** t)).float(), torch.sqrt(1 - BETAS[1] ** t).float()
    dev = torch_device(0)
    on_device = [x.clone().to(dev) for x in start]
    adam_rows_cuda(*(x.view(g, -1) for x in on_device), rows.to(dev), grads.reshape(9, -1).to(dev), grad_rows.to(dev),
                   size.to(dev), bias2.to(dev), *BETAS, EPS)
    cpu, twin = [x.clone() for x in start], [x.clone() for x in start]
    adam_rows(*cpu, rows, grads, size, bias2, *BETAS, EPS, grad_rows=grad_rows)
    _adam_rows(*twin, rows, grads, size, bias2, *BETAS, EPS, grad_rows=grad_rows)
    others = torch.ones(g, dtype=torch.bool)
    others[rows] = False
    for got, want, ref, old in zip(on_device, cpu, twin, start):
        got = got.cpu()
        assert torch.equal(got, want)  # float32 with correctly rounded division and square root on both
        assert torch.equal(got[others], old[others]) and not torch.equal(got[rows], old[rows])
        torch.testing.assert_close(got, ref, rtol=1e-6, atol=1e-9)
