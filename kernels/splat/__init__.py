"""Differentiable Gaussian-splatting rasterizer (docs/rasterizer.md).

``render(means, scales, quats, opacities, colors, viewmat, K, width, height, background=None,
sh_degree=None)`` returns (image [H, W, 3], visible [G]) and is differentiable with ``loss.backward()``.
It chains the kernels below (each with a CPU and a CUDA version behind one dispatch function):
``projection.project`` / ``project_backward``, ``sh.sh_to_colors`` / ``sh_to_colors_backward`` (with
``sh_degree``: colours from SH coefficients [G, K, 3]), ``binning.bin_tiles`` (a Numba counting sort on
the CPU, its torch twin on CUDA), ``rasterize_forward.rasterize_forward`` and
``rasterize_backward.rasterize_backward``.
``reference._render`` is the dense pure-torch twin that the tests compare with.
"""

from .render import render

__all__ = ["render"]
