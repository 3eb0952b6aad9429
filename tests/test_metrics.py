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
    y = torch.rand(12, 12, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a: ssim(a, y.detach()), (x,))
    assert torch.autograd.gradcheck(ssim, (x, y))


def autograd_ssim(x, y):
    """SSIM as the 3DGS reference writes it (five 2D convolutions), differentiated by torch's autograd."""
    window = torch.outer(*(2 * [torch.exp(-(torch.arange(11.0, dtype=x.dtype) - 5) ** 2 / 4.5)]))
    window = (window / window.sum()).expand(3, 1, 11, 11)
    a, b = x.permute(2, 0, 1)[None], y.permute(2, 0, 1)[None]
    mu_a, mu_b = (torch.nn.functional.conv2d(t, window, padding=5, groups=3) for t in (a, b))
    blur = [torch.nn.functional.conv2d(t, window, padding=5, groups=3) for t in (a * a, b * b, a * b)]
    var_a, var_b, cov = blur[0] - mu_a ** 2, blur[1] - mu_b ** 2, blur[2] - mu_a * mu_b
    c1, c2 = 0.01 ** 2, 0.03 ** 2
    return (((2 * mu_a * mu_b + c1) * (2 * cov + c2)) / ((mu_a ** 2 + mu_b ** 2 + c1) * (var_a + var_b + c2))).mean()


def test_ssim_gradients_equal_autograd_of_the_reference_formula():
    rng = np.random.default_rng(3)
    x0 = rng.random((23, 31, 3))
    y0 = np.clip(x0 + 0.1 * rng.standard_normal(x0.shape), 0, 1)
    for image_grad, target_grad in ((True, False), (True, True), (False, True)):
        got, want = [], []
        for fn, out in ((ssim, got), (autograd_ssim, want)):
            x = torch.tensor(x0, requires_grad=image_grad)
            y = torch.tensor(y0, requires_grad=target_grad)
            value = fn(x, y)
            value.backward()
            out += [value.detach(), x.grad, y.grad]
        assert abs(got[0].item() - want[0].item()) < 1e-12
        for g, w in zip(got[1:], want[1:]):
            assert (g is None) == (w is None)
            if g is not None:
                assert torch.allclose(g, w, rtol=1e-9, atol=1e-13)


def test_psnr_known_value():
    x = torch.zeros(8, 8, 3)
    y = torch.full((8, 8, 3), 0.1)
    assert abs(psnr(x, y).item() - 20.0) < 1e-4
