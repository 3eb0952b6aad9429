"""PSNR and SSIM against independent NumPy formulas."""
import numpy as np
import torch

from odin_sched.training.metrics import psnr, ssim


def slow_ssim(x, y, size=11, sigma=1.5):
    """Direct per-pixel SSIM with a Gaussian window and zero padding, as 3DGS computes it."""
    half = size // 2
    r = np.arange(size) - half
    g = np.exp(-r ** 2 / (2 * sigma ** 2))
    w = np.outer(g, g) / g.sum() ** 2
    h, wd, c = x.shape
    xp = np.pad(x, ((half, half), (half, half), (0, 0)))
    yp = np.pad(y, ((half, half), (half, half), (0, 0)))
    c1, c2 = 0.01 ** 2, 0.03 ** 2
    total = 0.0
    for i in range(h):
        for j in range(wd):
            for k in range(c):
                px = xp[i:i + size, j:j + size, k]
                py = yp[i:i + size, j:j + size, k]
                mx, my = (w * px).sum(), (w * py).sum()
                vx = (w * px * px).sum() - mx ** 2
                vy = (w * py * py).sum() - my ** 2
                cxy = (w * px * py).sum() - mx * my
                total += ((2 * mx * my + c1) * (2 * cxy + c2)) / ((mx ** 2 + my ** 2 + c1) * (vx + vy + c2))
    return total / (h * wd * c)


def test_ssim_matches_direct_formula():
    rng = np.random.default_rng(0)
    x = rng.random((14, 17, 3))
    y = np.clip(x + 0.2 * rng.standard_normal(x.shape), 0, 1)
    got = ssim(torch.tensor(x), torch.tensor(y)).item()
    assert abs(got - slow_ssim(x, y)) < 1e-10


def test_ssim_identical_is_one_and_float32_close():
    rng = np.random.default_rng(1)
    x = rng.random((16, 16, 3)).astype(np.float32)
    y = rng.random((16, 16, 3)).astype(np.float32)
    assert abs(ssim(torch.tensor(x), torch.tensor(x)).item() - 1.0) < 1e-5
    assert abs(ssim(torch.tensor(x), torch.tensor(y)).item() - slow_ssim(x.astype(float), y.astype(float))) < 1e-4


def test_ssim_is_differentiable():
    x = torch.rand(12, 12, 3, dtype=torch.float64, requires_grad=True)
    y = torch.rand(12, 12, 3, dtype=torch.float64)
    assert torch.autograd.gradcheck(lambda a: ssim(a, y), (x,))


def test_psnr_known_value():
    x = torch.zeros(8, 8, 3)
    y = torch.full((8, 8, 3), 0.1)
    assert abs(psnr(x, y).item() - 20.0) < 1e-4
