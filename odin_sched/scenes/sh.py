"""Spherical-harmonics colour of the Gaussians as files and trainers hold it (the reference 3DGS layout).

A model of SH degree D carries coefficients [G, K, 3], K = (D + 1)^2, coefficient-major (gsplat's
layout; coefficient k of channel c at [g, k, c]); rendering evaluates them with
``kernels.splat.sh``. The trainers keep them as two parameters, as the reference code and gsplat do:
``sh0`` [G, 1, 3] (the DC term, ``f_dc``) and ``shN`` [G, K - 1, 3] (``f_rest``, learning rate 1/20
of the DC term's). An RGB colour c is the DC coefficient (c - 0.5) / C0 (the reference's
``RGB2SH``), the other coefficients 0. Training raises the active degree by one every 1,000 images
(the reference's ``oneupSHdegree`` every 1,000 iterations; with batches, Grendel-GS's count of
images), from 0 up to D.
"""
import math

import numpy as np
import torch

from kernels.splat.sh import MAX_DEGREE, SH_C0, num_bases
from pregel.errors import InputError

DEFAULT_SH_DEGREE = 3
#: images per step of the active degree (the reference raises it every 1,000 iterations)
SH_DEGREE_INTERVAL = 1000
#: coefficients per channel of SH degrees 0..3
SH_COUNTS = tuple(num_bases(d) for d in range(MAX_DEGREE + 1))
#: the parameters holding the colour, after means, scales, quats and opacities
SH_PARAMS = ("sh0", "shN")


def check_sh_degree(degree, field: str = "TrainConfig.sh_degree") -> int:
    """``degree`` as an int, or one InputError line naming the config ``field`` unless it is an int in 0..3."""
    if isinstance(degree, bool) or not isinstance(degree, (int, np.integer)) or not 0 <= degree <= MAX_DEGREE:
        raise InputError(f"{field} must be an integer from 0 to {MAX_DEGREE}, got {degree!r}")
    return int(degree)


def degree_of(count: int) -> int:
    """The SH degree of ``count`` coefficients per channel (1, 4, 9 or 16); ValueError otherwise."""
    degree = math.isqrt(count) - 1
    if count < 1 or num_bases(degree) != count or degree > MAX_DEGREE:
        raise ValueError(f"{count} SH coefficients per channel is not (D + 1)^2 for a degree D in 0..{MAX_DEGREE}")
    return degree


def active_sh_degree(step: int, batch_size: int, max_degree: int) -> int:
    """The degree rendered in batch ``step`` (1-based) of ``batch_size`` images: one more every
    ``SH_DEGREE_INTERVAL`` images, from 0 up to ``max_degree``."""
    return min(max_degree, step * batch_size // SH_DEGREE_INTERVAL)


def rgb_to_sh0(rgb):
    """DC coefficient of an RGB colour, (rgb - 0.5) / C0 (NumPy or torch, any shape)."""
    return (rgb - 0.5) / SH_C0


def sh0_to_rgb(sh0):
    """RGB colour of a DC coefficient, sh0 C0 + 0.5 (before the renderer's clamp at 0)."""
    return sh0 * SH_C0 + 0.5


def sh_from_rgb(colors: np.ndarray, degree: int) -> np.ndarray:
    """Coefficients [G, (degree + 1)^2, 3] float32 of RGB colours [G, 3]: DC from the colour, the rest 0."""
    colors = np.asarray(colors, dtype=np.float32)
    sh = np.zeros((colors.shape[0], num_bases(degree), 3), np.float32)
    sh[:, 0] = rgb_to_sh0(colors)
    return sh


def fitted_sh(sh: np.ndarray, degree: int, source: str) -> dict:
    """``split_sh`` of coefficients [G, k, 3] of a lower degree padded with zeros to ``degree`` (the same
    colours), each part C-contiguous and written once: {'sh0': [G, 1, 3], 'shN': [G, K - 1, 3]}; more
    than ``degree`` holds is refused with one InputError line naming ``source``."""
    have = degree_of(sh.shape[1])
    if have > degree:
        raise InputError(f"{source}: the Gaussians have SH degree {have}, more than TrainConfig.sh_degree {degree} "
                         f"(pass TrainConfig.sh_degree {have} to keep their view-dependent colour)")
    rest = np.zeros((sh.shape[0], num_bases(degree) - 1, 3), np.float32)
    rest[:, :sh.shape[1] - 1] = sh[:, 1:]
    return {"sh0": np.ascontiguousarray(sh[:, :1], np.float32), "shN": rest}


def split_sh(sh) -> dict:
    """{'sh0': [G, 1, 3], 'shN': [G, K - 1, 3]} of coefficients [G, K, 3] (torch or NumPy)."""
    return {"sh0": sh[:, :1], "shN": sh[:, 1:]}


def joined_sh(params: dict):
    """Coefficients [G, K, 3] of the parameters ``sh0`` and ``shN`` (torch: differentiable)."""
    if isinstance(params["sh0"], torch.Tensor):
        return torch.cat([params["sh0"], params["shN"]], dim=1)
    return np.concatenate([params["sh0"], params["shN"]], axis=1)


def render_args(params: dict, sh_degree: int) -> dict:
    """``kernels.splat.render`` keyword arguments of trainer parameters (means, scales, quats,
    opacities, sh0, shN) rendered at SH degree ``sh_degree``."""
    args = {name: params[name] for name in ("means", "scales", "quats", "opacities")}
    return {**args, "colors": joined_sh(params), "sh_degree": sh_degree}


def gaussian_render_args(gaussians: dict) -> dict:
    """``render`` keyword arguments of Gaussians as files give them (``colors`` RGB, or ``sh``
    coefficients [G, K, 3] rendered at their full degree); arrays or tensors."""
    args = {name: gaussians[name] for name in ("means", "scales", "quats", "opacities")}
    if gaussians.get("sh") is None:
        return {**args, "colors": gaussians["colors"]}
    return {**args, "colors": gaussians["sh"], "sh_degree": degree_of(gaussians["sh"].shape[1])}
