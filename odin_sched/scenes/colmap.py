"""COLMAP sparse models to scene files (``pregel convert-colmap``).

Reads a sparse model in either form COLMAP writes (https://colmap.github.io/format.html):

* text: ``cameras.txt`` (``CAMERA_ID MODEL WIDTH HEIGHT PARAMS...``), ``images.txt`` (two lines per
  image: ``IMAGE_ID QW QX QY QZ TX TY TZ CAMERA_ID NAME``, then its 2D points, which are not needed)
  and ``points3D.txt`` (``POINT3D_ID X Y Z R G B ERROR TRACK...``);
* binary: ``cameras.bin`` (uint64 count; per camera int32 id, int32 model id, uint64 width, uint64
  height, float64 params), ``images.bin`` (uint64 count; per image int32 id, float64 qvec[4],
  float64 tvec[3], int32 camera id, NUL-terminated name, uint64 n, n x (float64 x, float64 y,
  int64 point id)) and ``points3D.bin`` (uint64 count; per point uint64 id, float64 xyz[3],
  uint8 rgb[3], float64 error, uint64 track length t, t x (int32 image id, int32 point index)).

(qvec, tvec) is the world-to-camera rotation (w, x, y, z) and translation, in COLMAP's camera frame
(x right, y down, z forward), which is the rasterizer's; so the viewmat is [R(q) t; 0 0 0 1].
Pixel centres sit at +0.5 in both. Cameras: PINHOLE, SIMPLE_PINHOLE; SIMPLE_RADIAL and RADIAL are
used as pinholes with a warning naming the distortion ignored (as 3DGS does, meant for undistorted
images); OPENCV and FULL_OPENCV only when their distortion is zero; other models are refused.
"""

import math
import os
import struct
import warnings
from dataclasses import dataclass

import numba
import numpy as np

from odin_sched.scenes.point_cloud import init_gaussians
from odin_sched.scenes.scene_io import Scene
from odin_sched.scenes.sh import SH_PARAMS
from pregel.errors import InputError, warn

# model id -> (name, number of params), from COLMAP's src/colmap/sensor/models.h
CAMERA_MODELS = {0: ("SIMPLE_PINHOLE", 3), 1: ("PINHOLE", 4), 2: ("SIMPLE_RADIAL", 4), 3: ("RADIAL", 5),
                 4: ("OPENCV", 8), 5: ("OPENCV_FISHEYE", 8), 6: ("FULL_OPENCV", 12), 7: ("FOV", 5),
                 8: ("SIMPLE_RADIAL_FISHEYE", 4), 9: ("RADIAL_FISHEYE", 5), 10: ("THIN_PRISM_FISHEYE", 12)}
NUM_PARAMS = {name: n for name, n in CAMERA_MODELS.values()}
# model -> names of its distortion parameters, for the models used as pinholes
RADIAL = {"SIMPLE_RADIAL": ("k",), "RADIAL": ("k1", "k2")}
ZERO_DISTORTION_ONLY = {"OPENCV": ("k1", "k2", "p1", "p2"),
                        "FULL_OPENCV": ("k1", "k2", "p1", "p2", "k3", "k4", "k5", "k6")}
DEFAULT_HELDOUT_EVERY = 8


@dataclass
class Camera:
    model: str
    width: int
    height: int
    params: np.ndarray  # [num_params] float64


@dataclass
class ColmapImage:
    image_id: int
    qvec: np.ndarray  # [4] (w, x, y, z)
    tvec: np.ndarray  # [3]
    camera_id: int
    name: str


@dataclass
class ColmapModel:
    cameras: dict          # camera id -> Camera
    images: list           # ColmapImage, in file order
    points: np.ndarray     # [P, 3] float64
    colors: np.ndarray     # [P, 3] uint8


def read_model(sparse_dir) -> ColmapModel:
    """Read a COLMAP sparse model, binary (``*.bin``) if present, else text (``*.txt``)."""
    sparse_dir = os.fspath(sparse_dir)
    if not os.path.isdir(sparse_dir):
        raise InputError.at(sparse_dir, None, "no such folder (expected a COLMAP sparse model, e.g. sparse/0)")
    for ext, readers in ((".bin", (_cameras_bin, _images_bin, _points_bin)),
                         (".txt", (_cameras_txt, _images_txt, _points_txt))):
        paths = [os.path.join(sparse_dir, name + ext) for name in ("cameras", "images", "points3D")]
        if os.path.isfile(paths[0]):
            for path in paths:
                if not os.path.isfile(path):
                    raise InputError.at(path, None, "missing from the COLMAP model")
            cameras, images, (points, colors) = (read(path) for read, path in zip(readers, paths))
            return ColmapModel(cameras, images, points, colors)
    raise InputError.at(sparse_dir, None, "has neither cameras.bin nor cameras.txt: not a COLMAP sparse model")


# ---------------------------------------------------------------- text form

def _data_lines(path):
    """(line number, text) of the non-empty, non-comment lines of a text file."""
    return [(i + 1, line.strip()) for i, line in enumerate(_text_lines(path))
            if line.strip() and line.lstrip()[0] != "#"]


def _text_lines(path) -> list:
    """The lines of a UTF-8 text file (``InputError`` naming the first line that is not UTF-8)."""
    with open(path, "rb") as f:
        raw = f.read().splitlines()
    try:
        return [line.decode("utf-8") for line in raw]
    except UnicodeDecodeError:
        number = next(i + 1 for i, line in enumerate(raw) if not _is_utf8(line))
        raise InputError.at(path, None, f"line {number} is not UTF-8 text (image names must be UTF-8)") from None


def _is_utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _cameras_txt(path) -> dict:
    cameras = {}
    for number, line in _data_lines(path):
        words = line.split()
        try:
            cam_id, model, width, height = int(words[0]), words[1], int(words[2]), int(words[3])
            params = np.array(words[4:], dtype=np.float64)
        except (IndexError, ValueError):
            raise InputError.at(path, None, f"line {number}: expected CAMERA_ID MODEL WIDTH HEIGHT PARAMS...") from None
        cameras[cam_id] = _camera(path, cam_id, model, width, height, params)
    return cameras


def _images_txt(path) -> list:
    images = []
    lines = _text_lines(path)
    number = 0
    while number < len(lines):
        line = lines[number].strip()
        number += 1
        if not line or line[0] == "#":
            continue
        words = line.split(maxsplit=9)
        try:
            qt = np.array(words[1:8], dtype=np.float64)
            image = ColmapImage(int(words[0]), qt[:4], qt[4:], int(words[8]), words[9])
        except (IndexError, ValueError):
            raise InputError.at(path, None, f"line {number}: expected IMAGE_ID QW QX QY QZ TX TY TZ "
                                "CAMERA_ID NAME") from None
        images.append(_checked_pose(path, f"line {number}", image))
        number += 1  # the image's POINTS2D line (possibly empty)
    return images


def _points_txt(path):
    try:
        with warnings.catch_warnings():  # an empty file is a model without points, refused later
            warnings.simplefilter("ignore", UserWarning)
            table = np.loadtxt(path, comments="#", usecols=range(7), ndmin=2, dtype=np.float64)
    except ValueError as err:
        raise InputError.at(path, None, f"expected POINT3D_ID X Y Z R G B ERROR TRACK... per line "
                            f"({str(err).splitlines()[0]})") from None
    table = table.reshape(-1, 7)
    bad = np.flatnonzero(~np.isfinite(table).all(axis=1))
    if bad.size:
        number = _data_lines(path)[bad[0]][0]
        raise InputError.at(path, None, f"line {number}: point {table[bad[0], 0]:.0f} has a non-finite "
                                        "coordinate or colour")
    return table[:, 1:4], table[:, 4:7].astype(np.uint8)


# ---------------------------------------------------------------- binary form

def _cameras_bin(path) -> dict:
    cameras = {}
    with open(path, "rb") as f:
        for _ in range(_count(f, path, "cameras", 24)):
            cam_id, model_id, width, height = _unpack(f, path, "<iiQQ")
            if model_id not in CAMERA_MODELS:
                raise InputError.at(path, None, f"camera {cam_id}: unknown camera model id {model_id}")
            model, n = CAMERA_MODELS[model_id]
            params = np.array(_unpack(f, path, f"<{n}d"))
            cameras[cam_id] = _camera(path, cam_id, model, width, height, params)
    return cameras


def _images_bin(path) -> list:
    images = []
    with open(path, "rb") as f:
        for _ in range(_count(f, path, "images", 4 + 56 + 4 + 1 + 8)):
            values = _unpack(f, path, "<i7di")
            name = bytearray()
            while (char := f.read(1)) not in (b"\x00", b""):
                name += char
            (num_points,) = _unpack(f, path, "<Q")
            if num_points > (os.path.getsize(path) - f.tell()) // 24:
                raise InputError.at(path, None, f"image {values[0]}: {num_points} 2D points do not fit in "
                                                "the rest of the file (truncated or corrupt)")
            f.seek(24 * num_points, os.SEEK_CUR)  # x, y (float64), point3D id (int64) each
            if not _is_utf8(bytes(name)):
                raise InputError.at(path, None, f"image {values[0]}: its name is not UTF-8 text")
            images.append(_checked_pose(path, f"image {values[0]}",
                                        ColmapImage(values[0], np.array(values[1:5]), np.array(values[5:8]),
                                                    values[8], name.decode("utf-8"))))
    return images


_POINT_FIXED = 8 + 24 + 3 + 8 + 8  # id, xyz, rgb, error, track length


@numba.njit(cache=True)
def _point_offsets(buf, count):  # pragma: no cover - compiled
    """Byte offset of each of ``count`` points3D.bin records in ``buf`` (uint8), -1 if truncated."""
    offsets = np.empty(count, np.int64)
    pos = 8
    for i in range(count):
        if pos + _POINT_FIXED > buf.shape[0]:
            offsets[0] = -1
            return offsets
        offsets[i] = pos
        track = 0
        for b in range(8):
            track |= np.int64(buf[pos + _POINT_FIXED - 8 + b]) << (8 * b)
        if track < 0 or track > (buf.shape[0] - pos - _POINT_FIXED) // 8:  # a length the file cannot hold
            offsets[0] = -1
            return offsets
        pos += _POINT_FIXED + 8 * track
    if pos > buf.shape[0]:
        offsets[0] = -1
    return offsets


def _points_bin(path):
    buf = np.fromfile(path, dtype=np.uint8)
    if buf.size < 8:
        raise InputError.at(path, None, "file is truncated")
    count = int(buf[:8].view("<u8")[0])
    if count > (buf.size - 8) // _POINT_FIXED:
        raise InputError.at(path, None, f"header says {count} points, more than the file can hold "
                                        "(truncated or corrupt)")
    offsets = _point_offsets(buf, count)
    if count and offsets[0] < 0:
        raise InputError.at(path, None, f"file is truncated or corrupt (header says {count} points, "
                                        "their tracks do not fit)")
    xyz = buf[offsets[:, None] + np.arange(8, 32)].view("<f8").reshape(count, 3)
    rgb = buf[offsets[:, None] + np.arange(32, 35)]
    bad = np.flatnonzero(~np.isfinite(xyz).all(axis=1))
    if bad.size:
        raise InputError.at(path, None, f"point {int(buf[offsets[bad[0]]:offsets[bad[0]] + 8].view('<u8')[0])} "
                                        "has a non-finite coordinate")
    return xyz, rgb


def _count(f, path, what: str, record_bytes: int) -> int:
    """The uint64 count at the start of a binary model file, checked against the bytes left in it, each
    record taking at least ``record_bytes``, before anything is allocated for it."""
    (count,) = _unpack(f, path, "<Q")
    if count > (os.path.getsize(path) - 8) // record_bytes:
        raise InputError.at(path, None, f"header says {count} {what}, more than the file can hold "
                                        "(truncated or corrupt)")
    return count


def _checked_pose(path, where: str, image: ColmapImage) -> ColmapImage:
    """``image``, unless its qvec or tvec is not finite or its qvec is zero (``InputError`` at ``where``)."""
    if not (np.isfinite(image.qvec).all() and np.isfinite(image.tvec).all()) or not np.any(image.qvec):
        raise InputError.at(path, None, f"{where}: image {image.image_id} has a zero or non-finite qvec or "
                                        "a non-finite tvec")
    return image


def _unpack(f, path, fmt):
    size = struct.calcsize(fmt)
    raw = f.read(size)
    if len(raw) != size:
        raise InputError.at(path, None, "file is truncated")
    return struct.unpack(fmt, raw)


def _camera(path, cam_id, model, width, height, params) -> Camera:
    if model not in NUM_PARAMS:
        raise InputError.at(path, None, f"camera {cam_id}: unknown camera model {model}")
    if len(params) != NUM_PARAMS[model]:
        raise InputError.at(path, None, f"camera {cam_id}: {model} has {NUM_PARAMS[model]} parameters, "
                            f"found {len(params)}")
    if width < 1 or height < 1 or not np.isfinite(params).all():
        raise InputError.at(path, None, f"camera {cam_id}: bad size {width} x {height} or non-finite parameters")
    return Camera(model, int(width), int(height), params)


# ---------------------------------------------------------------- to a scene

def pinhole(source, cam_id: int, camera: Camera) -> np.ndarray:
    """(fx, fy, cx, cy) of a camera usable as a pinhole; warns about ignored radial distortion and
    raises ``InputError`` (naming ``source``, the model's folder) for models that are not pinholes."""
    p = camera.params
    if camera.model in ("SIMPLE_PINHOLE", "SIMPLE_RADIAL", "RADIAL"):
        intr = np.array([p[0], p[0], p[1], p[2]])
        distortion = dict(zip(RADIAL.get(camera.model, ()), p[3:]))
    elif camera.model in ("PINHOLE", *ZERO_DISTORTION_ONLY):
        intr = p[:4].copy()
        distortion = dict(zip(ZERO_DISTORTION_ONLY.get(camera.model, ()), p[4:]))
    else:
        raise InputError.at(source, None, f"camera {cam_id}: model {camera.model} is not supported (use PINHOLE, "
                         "SIMPLE_PINHOLE, SIMPLE_RADIAL or RADIAL, or undistort with colmap image_undistorter)")
    nonzero = {k: v for k, v in distortion.items() if v != 0}
    if nonzero and camera.model in ZERO_DISTORTION_ONLY:
        raise InputError.at(source, None, f"camera {cam_id}: {camera.model} with distortion "
                         f"{', '.join(f'{k}={v:g}' for k, v in nonzero.items())} is not supported: "
                         "undistort the images first (colmap image_undistorter)")
    if nonzero:
        warn(f"{source}: camera {cam_id}: {camera.model} distortion {', '.join(f'{k}={v:g}' for k, v in nonzero.items())} "
             "ignored, used as a pinhole (expects undistorted images, as 3DGS does)")
    return intr


def quat_to_rotmat(q: np.ndarray) -> np.ndarray:
    """Rotation matrices [N, 3, 3] of quaternions q [N, 4] (w, x, y, z), normalised first."""
    w, x, y, z = (q / np.linalg.norm(q, axis=1, keepdims=True)).T
    return np.stack([1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y),
                     2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x),
                     2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)], axis=1).reshape(-1, 3, 3)


def convert_colmap(sparse_dir, image_dir, downscale: float = 1.0, heldout_every: int = DEFAULT_HELDOUT_EVERY):
    """A ``Scene`` from a COLMAP sparse model and its images.

    Images are sorted by name; every ``heldout_every``-th (0, 8, 16, ... as 3DGS's LLFF hold-out) is
    held out, and at least one must be left to train on (as ``pregel train`` needs both). Images and intrinsics are scaled by 1 / ``downscale``. ``/init`` holds the
    3D points and their colours, and ``/gaussians`` the Gaussians training would start from.
    """
    if not (math.isfinite(downscale) and downscale >= 1):
        raise InputError(f"`downscale` must be a number of at least 1, got {downscale}")
    if heldout_every < 1:
        raise InputError(f"`heldout_every` must be at least 1 (training needs held-out images), got "
                         f"{heldout_every}")
    model = read_model(sparse_dir)
    if not model.images:
        raise InputError.at(sparse_dir, None, "the model has no registered images")
    if len(model.points) == 0:
        raise InputError.at(sparse_dir, None, "the model has no 3D points to start from")
    images = sorted(model.images, key=lambda im: im.name)
    for im in images:
        if im.camera_id not in model.cameras:
            raise InputError.at(sparse_dir, None, f"image {im.image_id} ({im.name}) refers to camera "
                                f"{im.camera_id}, which the model does not have")
    used = sorted({im.camera_id for im in images})
    sizes = {(model.cameras[c].width, model.cameras[c].height) for c in used}
    if len(sizes) > 1:
        raise InputError.at(sparse_dir, None, f"cameras have different image sizes {sorted(sizes)}; "
                            "a scene holds one size")
    (width, height), = sizes
    new_w, new_h = max(1, round(width / downscale)), max(1, round(height / downscale))
    scale = np.array([new_w / width, new_h / height] * 2)
    intr = {c: pinhole(sparse_dir, c, model.cameras[c]) * scale for c in used}
    Ks = np.zeros((len(images), 3, 3), np.float32)
    Ks[:, 2, 2] = 1
    fx, fy, cx, cy = np.array([intr[im.camera_id] for im in images]).T
    Ks[:, 0, 0], Ks[:, 1, 1], Ks[:, 0, 2], Ks[:, 1, 2] = fx, fy, cx, cy
    viewmats = np.zeros((len(images), 4, 4), np.float32)
    viewmats[:, :3, :3] = quat_to_rotmat(np.array([im.qvec for im in images]))
    viewmats[:, :3, 3] = np.array([im.tvec for im in images])
    viewmats[:, 3, 3] = 1
    heldout = np.arange(len(model.images)) % heldout_every == 0
    if heldout.all():
        raise InputError.at(sparse_dir, None, f"the model has {len(model.images)} registered image(s), all "
                            f"held out with `heldout_every` {heldout_every}: training needs at least one "
                            "training and one held-out image")
    pixels = np.stack([_load_image(image_dir, im.name, (width, height), (new_w, new_h)) for im in images])
    init_means = model.points.astype(np.float32)
    init_colors = (model.colors.astype(np.float32) / 255.0)
    gaussians = {k: v.numpy() for k, v in init_gaussians(init_means, init_colors, 0).items() if k not in SH_PARAMS}
    return Scene(**gaussians, colors=init_colors, viewmats=viewmats, Ks=Ks, images=pixels, width=new_w, height=new_h,
                 init_means=init_means, init_colors=init_colors, heldout=heldout,
                 attrs={"source": "colmap", "colmap_model": os.path.abspath(sparse_dir),
                        "image_names": "\n".join(im.name for im in images), "downscale": float(downscale)})


def _load_image(image_dir, name: str, size: tuple, new_size: tuple) -> np.ndarray:
    """One image as uint8 [H, W, 3], checked against its camera's size, resized to ``new_size``."""
    from PIL import Image, UnidentifiedImageError

    path = os.path.join(os.fspath(image_dir), name)
    if not os.path.isfile(path):
        raise InputError.at(path, None, "image file is missing")
    try:
        with Image.open(path) as img:
            img = Image.fromarray(rgb8(img))
    except (UnidentifiedImageError, OSError) as err:
        raise InputError.at(path, None, f"cannot be read as an image ({err})") from None
    if img.size != size:
        raise InputError.at(path, None, f"image is {img.size[0]} x {img.size[1]} but its camera says "
                            f"{size[0]} x {size[1]}")
    if new_size != size:
        img = img.resize(new_size, Image.LANCZOS)
    return np.asarray(img, dtype=np.uint8)


def rgb8(img) -> np.ndarray:
    """A PIL image as uint8 RGB [H, W, 3]: 16-bit grayscale (PIL modes I;16 and I, as PNGs load) scaled
    from [0, 65535] to [0, 255] (PIL's own conversion clips it to 0/255), grayscale repeated into R, G
    and B."""
    if img.mode in ("I;16", "I;16B", "I;16L", "I;16N", "I"):
        gray = np.round(np.clip(np.asarray(img, dtype=np.float64), 0, 65535) / 65535 * 255).astype(np.uint8)
        return np.repeat(gray[:, :, None], 3, axis=2)
    return np.asarray(img.convert("RGB"), dtype=np.uint8)
