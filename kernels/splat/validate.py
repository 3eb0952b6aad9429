"""Argument checks shared by ``render`` and the torch reference ``_render``."""

import numpy as np
import torch
from numba import njit

from .arrays import check_size
from .sh import MAX_DEGREE, num_bases


def check_render_inputs(means, scales, quats, opacities, colors, viewmat, K, width, height, background,
                        sh_degree=None):
    """Raise one clear ``ValueError`` for the first bad argument of a render call.

    means [G, 3], scales [G, 3], quats [G, 4], opacities [G], colors [G, 3] (with ``sh_degree`` in
    0..3: [G, K, 3], K >= (sh_degree + 1)^2), viewmat [4, 4], K [3, 3] and background [3] (or None)
    must be finite float32 torch tensors on one device; width and height positive ints; no
    quaternion may have zero norm.
    """
    check_size(width, height)
    if sh_degree is not None and (isinstance(sh_degree, bool) or not isinstance(sh_degree, int)
                                  or not 0 <= sh_degree <= MAX_DEGREE):
        raise ValueError(f"sh_degree must be an int in [0, {MAX_DEGREE}] or None, got {sh_degree!r}")
    if not isinstance(means, torch.Tensor) or means.ndim != 2 or means.shape[1] != 3:
        raise ValueError(f"means must be a torch tensor of shape [G, 3], got {_describe(means)}")
    count = means.shape[0]
    expected = {
        "means": (count, 3),
        "scales": (count, 3),
        "quats": (count, 4),
        "opacities": (count,),
        "colors": (count, 3) if sh_degree is None else (count, _sh_count(colors, sh_degree), 3),
        "viewmat": (4, 4),
        "K": (3, 3),
    }
    tensors = {
        "means": means,
        "scales": scales,
        "quats": quats,
        "opacities": opacities,
        "colors": colors,
        "viewmat": viewmat,
        "K": K,
    }
    if background is not None:
        expected["background"] = (3,)
        tensors["background"] = background
    for name, tensor in tensors.items():
        if not isinstance(tensor, torch.Tensor):
            raise ValueError(f"{name} must be a torch tensor, got {_describe(tensor)}")
        if tuple(tensor.shape) != expected[name]:
            raise ValueError(f"{name} must have shape {list(expected[name])}, got {list(tensor.shape)}")
        if tensor.dtype != torch.float32:
            raise ValueError(f"{name} must be float32, got {tensor.dtype}")
        if tensor.device != means.device:
            raise ValueError(f"{name} is on {tensor.device} but means is on {means.device}")
        if not all_finite(tensor):
            raise ValueError(f"{name} contains NaN or inf")
    if count and not bool((quats.detach().norm(dim=1) > 0).all()):
        raise ValueError("quats contains a zero quaternion (it cannot be normalised)")
    if not (float(K[0, 0]) > 0 and float(K[1, 1]) > 0):
        raise ValueError("K must have positive focal lengths K[0, 0] and K[1, 1]")


def _sh_count(coeffs, sh_degree: int) -> int:
    """The coefficient count K of ``coeffs`` [G, K, 3] (ValueError when below what the degree needs)."""
    shape = tuple(getattr(coeffs, "shape", ()))
    if len(shape) == 3 and shape[1] < num_bases(sh_degree):
        raise ValueError(f"colors has {shape[1]} SH coefficients per channel; sh_degree {sh_degree} needs "
                         f"{num_bases(sh_degree)}")
    return shape[1] if len(shape) == 3 else num_bases(sh_degree)


def _describe(value) -> str:
    if isinstance(value, torch.Tensor):
        return f"tensor of shape {list(value.shape)}"
    return type(value).__name__


@njit(cache=True)
def _all_finite_cpu(values):  # [n] float32
    for i in range(values.shape[0]):
        if not np.isfinite(values[i]):
            return False
    return True


def _all_finite(tensor: torch.Tensor) -> bool:
    """Torch reference twin of :func:`all_finite`."""
    return bool(torch.isfinite(tensor).all())


def all_finite(tensor: torch.Tensor) -> bool:
    """Whether every value of ``tensor`` (any shape, float) is finite. A CPU tensor is read in one pass
    that stops at the first NaN or inf (torch's ``isfinite(...).all()`` makes a bool array of the whole
    tensor first: 0.3 s a render of 2,000,000 Gaussians with SH degree 3); a CUDA tensor runs the twin."""
    if tensor.device.type != "cpu":
        return _all_finite(tensor)
    return bool(_all_finite_cpu(tensor.detach().reshape(-1).numpy()))
