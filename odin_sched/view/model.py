"""The model and cameras as the viewer page reads them: compact float32 buffers plus a small JSON.

``/model.bin`` is three or four float32 arrays back to back, little-endian::

    means  [G, 3]   world positions
    covs   [G, 6]   3D covariance R S S^T R^T, upper triangle xx, xy, xz, yy, yz, zz
    rgba   [G, 4]   RGB, sigmoid(opacity). RGB: the colour without SH; with SH the DC colour sh[:, 0] C0 + 0.5,
                    clamped at 0 when the degree is 0 (as the rasterizer does), unclamped otherwise
    rest   [G, K - 1, 3]  only with SH of degree D >= 1 (K = (D + 1)^2): the coefficients after the DC
                    term, coefficient-major; the page adds their view-dependent part and clamps at 0

``/model.json`` gives the count, the SH degree (``sh_degree``: 0 without SH) and the cameras
(world-to-camera matrices, pinhole intrinsics, image size), so a camera view in the page uses the same
projection and colours as ``pregel render`` (docs/rasterizer.md).
"""
import os

import numpy as np

from odin_sched.scenes.sh import degree_of, sh0_to_rgb
from pregel.errors import InputError


def covariances(scales: np.ndarray, quats: np.ndarray) -> np.ndarray:
    """Upper triangles [G, 6] (xx, xy, xz, yy, yz, zz) of R S S^T R^T.

    scales: [G, 3] log scales; quats: [G, 4] (w, x, y, z), normalised here.
    """
    q = quats.astype(np.float64)
    w, x, y, z = (q / np.linalg.norm(q, axis=1, keepdims=True)).T
    rot = np.stack([1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y),
                    2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x),
                    2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)], axis=1).reshape(-1, 3, 3)
    m = rot * np.exp(scales.astype(np.float64))[:, None, :]
    cov = m @ m.transpose(0, 2, 1)
    rows, cols = np.triu_indices(3)
    return cov[:, rows, cols].astype(np.float32)


def sh_degree(gaussians: dict) -> int:
    """The SH degree of Gaussians with ``sh`` [G, K, 3], else 0."""
    return 0 if gaussians.get("sh") is None else degree_of(gaussians["sh"].shape[1])


def model_buffers(gaussians: dict) -> bytes:
    """``/model.bin`` for Gaussians (the arrays of ``Scene.gaussians()`` or ``read_gaussians_ply``)."""
    opacity = 1.0 / (1.0 + np.exp(-gaussians["opacities"].astype(np.float64)))
    sh = gaussians.get("sh")
    colors = gaussians["colors"] if sh is None else sh0_to_rgb(sh[:, 0].astype(np.float64))
    if sh is not None and sh.shape[1] == 1:
        colors = np.maximum(colors, 0.0)
    rgba = np.concatenate([colors, opacity[:, None]], axis=1)
    parts = [gaussians["means"], covariances(gaussians["scales"], gaussians["quats"]), rgba]
    if sh is not None and sh.shape[1] > 1:
        parts.append(sh[:, 1:])
    return b"".join(np.ascontiguousarray(p, "<f4").tobytes() for p in parts)


def camera_list(scene) -> list:
    """The cameras of a ``Scene`` as JSON-ready dicts: viewmat (16, row-major), fx, fy, cx, cy, width,
    height, heldout."""
    from odin_sched.scenes.scene_io import heldout_mask

    held = heldout_mask(scene)
    return [{"viewmat": [float(v) for v in scene.viewmats[c].reshape(-1)],
             "fx": float(scene.Ks[c, 0, 0]), "fy": float(scene.Ks[c, 1, 1]),
             "cx": float(scene.Ks[c, 0, 2]), "cy": float(scene.Ks[c, 1, 2]),
             "width": int(scene.width), "height": int(scene.height), "heldout": bool(held[c])}
            for c in range(scene.num_cameras)]


def load_view_model(model_path, scene_path=None) -> tuple[bytes, dict]:
    """(``/model.bin``, ``/model.json`` dict) of a 3DGS PLY or a trained scene file; the cameras come from
    ``scene_path`` when given, else from the model when it is a scene file (a PLY alone has none)."""
    from odin_sched.scenes.ply import read_gaussians_ply
    from odin_sched.scenes.scene_io import read_scene

    model_path = os.fspath(model_path)
    if not os.path.isfile(model_path):
        raise InputError.at(model_path, None, "no such file")
    scene = read_scene(scene_path) if scene_path is not None else None
    if model_path.lower().endswith(".ply"):
        gaussians = read_gaussians_ply(model_path)
    else:
        trained = read_scene(model_path)
        gaussians = trained.gaussians()
        scene = scene or trained
    means = gaussians["means"]
    info = {"count": int(means.shape[0]), "source": os.path.basename(model_path), "sh_degree": sh_degree(gaussians),
            "centre": [float(v) for v in np.median(means, axis=0)],
            "radius": float(np.percentile(np.linalg.norm(means - np.median(means, axis=0), axis=1), 90)) or 1.0,
            "cameras": camera_list(scene) if scene is not None else []}
    return model_buffers(gaussians), info
