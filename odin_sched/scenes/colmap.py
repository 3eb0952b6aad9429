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
Pixel centres sit at +0.5 in both. Cameras: PINHOLE and SIMPLE_PINHOLE (and distortion models whose
distortion is zero) are used as they are; a camera with lens distortion (SIMPLE_RADIAL, RADIAL, OPENCV,
FULL_OPENCV, OPENCV_FISHEYE, ...) and its images are undistorted as COLMAP's image undistorter does
(``odin_sched.scenes.undistort``, with pycolmap) into a pinhole camera, as the reference 3DGS pipeline
trains on undistorted images.

Images are read by ``read_rgb8``: 8-bit RGB as it is; grayscale (8 or 16 bit), palette, RGBA and
other 8-bit modes converted to RGB; 16-bit grayscale scaled by 255 / 65535 (not clipped at 255);
16-bit RGB PNGs as Pillow reads them (their top 8 bits, within one level of v x 255 / 65535);
images whose range is unknown (32-bit integer, floating point) refused with one line.
"""

import math
import os
import struct
import warnings
from dataclasses import dataclass

import numba
import numpy as np

from kernels.splat.constants import TILE_SIZE
from odin_sched.scenes.point_cloud import init_gaussians
from odin_sched.scenes.scene_io import Scene
from odin_sched.scenes.sh import SH_PARAMS
from odin_sched.scenes.undistort import Undistorter, pinhole_params
from pregel.errors import InputError

# model id -> (name, number of params), from COLMAP's src/colmap/sensor/models.h
CAMERA_MODELS = {0: ("SIMPLE_PINHOLE", 3), 1: ("PINHOLE", 4), 2: ("SIMPLE_RADIAL", 4), 3: ("RADIAL", 5),
                 4: ("OPENCV", 8), 5: ("OPENCV_FISHEYE", 8), 6: ("FULL_OPENCV", 12), 7: ("FOV", 5),
                 8: ("SIMPLE_RADIAL_FISHEYE", 4), 9: ("RADIAL_FISHEYE", 5), 10: ("THIN_PRISM_FISHEYE", 12)}
NUM_PARAMS = {name: n for name, n in CAMERA_MODELS.values()}
#: Pillow modes of 16-bit grayscale images
GRAY16_MODES = ("I;16", "I;16L", "I;16B", "I;16N")
DEFAULT_HELDOUT_EVERY = 8


@dataclass
class Camera:
    """A camera of a COLMAP model: its model name, image size and parameters (``NUM_PARAMS`` of them)."""

    model: str
    width: int
    height: int
    params: np.ndarray  # [num_params] float64


@dataclass
class ColmapImage:
    """An image of a COLMAP model: its id, world-to-camera pose (``qvec``, ``tvec``: see the module
    docstring), camera id and file name."""

    image_id: int
    qvec: np.ndarray  # [4] (w, x, y, z)
    tvec: np.ndarray  # [3]
    camera_id: int
    name: str


@dataclass
class ColmapModel:
    """What ``read_model`` reads of a COLMAP sparse model: cameras, images and the 3D points with colours."""

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
        number += 1  # the image's POINTS2D line (possibly empty): (X, Y, POINT3D_ID) triples
        values = len(lines[number - 1].split()) if number <= len(lines) else 0
        if values % 3:
            raise InputError.at(path, None, f"line {number}: image {image.image_id}'s POINTS2D line has {values} "
                                "values, not (X, Y, POINT3D_ID) triples (truncated or corrupt)")
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

@dataclass
class PinholeCamera:
    """The pinhole camera a COLMAP camera becomes: intrinsics (fx, fy, cx, cy), image size, and the
    ``Undistorter`` its images go through (None when it has no distortion)."""

    intr: np.ndarray  # [4] float64
    width: int
    height: int
    undistorter: Undistorter | None


def pinhole_camera(camera: Camera) -> PinholeCamera:
    """``camera`` as it is when it is a pinhole, else as COLMAP's undistorter makes it."""
    intr = pinhole_params(camera.model, camera.params)
    if intr is not None:
        return PinholeCamera(intr, camera.width, camera.height, None)
    und = Undistorter(camera.model, camera.width, camera.height, camera.params,
                      what=f"undistorting {camera.model} cameras")
    return PinholeCamera(und.params, und.width, und.height, und)


def quat_to_rotmat(q: np.ndarray) -> np.ndarray:
    """Rotation matrices [N, 3, 3] of quaternions q [N, 4] (w, x, y, z), normalised first."""
    w, x, y, z = (q / np.linalg.norm(q, axis=1, keepdims=True)).T
    return np.stack([1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y),
                     2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x),
                     2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)], axis=1).reshape(-1, 3, 3)


def check_scene_options(downscale: float, heldout_every: int) -> None:
    """One InputError line unless ``downscale`` is a number of at least 1 and ``heldout_every`` at least 1."""
    if not (math.isfinite(downscale) and downscale >= 1):
        raise InputError(f"`downscale` must be a number of at least 1, got {downscale}")
    if heldout_every < 1:
        raise InputError(f"`heldout_every` must be at least 1 (training needs held-out images), got "
                         f"{heldout_every}")


#: the smallest image side a downscale may leave: one rasterizer tile (16 pixels, as the 3DGS reference's)
MIN_IMAGE_SIDE = TILE_SIZE


def downscaled_size(width: int, height: int, downscale: float, what: str = "images") -> tuple:
    """(width, height) of ``what``, images of ``width`` x ``height``, divided by ``downscale`` and rounded;
    one InputError line naming the largest downscale that works when a side would fall below
    ``MIN_IMAGE_SIDE`` (images already smaller are kept as they are at downscale 1)."""
    new_w, new_h = max(1, round(width / downscale)), max(1, round(height / downscale))
    if min(new_w, new_h) >= MIN_IMAGE_SIDE or downscale == 1:
        return new_w, new_h
    # round(side / d) >= MIN_IMAGE_SIDE while side / d >= MIN_IMAGE_SIDE - 0.5 (15.5 rounds to 16, even)
    largest = math.floor(100 * min(width, height) / (MIN_IMAGE_SIDE - 0.5)) / 100
    works = (f"the largest `downscale` that works is {largest:g}" if largest >= 1 else
             "they are smaller than that already: leave `downscale` at 1")
    raise InputError(f"`downscale` {downscale:g} would make the {width} x {height} {what} {new_w} x {new_h} pixels; "
                     f"a scene's images must be at least {MIN_IMAGE_SIDE} on a side (one rasterizer tile): {works}")


def convert_colmap(sparse_dir, image_dir, downscale: float = 1.0, heldout_every: int = DEFAULT_HELDOUT_EVERY):
    """A ``Scene`` from a COLMAP sparse model and its images.

    Images are sorted by name; every ``heldout_every``-th (0, 8, 16, ... as 3DGS's LLFF hold-out) is
    held out, and at least one must be left to train on (as ``pregel train`` needs both). Images and intrinsics are
    scaled by 1 / ``downscale``, which must leave the images ``MIN_IMAGE_SIDE`` pixels on a side. ``/init`` holds the
    3D points and their colours, and ``/gaussians`` the Gaussians training would start from.
    """
    check_scene_options(downscale, heldout_every)
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
    pinholes = {c: pinhole_camera(model.cameras[c]) for c in used}
    sizes = {(cam.width, cam.height) for cam in pinholes.values()}
    if len(sizes) > 1:
        undistorted = " (after undistortion)" if any(cam.undistorter for cam in pinholes.values()) else ""
        raise InputError.at(sparse_dir, None, f"cameras have different image sizes{undistorted} {sorted(sizes)}; "
                            "a scene holds one size")
    (width, height), = sizes
    what = "undistorted images" if any(cam.undistorter for cam in pinholes.values()) else "images"
    new_w, new_h = downscaled_size(width, height, downscale, what)  # before any image is read
    scale = np.array([new_w / width, new_h / height] * 2)
    intr = {c: pinholes[c].intr * scale for c in used}
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
    pixels = np.stack([_load_image(image_dir, im.name, model.cameras[im.camera_id], pinholes[im.camera_id],
                                   (new_w, new_h)) for im in images])
    init_means = model.points.astype(np.float32)
    init_colors = (model.colors.astype(np.float32) / 255.0)
    gaussians = {k: v.numpy() for k, v in init_gaussians(init_means, init_colors, 0).items() if k not in SH_PARAMS}
    return Scene(**gaussians, colors=init_colors, viewmats=viewmats, Ks=Ks, images=pixels, width=new_w, height=new_h,
                 init_means=init_means, init_colors=init_colors, heldout=heldout,
                 attrs={"source": "colmap", "colmap_model": os.path.abspath(sparse_dir),
                        "image_names": "\n".join(im.name for im in images), "downscale": float(downscale)})


def read_rgb8(path) -> np.ndarray:
    """The image file ``path`` as uint8 RGB [H, W, 3] (see the module docstring for the modes), or one
    ``InputError`` line naming the file."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as img:
            img.load()
            mode = img.mode
            if mode in GRAY16_MODES or (mode == "I" and img.format == "PNG"):  # 16-bit grayscale
                gray = np.asarray(img).astype(np.float64)
                return np.repeat(np.round(gray * (255.0 / 65535.0)).astype(np.uint8)[..., None], 3, axis=2)
            if mode in ("I", "F") or mode.startswith("I;"):
                raise InputError.at(path, None, f"image mode {mode} (32-bit integer or floating point) has no "
                                    "known range; save it as 8- or 16-bit")
            return np.asarray(img.convert("RGB"), dtype=np.uint8)
    except (UnidentifiedImageError, OSError) as err:
        raise InputError.at(path, None, f"cannot be read as an image ({err})") from None


def _load_image(image_dir, name: str, camera: Camera, pinhole: PinholeCamera, new_size: tuple) -> np.ndarray:
    """One image as uint8 [H, W, 3], checked against its camera's size, undistorted when its camera has
    distortion, resized to ``new_size``."""
    from PIL import Image

    path = os.path.join(os.fspath(image_dir), name)
    if not os.path.isfile(path):
        raise InputError.at(path, None, "image file is missing")
    pixels = read_rgb8(path)
    if (pixels.shape[1], pixels.shape[0]) != (camera.width, camera.height):
        raise InputError.at(path, None, f"image is {pixels.shape[1]} x {pixels.shape[0]} but its camera says "
                            f"{camera.width} x {camera.height}")
    if pinhole.undistorter is not None:
        pixels = pinhole.undistorter.image(pixels)
    if new_size != (pixels.shape[1], pixels.shape[0]):
        pixels = np.asarray(Image.fromarray(pixels).resize(new_size, Image.LANCZOS), dtype=np.uint8)
    return pixels
