"""Gaussians from a point cloud, as 3DGS initialises them from structure-from-motion points: scales from
the mean distance to the 3 nearest neighbours, identity rotations, opacity 0.1, the points' colours."""
import math

import numpy as np
import torch

INIT_OPACITY = 0.1
KNN_CHUNK = 2048


def knn_scales(points: torch.Tensor, k: int = 3) -> torch.Tensor:
    """Initial log scales: log sqrt(mean squared distance to the k nearest other points), per point.

    points: torch.Tensor  # [P, 3]
    Returns torch.Tensor  # [P, 3] (the same value on the three axes)
    """
    p = points.shape[0]
    k = min(k, p - 1)
    if k < 1:
        return torch.zeros(p, 3)
    mean_sq = torch.empty(p)
    for start in range(0, p, KNN_CHUNK):  # chunks of points, each against all points at once
        d2 = torch.cdist(points[start:start + KNN_CHUNK], points) ** 2
        nearest = torch.topk(d2, k + 1, dim=1, largest=False).values[:, 1:]  # drop the point itself
        mean_sq[start:start + KNN_CHUNK] = nearest.mean(dim=1)
    return (0.5 * torch.log(mean_sq.clamp(min=1e-7)))[:, None].repeat(1, 3)


def init_gaussians(means: np.ndarray, colors: np.ndarray) -> dict:
    """Gaussian parameters from a point cloud (3DGS initialisation).

    means: np.ndarray   # [P, 3] float32
    colors: np.ndarray  # [P, 3] float32 RGB
    Returns dict of float32 tensors: means [P, 3], scales [P, 3], quats [P, 4], opacities [P], colors [P, 3].
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
        "colors": torch.from_numpy(np.ascontiguousarray(colors, dtype=np.float32)),
    }
