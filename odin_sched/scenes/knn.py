"""Initial Gaussian scales from the nearest neighbours of the SfM points, with a k-d tree.

3DGS initialises every Gaussian as an isotropic blob whose radius is the root of the mean squared
distance to its 3 nearest other points (``distCUDA2`` of the reference code's ``simple-knn``, clamped
below at 1e-7 before the log). Here the neighbours come from scipy's ``cKDTree`` (exact, O(P log P)
time, memory linear in P). The points are queried in the tree's own leaf order, so consecutive queries
walk the same nodes (several times faster than the input order on large clouds), in chunks of
``QUERY_CHUNK`` points.
"""
import numpy as np
import torch

NEIGHBOURS = 3
MIN_MEAN_SQ = 1e-7  # the reference's clamp of the mean squared distance
QUERY_CHUNK = 1 << 18


def mean_sq_neighbour_distance(points: np.ndarray, k: int = NEIGHBOURS) -> np.ndarray:
    """Mean squared distance of each point to its ``k`` nearest other points (fewer when the cloud has
    fewer; 0 for a cloud of one point).

    points: np.ndarray  # [P, 3] float
    Returns np.ndarray  # [P] float64
    """
    points = np.asarray(points, dtype=np.float64)
    p = points.shape[0]
    k = min(k, p - 1)
    if k < 1:
        return np.zeros(p)
    from scipy.spatial import cKDTree  # here: a run that starts from a PLY never loads SciPy (26 MB)

    tree = cKDTree(points)
    out = np.empty(p)
    for start in range(0, p, QUERY_CHUNK):
        rows = tree.indices[start:start + QUERY_CHUNK]
        # the k + 1 nearest include the point itself at distance 0 (or a duplicate of it: the same
        # multiset of distances), so the first column is dropped
        dist, _ = tree.query(points[rows], k=k + 1)
        out[rows] = np.mean(dist[:, 1:] ** 2, axis=1)
    return out


def knn_scales(points, k: int = NEIGHBOURS) -> torch.Tensor:
    """Initial log scales: log sqrt(mean squared distance to the k nearest other points), per point.

    points: torch.Tensor or np.ndarray  # [P, 3]
    Returns torch.Tensor                # [P, 3] float32 (the same value on the three axes)
    """
    if isinstance(points, torch.Tensor):
        points = points.detach().cpu().numpy()
    mean_sq = mean_sq_neighbour_distance(points, k)
    if points.shape[0] < 2:
        return torch.zeros(points.shape[0], 3)
    log_scale = 0.5 * np.log(np.maximum(mean_sq, MIN_MEAN_SQ))
    return torch.from_numpy(np.repeat(log_scale.astype(np.float32)[:, None], 3, axis=1))
