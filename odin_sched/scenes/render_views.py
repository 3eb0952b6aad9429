"""``pregel render``: PNGs of a scene's cameras, and an orbit around the scene as a GIF or MP4.

Gaussians come from the scene file or, with ``ply``, from a 3DGS PLY (``odin_sched.scenes.ply``); each
view is ``kernels.splat.render`` of one camera (with their SH coefficients at their full degree when
they have them, ``/gaussians/sh`` or a PLY's; else the scene's RGB colours), clamped to [0, 1] and
written as 8-bit RGB.
"""

import os

import numpy as np
import torch

from odin_sched.scenes.render_device import render_device
from odin_sched.scenes.scene_io import Scene, heldout_mask
from odin_sched.scenes.sh import gaussian_render_args
from pregel.atomic import atomic_output
from pregel.errors import InputError
from pregel.outputs import check_outputs

ORBIT_FPS = 12


def select_cameras(scene: Scene, spec: str | None) -> np.ndarray:
    """Camera indices from ``"0,5,9"``, or the held-out cameras (every 8th without ``/cameras/heldout``)."""
    if spec is None:
        return np.flatnonzero(heldout_mask(scene))
    try:
        cams = [int(c) for c in spec.split(",")]
    except ValueError:
        raise InputError(f"`cameras` must be comma-separated camera indices, got {spec!r}") from None
    bad = [c for c in cams if not 0 <= c < scene.num_cameras]  # Python ints: any size is checked, none overflows
    if bad:
        raise InputError(f"`cameras`: camera {bad[0]} does not exist (the scene has {scene.num_cameras})")
    return np.array(cams, dtype=np.int64)


def orbit_viewmats(viewmats: np.ndarray, centre: np.ndarray, frames: int) -> np.ndarray:
    """``frames`` world-to-camera matrices [N, 4, 4] on a circle around ``centre`` [3], at the cameras'
    mean distance and height, with the cameras' mean up direction (COLMAP/OpenCV frames: y down)."""
    rot, trans = viewmats[:, :3, :3].astype(np.float64), viewmats[:, :3, 3].astype(np.float64)
    positions = -np.einsum("cji,cj->ci", rot, trans)
    up = -rot[:, 1, :].mean(axis=0)
    up /= np.linalg.norm(up)
    offsets = positions - centre
    height = float((offsets @ up).mean())
    flat = offsets - np.outer(offsets @ up, up)
    radius = float(np.linalg.norm(flat, axis=1).mean()) or 1.0
    a = flat[0] if np.linalg.norm(flat[0]) > 1e-9 else np.cross(up, np.eye(3)[np.argmin(np.abs(up))])
    a = a / np.linalg.norm(a)
    b = np.cross(up, a)
    angles = 2 * np.pi * np.arange(frames) / frames
    eyes = centre + radius * (np.cos(angles)[:, None] * a + np.sin(angles)[:, None] * b) + height * up
    fwd = centre - eyes
    fwd /= np.linalg.norm(fwd, axis=1, keepdims=True)
    right = np.cross(fwd, up)
    right /= np.linalg.norm(right, axis=1, keepdims=True)
    down = np.cross(fwd, right)
    out = np.zeros((frames, 4, 4), np.float32)
    out[:, :3, :3] = np.stack([right, down, fwd], axis=1)
    out[:, :3, 3] = -np.einsum("nij,nj->ni", out[:, :3, :3].astype(np.float64), eyes)
    out[:, 3, 3] = 1
    return out


def render_views(scene_path, out_dir, ply_path=None, cameras: str | None = None, orbit: int = 0,
                 orbit_format: str = "gif", device: str = "cpu") -> list:
    """Render the chosen cameras to ``out_dir/NNNN.png`` (and an orbit); returns the paths written."""
    from PIL import Image

    from odin_sched.scenes.ply import read_gaussians_ply
    from odin_sched.scenes.scene_io import read_scene

    device, render = render_device(device)  # the trainer's choice of GPU and of kernels
    if orbit < 0:
        raise InputError(f"`orbit` must be non-negative, got {orbit}")
    if orbit and orbit_format == "mp4":
        _require_ffmpeg()
    scene = read_scene(scene_path)
    gaussians = read_gaussians_ply(ply_path) if ply_path else scene.gaussians()
    if len(gaussians["means"]) == 0:
        raise InputError.at(ply_path or scene_path, None, "has no Gaussians to render")
    cams = select_cameras(scene, cameras)
    try:
        os.makedirs(out_dir, exist_ok=True)
    except OSError as err:
        raise InputError.at(out_dir, None, f"cannot create the output folder ({err.strerror})") from None
    names = [f"{c:04d}.png" for c in cams] + ([f"orbit.{orbit_format}"] if orbit else [])
    check_outputs(outputs=[("--out", os.path.join(out_dir, name)) for name in names], inputs=[scene_path, ply_path])
    params = {k: torch.from_numpy(np.ascontiguousarray(v, np.float32)).to(device) for k, v in gaussians.items()}
    args = gaussian_render_args(params)

    def draw(viewmat, K) -> np.ndarray:
        with torch.no_grad():
            image, _ = render(**args, viewmat=torch.from_numpy(viewmat).to(device),
                              K=torch.from_numpy(K).to(device), width=scene.width, height=scene.height)
        return np.round(image.clamp(0, 1).cpu().numpy() * 255).astype(np.uint8)

    views = {f"{c:04d}.png": draw(scene.viewmats[c], scene.Ks[c]) for c in cams}  # all drawn before any is written
    frames = None
    if orbit:
        orbit_views = orbit_viewmats(scene.viewmats, params["means"].cpu().numpy().mean(axis=0), orbit)
        frames = np.stack([draw(v, scene.Ks[0]) for v in orbit_views])
    written = []
    for name, image in views.items():
        with atomic_output(os.path.join(out_dir, name), ".png") as temp:
            Image.fromarray(image).save(temp, format="PNG")
        written.append(os.path.join(out_dir, name))
    if orbit:
        import imageio.v3 as iio

        path = os.path.join(out_dir, f"orbit.{orbit_format}")
        with atomic_output(path, f".{orbit_format}") as temp:
            if orbit_format == "gif":
                iio.imwrite(temp, frames, duration=1000 / ORBIT_FPS, loop=0)
            else:
                iio.imwrite(temp, frames, fps=ORBIT_FPS)
        written.append(path)
    return written


def _require_ffmpeg() -> None:
    try:
        import imageio_ffmpeg  # noqa: F401
    except ImportError:
        raise InputError("`orbit_format` mp4 needs imageio-ffmpeg (pip install 'pregel-mpi[video]'); "
                         "or use gif") from None
