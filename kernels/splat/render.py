"""``render``: the differentiable rasterizer on the Numba kernels (torch tensors in and out).

Two autograd Functions chain the kernels: projection (means, log-scales, quaternions -> mean2d,
conic) and rasterization (mean2d, conic, opacity, colours -> image); the sigmoid on the opacity logits
sits between them (``activation``, element by element so that a Gaussian's result never depends on
which other Gaussians are rendered with it). CPU tensors run the CPU kernels, CUDA tensors the CUDA
kernels; ``on_device=True`` runs the CUDA kernels on CPU tensors under Numba's CUDA simulator (the
"device" tensors of a simulated device run).
"""

import torch

from kernels._device import SIMULATED, across

from .activation import sigmoid, sigmoid_vjp
from .binning import bin_tiles
from .projection import project, project_backward
from .rasterize_backward import rasterize_backward
from .rasterize_forward import rasterize_forward
from .sh import camera_centre, sh_to_colors, sh_to_colors_backward
from .validate import check_render_inputs


def _kernel_array(tensor: torch.Tensor, on_device: bool):
    """A kernel's view of a tensor: a NumPy array (host kernels, no copy) or a Numba device array
    (CUDA kernels, through ``across``: no copy on a GPU, a copy into the simulator's arrays)."""
    return across(tensor) if on_device else tensor.detach().contiguous().numpy()


def _tensor(array, on_device: bool) -> torch.Tensor:
    """The tensor over a kernel's output array (no copy, except out of the simulator's arrays)."""
    return across(array) if on_device else torch.from_numpy(array)


class _Project(torch.autograd.Function):
    @staticmethod
    def forward(ctx, means, log_scales, quats, viewmat, K, width, height, on_device):
        arrays = (_kernel_array(t, on_device) for t in (means, log_scales, quats))
        outputs = project(*arrays, viewmat, K, width, height)
        mean2d, conic, depth, radius = (_tensor(a, on_device) for a in outputs)
        ctx.save_for_backward(means, log_scales, quats, radius)
        ctx.camera = (viewmat, K, width, height)
        ctx.on_device = on_device
        ctx.mark_non_differentiable(depth, radius)
        return mean2d, conic, depth, radius

    @staticmethod
    def backward(ctx, v_mean2d, v_conic, _v_depth, _v_radius):
        means, log_scales, quats, radius = ctx.saved_tensors
        viewmat, K, width, height = ctx.camera
        on_device = ctx.on_device
        means, log_scales, quats, radius, v_mean2d, v_conic = (
            _kernel_array(t, on_device) for t in (means, log_scales, quats, radius, v_mean2d, v_conic))
        grads = project_backward(means, log_scales, quats, viewmat, K, width, height, radius, v_mean2d, v_conic)
        v_means, v_log_scales, v_quats = (_tensor(a, on_device) for a in grads)
        return v_means, v_log_scales, v_quats, None, None, None, None, None


class _Sigmoid(torch.autograd.Function):
    """Opacity activation, element by element (see ``activation``: independent of array position)."""

    @staticmethod
    def forward(ctx, logits, on_device):
        opacity = _tensor(sigmoid(_kernel_array(logits, on_device)), on_device)
        ctx.save_for_backward(opacity)
        ctx.on_device = on_device
        return opacity

    @staticmethod
    def backward(ctx, v_opacity):
        (opacity,) = ctx.saved_tensors
        on_device = ctx.on_device
        v_logits = sigmoid_vjp(_kernel_array(opacity, on_device), _kernel_array(v_opacity, on_device))
        return _tensor(v_logits, on_device), None


class _ShColors(torch.autograd.Function):
    """Colours from SH coefficients and the view direction (``sh``), before rasterization."""

    @staticmethod
    def forward(ctx, means, coeffs, campos, degree, on_device):
        colors = sh_to_colors(_kernel_array(means, on_device), _kernel_array(coeffs, on_device), campos, degree)
        ctx.save_for_backward(means, coeffs)
        ctx.args = (campos, degree, on_device)
        return _tensor(colors, on_device)

    @staticmethod
    def backward(ctx, v_colors):
        means, coeffs = ctx.saved_tensors
        campos, degree, on_device = ctx.args
        v_means, v_coeffs = sh_to_colors_backward(*(_kernel_array(t, on_device) for t in (means, coeffs)), campos,
                                                  degree, _kernel_array(v_colors, on_device))
        return _tensor(v_means, on_device), _tensor(v_coeffs, on_device), None, None, None


class _Rasterize(torch.autograd.Function):
    @staticmethod
    def forward(ctx, mean2d, conic, opacity, colors, radius, depth, background, width, height, on_device):
        tile_offsets, gauss_ids = bin_tiles(mean2d, radius, depth, width, height)
        arrays = tuple(_kernel_array(t, on_device) for t in (tile_offsets, gauss_ids, mean2d, conic, opacity, colors))
        image, final_t, n_contrib = rasterize_forward(*arrays, background, width, height)
        ctx.arrays = arrays
        ctx.saved = (final_t, n_contrib, background, width, height)
        ctx.on_device = on_device
        return _tensor(image, on_device)

    @staticmethod
    def backward(ctx, v_image):
        final_t, n_contrib, background, width, height = ctx.saved
        grads = rasterize_backward(*ctx.arrays, background, width, height, final_t, n_contrib,
                                   _kernel_array(v_image, ctx.on_device))
        v_mean2d, v_conic, v_opacity, v_colors = (_tensor(a, ctx.on_device) for a in grads)
        return v_mean2d, v_conic, v_opacity, v_colors, None, None, None, None, None, None


def render(means, scales, quats, opacities, colors, viewmat, K, width, height, background=None,
           on_device: bool = False, sh_degree: int | None = None, with_radii: bool = False):
    """Render one image with the Numba kernels; differentiable w.r.t. the five Gaussian parameters.

    means [G, 3], scales [G, 3] log-scales, quats [G, 4] (w, x, y, z, normalised at use),
    opacities [G] logits, colors [G, 3] RGB used as is, or with ``sh_degree`` (0..3) SH coefficients
    [G, K, 3], K >= (sh_degree + 1)^2, evaluated from the camera centre (``sh.sh_to_colors``: the
    reference 3DGS colour, + 0.5 and clamped at 0), viewmat [4, 4] world-to-camera, K [3, 3]
    intrinsics, background [3] or None (black); float32 tensors on one device (CPU or CUDA).
    CUDA tensors run the CUDA kernels. ``on_device=True`` asks for them on CPU tensors too, which only
    Numba's CUDA simulator can do (where a device run's tensors are CPU tensors): each kernel
    argument and result is then copied into and out of the simulator's arrays by
    ``kernels._device.across``, the boundary a real GPU crosses without a copy.
    Returns image [height, width, 3] float32 and visible [G] bool (radius > 0: in front of the
    camera and on screen); ``with_radii=True`` adds radii [G] int32, each Gaussian's screen radius in
    pixels (3 sigma of its projected footprint, 0 when culled). NaN/inf in any input raises ValueError.
    """
    check_render_inputs(means, scales, quats, opacities, colors, viewmat, K, width, height, background, sh_degree)
    if on_device and not (means.is_cuda or SIMULATED):
        raise ValueError("on_device=True needs CUDA tensors (or Numba's CUDA simulator, NUMBA_ENABLE_CUDASIM=1)")
    on_device = on_device or means.is_cuda
    viewmat_host = viewmat.detach().cpu().numpy()
    K_host = K.detach().cpu().numpy()
    bg = (0.0, 0.0, 0.0) if background is None else tuple(float(b) for b in background.detach().cpu())
    mean2d, conic, depth, radius = _Project.apply(means, scales, quats, viewmat_host, K_host, width, height, on_device)
    opacity = _Sigmoid.apply(opacities, on_device)
    if sh_degree is not None:
        colors = _ShColors.apply(means, colors, camera_centre(viewmat_host), sh_degree, on_device)
    image = _Rasterize.apply(mean2d, conic, opacity, colors, radius, depth, bg, width, height, on_device)
    return (image, radius > 0, radius) if with_radii else (image, radius > 0)
