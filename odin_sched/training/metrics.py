"""Image quality metrics used by training: PSNR and SSIM (as in the reference 3DGS code).

Images are torch float tensors ``[H, W, 3]`` with values in [0, 1]. SSIM uses an 11 x 11 Gaussian
window with sigma 1.5, zero padding of 5 pixels and the constants C1 = 0.01^2, C2 = 0.03^2, averaged over
all pixels and channels, exactly like ``utils/loss_utils.py::ssim`` of 3DGS.
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


def ssim(image: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean structural similarity of two images (differentiable).

    image, target: torch.Tensor  # [H, W, 3] float in [0, 1]
    Returns a scalar tensor; 1 for identical images.
    """
    channels = image.shape[-1]
    window = gaussian_window().to(image.device, image.dtype).expand(channels, 1, SSIM_WINDOW, SSIM_WINDOW).contiguous()
    x = image.permute(2, 0, 1).unsqueeze(0)
    y = target.permute(2, 0, 1).unsqueeze(0)

    def blur(t):
        return F.conv2d(t, window, padding=SSIM_WINDOW // 2, groups=channels)

    mu_x, mu_y = blur(x), blur(y)
    var_x = blur(x * x) - mu_x ** 2
    var_y = blur(y * y) - mu_y ** 2
    cov = blur(x * y) - mu_x * mu_y
    num = (2.0 * mu_x * mu_y + SSIM_C1) * (2.0 * cov + SSIM_C2)
    den = (mu_x ** 2 + mu_y ** 2 + SSIM_C1) * (var_x + var_y + SSIM_C2)
    return torch.mean(num / den)

