"""``render``: the differentiable rasterizer on the Numba kernels (torch tensors in and out).

Two autograd Functions chain the kernels: projection (means, log-scales, quaternions -> mean2d,
conic) and rasterization (mean2d, conic, opacity, colours -> image); the sigmoid on the opacity logits
sits between them (``activation``, element by element so that a Gaussian's result never depends on
which other Gaussians are rendered with it). CPU tensors run the CPU kernels, CUDA tensors the CUDA kernels.
"""

import numpy as np
import torch
from numba import cuda

from .activation import sigmoid, sigmoid_vjp
from .binning import bin_tiles
from .projection import project, project_backward
from .rasterize_backward import rasterize_backward
from .rasterize_forward import rasterize_forward
from .validate import check_render_inputs


def _kernel_array(tensor: torch.Tensor):
    """A kernel's view of a tensor: a NumPy array (CPU) or a Numba device array (CUDA), no copy."""
    tensor = tensor.detach().contiguous()
    return cuda.as_cuda_array(tensor) if tensor.is_cuda else tensor.numpy()


def _tensor(array, device: torch.device) -> torch.Tensor:
    """The tensor over a kernel's output array, no copy."""
    if isinstance(array, np.ndarray):
        return torch.from_numpy(array)
    return torch.as_tensor(array, device=device)


class _Project(torch.autograd.Function):
    @staticmethod
    def forward(ctx, means, log_scales, quats, viewmat, K, width, height):
        outputs = project(_kernel_array(means), _kernel_array(log_scales), _kernel_array(quats), viewmat, K, width, height)
        mean2d, conic, depth, radius = (_tensor(a, means.device) for a in outputs)
        ctx.save_for_backward(means, log_scales, quats, radius)
        ctx.camera = (viewmat, K, width, height)
        ctx.mark_non_differentiable(depth, radius)
        return mean2d, conic, depth, radius

    @staticmethod
    def backward(ctx, v_mean2d, v_conic, _v_depth, _v_radius):
        means, log_scales, quats, radius = ctx.saved_tensors
        viewmat, K, width, height = ctx.camera
        grads = project_backward(
            _kernel_array(means), _kernel_array(log_scales), _kernel_array(quats), viewmat, K, width, height,
            _kernel_array(radius), _kernel_array(v_mean2d), _kernel_array(v_conic),
        )
        v_means, v_log_scales, v_quats = (_tensor(a, means.device) for a in grads)
        return v_means, v_log_scales, v_quats, None, None, None, None


class _Sigmoid(torch.autograd.Function):
    """Opacity activation, element by element (see ``activation``: independent of array position)."""

    @staticmethod
    def forward(ctx, logits):
        opacity = _tensor(sigmoid(_kernel_array(logits)), logits.device)
        ctx.save_for_backward(opacity)
        return opacity

    @staticmethod
    def backward(ctx, v_opacity):
        (opacity,) = ctx.saved_tensors
        return _tensor(sigmoid_vjp(_kernel_array(opacity), _kernel_array(v_opacity)), opacity.device)


class _Rasterize(torch.autograd.Function):
    @staticmethod
    def forward(ctx, mean2d, conic, opacity, colors, radius, depth, background, width, height):
        tile_offsets, gauss_ids = bin_tiles(mean2d, radius, depth, width, height)
        arrays = tuple(_kernel_array(t) for t in (tile_offsets, gauss_ids, mean2d, conic, opacity, colors))
        image, final_t, n_contrib = rasterize_forward(*arrays, background, width, height)
        ctx.arrays = arrays
        ctx.saved = (final_t, n_contrib, background, width, height)
        ctx.device = mean2d.device
        return _tensor(image, mean2d.device)

    @staticmethod
    def backward(ctx, v_image):
        final_t, n_contrib, background, width, height = ctx.saved
        grads = rasterize_backward(*ctx.arrays, background, width, height, final_t, n_contrib, _kernel_array(v_image))
        v_mean2d, v_conic, v_opacity, v_colors = (_tensor(a, ctx.device) for a in grads)
        return v_mean2d, v_conic, v_opacity, v_colors, None, None, None, None, None


def render(means, scales, quats, opacities, colors, viewmat, K, width, height, background=None):
    """Render one image with the Numba kernels; differentiable w.r.t. the five Gaussian parameters.

    means [G, 3], scales [G, 3] log-scales, quats [G, 4] (w, x, y, z, normalised at use),
    opacities [G] logits, colors [G, 3], viewmat [4, 4] world-to-camera, K [3, 3] intrinsics,
    background [3] or None (black); float32 tensors on one device (CPU or CUDA).
    Returns image [height, width, 3] float32 and visible [G] bool (radius > 0: in front of the
    camera and on screen). NaN/inf in any input raises ValueError.
    """
    check_render_inputs(means, scales, quats, opacities, colors, viewmat, K, width, height, background)
    viewmat_host = viewmat.detach().cpu().numpy()
    K_host = K.detach().cpu().numpy()
    bg = (0.0, 0.0, 0.0) if background is None else tuple(float(b) for b in background.detach().cpu())
    mean2d, conic, depth, radius = _Project.apply(means, scales, quats, viewmat_host, K_host, width, height)
    image = _Rasterize.apply(mean2d, conic, _Sigmoid.apply(opacities), colors, radius, depth, bg, width, height)
    return image, radius > 0
