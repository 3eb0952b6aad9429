"""One training step of batched Gaussian splatting, in pieces that the single-process trainer and the
distributed (Odin) trainer share, so that both compute every number with the same operations.

Batch semantics (those of Grendel-GS, the synchronous multi-GPU trainer): the B images of a batch are
rendered with the same parameters; each Gaussian's gradient is summed over the batch's images in the
order of their position in the batch, starting from zero, then divided by B; then one visible-Adam
step updates every Gaussian visible in any image of the batch. Grendel-GS's default scaling of the
hyperparameters with the batch size is applied: learning rates x sqrt(B), Adam epsilon / sqrt(B),
betas to the power B (so one batch step weighs as much history as B single-image steps). B = 1 is
plain one-image-per-step training.

Every operation here acts on each Gaussian independently (elementwise, no matrix products whose
rounding could depend on the array's length), so computing it for a subset of the Gaussians (one
cell, on the rank that owns it) gives bit for bit the value it has in the whole array.
"""
import math
from dataclasses import dataclass

import torch

from kernels.splat.sh import num_bases
from odin_sched.scenes.sh import SH_PARAMS, render_args
from odin_sched.training.densify import screen_grad_norm
from odin_sched.training.metrics import ssim
from odin_sched.training.optim import DEFAULT_LR

PARAM_NAMES = ("means", "scales", "quats", "opacities", "sh0", "shN")
BASE_BETAS = (0.9, 0.999)
BASE_EPS = 1e-15
MEANS_LR_FINAL_FACTOR = 0.01  # the means' learning rate decays from 1.6e-4 to 1.6e-6 x extent ...
POSITION_LR_MAX_STEPS = 30_000  # ... over this many images, whatever the run's length (the reference's
                                # position_lr_max_steps)


def param_widths(sh_degree: int) -> dict:
    """float32 columns of each parameter in a packed row: means 3, scales 3, quats 4, opacity 1, the DC
    colour coefficients 3 and the other 3 ((D + 1)^2 - 1) SH coefficients of degree D."""
    return {"means": 3, "scales": 3, "quats": 4, "opacities": 1, "sh0": 3, "shN": 3 * (num_bases(sh_degree) - 1)}


def param_columns(sh_degree: int) -> int:
    """float32 columns of a Gaussian's packed parameters: 14 at SH degree 0, 59 at degree 3."""
    return sum(param_widths(sh_degree).values())


@dataclass(frozen=True)
class BatchSettings:
    """Adam hyperparameters for batches of ``batch_size`` images (Grendel-GS scaling), the means'
    learning-rate decay horizon ``position_lr_max_steps`` (in images) and their initial rate per unit of
    scene extent ``position_lr_init`` (the reference's 1.6e-4)."""

    batch_size: int
    position_lr_max_steps: int = POSITION_LR_MAX_STEPS
    position_lr_init: float = DEFAULT_LR["means"]

    @property
    def lr_scale(self) -> float:
        return math.sqrt(self.batch_size)

    @property
    def eps(self) -> float:
        return BASE_EPS / math.sqrt(self.batch_size)

    @property
    def betas(self) -> tuple:
        return BASE_BETAS[0] ** self.batch_size, BASE_BETAS[1] ** self.batch_size

    def lrs(self, extent: float, step: int) -> dict:
        """Learning rates for batch ``step`` (1-based): 3DGS's rates x sqrt(B), the means' scaled with the
        scene extent and decayed exponentially, as the reference's ``get_expon_lr_func``, from
        ``position_lr_init`` (1.6e-4) to a hundredth of it over ``position_lr_max_steps`` images (then
        constant); the batch's first image,
        (step - 1) B + 1, is the reference's iteration (Grendel-GS's for B > 1)."""
        image = (step - 1) * self.batch_size + 1
        progress = min(image / self.position_lr_max_steps, 1.0)
        lrs = {name: lr * self.lr_scale for name, lr in DEFAULT_LR.items()}
        lrs["means"] = self.position_lr_init * extent * MEANS_LR_FINAL_FACTOR ** progress * self.lr_scale
        return lrs


@dataclass
class ImageGradients:
    """What rendering one training image gives: its loss, the gradient of every rendered Gaussian's
    parameters, which of them were visible and, for densification, their screen-space gradient norm
    and screen radius."""

    loss: float
    grads: dict                  # name -> torch.Tensor [g, ...]
    visible: torch.Tensor        # [g] bool
    screen_norm: torch.Tensor | None  # [g] float32, or None without densification
    radii: torch.Tensor | None = None  # [g] int32 pixels, or None without densification


def image_gradients(render, params: dict, viewmat: torch.Tensor, K: torch.Tensor, width: int, height: int,
                    target: torch.Tensor, ssim_weight: float, densify: bool, sh_degree: int,
                    between=None) -> ImageGradients:
    """Render the Gaussians ``params`` (dict name -> float32 tensor [g, ...], in global id order) from one
    camera with SH degree ``sh_degree`` and back-propagate the loss (1 - w) L1 + w (1 - SSIM) against
    ``target`` [H, W, 3]; ``between`` (if given) is called after the forward pass and the loss, before
    the backward pass."""
    leaves = {name: value.detach().requires_grad_(True) for name, value in params.items()}
    image, visible, radii = render(**render_args(leaves, sh_degree), viewmat=viewmat, K=K, width=width, height=height,
                                   with_radii=True)
    l1 = torch.abs(image - target).mean()
    loss = (1.0 - ssim_weight) * l1 + ssim_weight * (1.0 - ssim(image, target)) if ssim_weight else l1
    if between is not None:
        between()
    loss.backward()
    grads = {name: leaf.grad for name, leaf in leaves.items()}
    if not densify:
        return ImageGradients(float(loss.item()), grads, visible, None)
    norm = screen_grad_norm(leaves["means"].detach(), grads["means"], viewmat, K, width, height)
    return ImageGradients(float(loss.item()), grads, visible, norm, radii)


def batch_gradient(total: dict, batch_size: int) -> dict:
    """The batch's gradient from the per-image sums ``total`` (name -> [g, ...]): divided by B in place
    (the sums are the gradient afterwards; no second copy of them is made)."""
    return {name: value.div_(batch_size) for name, value in total.items()}


def pack_params(params: dict, rows=None) -> torch.Tensor:
    """Parameters as one float32 block [g, param_columns(D)] (columns in ``PARAM_NAMES`` order), optionally
    of ``rows``."""
    cols = [params[n] if rows is None else params[n].index_select(0, rows) for n in PARAM_NAMES]
    return torch.cat([c.detach().reshape(c.shape[0], math.prod(c.shape[1:])) for c in cols], dim=1)


def unpack_params(block: torch.Tensor, sh_degree: int) -> dict:
    """Inverse of ``pack_params`` at SH degree ``sh_degree``: [g, param_columns(D)] -> dict name ->
    tensor [g, ...] (views of ``block``; sh0 [g, 1, 3], shN [g, (D + 1)^2 - 1, 3])."""
    out, col = {}, 0
    for name, width in param_widths(sh_degree).items():
        part = block[:, col:col + width]
        if name == "opacities":
            part = part[:, 0]
        elif name in SH_PARAMS:
            part = part.reshape(len(part), width // 3, 3)
        out[name] = part
        col += width
    return out
