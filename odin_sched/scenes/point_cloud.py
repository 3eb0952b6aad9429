"""Gaussians from a point cloud, as 3DGS initialises them from structure-from-motion points: scales from
the mean distance to the 3 nearest neighbours (``odin_sched.scenes.knn``), identity rotations, opacity
0.1, the points' colours as the DC SH coefficient (``odin_sched.scenes.sh``)."""
import math

import numpy as np
import torch

from odin_sched.scenes.knn import knn_scales
from odin_sched.scenes.sh import DEFAULT_SH_DEGREE, sh_from_rgb, split_sh

INIT_OPACITY = 0.1


def init_gaussians(means: np.ndarray, colors: np.ndarray, sh_degree: int = DEFAULT_SH_DEGREE) -> dict:
    """Gaussian parameters from a point cloud (3DGS initialisation).

    means: np.ndarray   # [P, 3] float32
    colors: np.ndarray  # [P, 3] float32 RGB
    Returns dict of float32 tensors: means [P, 3], scales [P, 3], quats [P, 4], opacities [P], sh0 [P, 1, 3]
    (the colours' DC coefficients) and shN [P, (sh_degree + 1)^2 - 1, 3] (zeros).
    """
    pts = torch.from_numpy(np.ascontiguousarray(means, dtype=np.float32))
    p = pts.shape[0]
    quats = torch.zeros(p, 4)
    quats[:, 0] = 1.0
    return {
        "means": pts,
        "scales": knn_scales(pts),
        "quats": quats,
        "opacities": torch.full((p,), math.log(INIT_OPACITY / (1.0 - INIT_OPACITY))),
        **split_sh(torch.from_numpy(sh_from_rgb(colors, sh_degree))),
    }
