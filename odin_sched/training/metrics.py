"""Image quality metrics used by training: PSNR and SSIM (as in the reference 3DGS code).

Images are torch float tensors ``[H, W, 3]`` with values in [0, 1]. SSIM uses an 11 x 11 Gaussian
window with sigma 1.5, zero padding of 5 pixels and the constants C1 = 0.01^2, C2 = 0.03^2, averaged over
all pixels and channels, exactly like ``utils/loss_utils.py::ssim`` of 3DGS (the same formula; its
gradient is written by hand, ``_Ssim``, so that a megapixel image's backward pass does not keep the
autograd graph's image-sized tensors).
"""
import torch
import torch.nn.functional as F

SSIM_WINDOW = 11
SSIM_SIGMA = 1.5
SSIM_C1 = 0.01 ** 2
SSIM_C2 = 0.03 ** 2


def psnr(image: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Peak signal-to-noise ratio in dB for images in [0, 1].

    image, target: torch.Tensor  # [H, W, 3] float
    Returns a scalar tensor: -10 log10(mean squared error).
    """
    mse = torch.mean((image - target) ** 2)
    return -10.0 * torch.log10(mse)


def gaussian_window(size: int = SSIM_WINDOW, sigma: float = SSIM_SIGMA) -> torch.Tensor:
    """Normalised 2D Gaussian window ``[size, size]`` (outer product of the 1D window)."""
    x = torch.arange(size, dtype=torch.float64) - size // 2
    g = torch.exp(-(x ** 2) / (2.0 * sigma ** 2))
    g = g / g.sum()
    return torch.outer(g, g)


def _blur(maps: torch.Tensor) -> torch.Tensor:
    """Each channel of ``maps`` [1, k, H, W] blurred with the SSIM window (zero padding). The window is
    symmetric, so this is also its own adjoint (the backward pass's blur)."""
    k = maps.shape[1]
    window = gaussian_window().to(maps.device, maps.dtype).expand(k, 1, SSIM_WINDOW, SSIM_WINDOW).contiguous()
    return F.conv2d(maps, window, padding=SSIM_WINDOW // 2, groups=k)


def _ssim_terms(x: torch.Tensor, y: torch.Tensor) -> tuple:
    """Per-pixel terms of SSIM for x, y [1, C, H, W]: (mu_x, mu_y, A1 = 2 mu_x mu_y + C1,
    A2 = 2 cov + C2, B1 = mu_x^2 + mu_y^2 + C1, B2 = var_x + var_y + C2), each [1, C, H, W]
    (var_x + var_y = <x^2 + y^2> - mu_x^2 - mu_y^2, with <.> the blur)."""
    mu_x, mu_y = _blur(x), _blur(y)
    a1 = (mu_x * mu_y).mul_(2.0)
    a2 = _blur(x * y).mul_(2.0).sub_(a1).add_(SSIM_C2)
    a1.add_(SSIM_C1)
    b1 = (mu_x * mu_x).addcmul_(mu_y, mu_y)
    b2 = _blur(x * x + y * y).sub_(b1).add_(SSIM_C2)
    b1.add_(SSIM_C1)
    return mu_x, mu_y, a1, a2, b1, b2


class _Ssim(torch.autograd.Function):
    """Mean SSIM with a hand-written backward that keeps the six per-pixel terms between the passes
    instead of the autograd graph's image-sized tensors (about 400 MB of peak memory at 1280 x 720
    against about 260 MB), with one blurring fewer. With S = A1 A2 / (B1 B2) per pixel, its partials
    are dS/dmu_x = 2 mu_y (A2 - A1) / (B1 B2) - 2 mu_x S (1/B1 - 1/B2), dS/d<x^2> = -S / B2 and
    dS/d<xy> = 2 A1 / (B1 B2) (<.> the blurred moment), so dSSIM/dx = blur(dS/dmu_x) + 2 x blur(dS/d<x^2>)
    + y blur(dS/d<xy>), over the number of terms averaged (and symmetrically for y)."""

    @staticmethod
    def forward(ctx, x, y):
        terms = _ssim_terms(x, y)
        _, _, a1, a2, b1, b2 = terms
        ctx.save_for_backward(x, y, *terms)
        return torch.mean((a1 * a2).div_(b1 * b2))

    @staticmethod
    def backward(ctx, grad):
        x, y, mu_x, mu_y, a1, a2, b1, b2 = ctx.saved_tensors
        scale = grad / mu_x.numel()
        den = b1 * b2
        s = (a1 * a2).div_(den)
        square = _blur((s / b2).mul_(-scale))  # -S / B2: the partial of <x^2> and of <y^2>
        spread = b1.reciprocal().sub_(b2.reciprocal()).mul_(s).mul_(2.0)  # 2 S (1/B1 - 1/B2)
        del s
        cross = _blur((2.0 * scale) * a1 / den)  # 2 A1 / (B1 B2)
        common = (a2 - a1).mul_(2.0).div_(den)  # 2 (A2 - A1) / (B1 B2)
        del den
        grads = []
        for wanted, a, b, mu_a, mu_b in ((0, x, y, mu_x, mu_y), (1, y, x, mu_y, mu_x)):
            if ctx.needs_input_grad[wanted]:
                partial = (common * mu_b).sub_(spread * mu_a).mul_(scale)
                grads.append(_blur(partial).addcmul_(a, square, value=2.0).addcmul_(b, cross))
            else:
                grads.append(None)
        return tuple(grads)


def ssim(image: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean structural similarity of two images (differentiable in both; ``_Ssim``'s backward).

    image, target: torch.Tensor  # [H, W, 3] float in [0, 1]
    Returns a scalar tensor; 1 for identical images.
    """
    return _Ssim.apply(image.permute(2, 0, 1).unsqueeze(0), target.permute(2, 0, 1).unsqueeze(0))
