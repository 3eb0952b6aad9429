"""The model and cameras as the viewer page reads them: compact float32 buffers plus a small JSON.

``/model.bin`` is three float32 arrays back to back, little-endian::

    means  [G, 3]   world positions
    covs   [G, 6]   3D covariance R S S^T R^T, upper triangle xx, xy, xz, yy, yz, zz
    rgba   [G, 4]   RGB (degree-0 SH colour, unclamped as the rasterizer uses it), sigmoid(opacity)

``/model.json`` gives the count and the cameras (world-to-camera matrices, pinhole intrinsics, image
size), so a camera view in the page uses the same projection as ``pregel render`` (docs/rasterizer.md).
"""
import os

import numpy as np

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


def model_buffers(gaussians: dict) -> bytes:
    """``/model.bin`` for Gaussians (the arrays of ``Scene.gaussians()`` or ``read_gaussians_ply``)."""
    opacity = 1.0 / (1.0 + np.exp(-gaussians["opacities"].astype(np.float64)))
    rgba = np.concatenate([gaussians["colors"], opacity[:, None]], axis=1).astype(np.float32)
    parts = [np.ascontiguousarray(gaussians["means"], "<f4"), covariances(gaussians["scales"], gaussians["quats"]),
             np.ascontiguousarray(rgba, "<f4")]
    return b"".join(p.astype("<f4").tobytes() for p in parts)


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
    info = {"count": int(means.shape[0]), "source": os.path.basename(model_path),
            "centre": [float(v) for v in np.median(means, axis=0)],
            "radius": float(np.percentile(np.linalg.norm(means - np.median(means, axis=0), axis=1), 90)) or 1.0,
            "cameras": camera_list(scene) if scene is not None else []}
    return model_buffers(gaussians), info
