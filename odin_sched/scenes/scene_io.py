"""Read, write and validate HDF5 scene files (format "pregel-scene", version 1, see the README).

The v1 datasets are::

    /gaussians/means      float32 [G, 3]
    /gaussians/scales     float32 [G, 3]     log scale
    /gaussians/quats      float32 [G, 4]     (w, x, y, z), normalised at use
    /gaussians/opacities  float32 [G]        logit
    /gaussians/colors     float32 [G, 3]     RGB
    /cameras/viewmats     float32 [C, 4, 4]  world-to-camera
    /cameras/Ks           float32 [C, 3, 3]  pinhole intrinsics
    /images               uint8   [C, H, W, 3]
    root attributes: format = "pregel-scene", version = 1, width = W, height = H

Optional extras written by this project (readers of plain v1 files may ignore them):

    /gaussians/sh      float32 [G, K, 3]  SH coefficients of the colour, K = (D + 1)^2 for degree D
                                       in 0..3 (coefficient-major; the reference 3DGS evaluation);
                                       when present, renderers use it and /gaussians/colors holds
                                       its DC colour sh[:, 0] * C0 + 0.5 (C0 = 0.28209479177387814)
    /gaussians/ids     int64   [G]     global ids of trained Gaussians (``pregel train``), ascending
    /init/means        float32 [P, 3]  initial point cloud for training (as structure-from-motion gives)
    /init/colors       float32 [P, 3]  its RGB colours; both or neither
    /cameras/heldout   bool    [C]     True for cameras held out of training (used for evaluation)
    /metrics/<name>    numeric 1D/2D   training record, e.g. /metrics/psnr_steps, /metrics/psnr,
                                       /metrics/per_rank [ranks, fields] (names in attribute per_rank_fields)
    further root attributes (str, int, float, bool), e.g. the training steps, seed and wall time

Every problem found is raised as one ``InputError`` naming the file, the dataset and what is wrong.
Writing is atomic: the file is written under a temporary name in the same directory, then renamed.
"""
import os
from dataclasses import dataclass, field

import h5py
import numpy as np

from odin_sched.scenes.sh import SH_COUNTS
from pregel.atomic import atomic_h5
from pregel.errors import InputError

FORMAT = "pregel-scene"
VERSION = 1
#: without /cameras/heldout, every HOLDOUT_EVERY-th camera (0, 8, 16, ...) is held out of training
HOLDOUT_EVERY = 8

# name -> trailing shape after the leading G (all float32)
GAUSSIAN_DATASETS = {
    "means": (3,),
    "scales": (3,),
    "quats": (4,),
    "opacities": (),
    "colors": (3,),
}


@dataclass
class Scene:
    """A scene in memory: Gaussians, cameras, images and the optional extras (NumPy arrays)."""

    means: np.ndarray | None       # [G, 3] float32 (None: /gaussians not read, ``read_scene``)
    scales: np.ndarray | None      # [G, 3] float32, log scale
    quats: np.ndarray | None       # [G, 4] float32, (w, x, y, z)
    opacities: np.ndarray | None   # [G] float32, logit
    colors: np.ndarray | None      # [G, 3] float32
    viewmats: np.ndarray     # [C, 4, 4] float32
    Ks: np.ndarray           # [C, 3, 3] float32
    images: np.ndarray       # [C, H, W, 3] uint8 (or a SceneImages, read one at a time)
    width: int
    height: int
    init_means: np.ndarray | None = None   # [P, 3] float32
    init_colors: np.ndarray | None = None  # [P, 3] float32
    heldout: np.ndarray | None = None      # [C] bool
    sh: np.ndarray | None = None           # [G, K, 3] float32 SH coefficients (K = 1, 4, 9 or 16)
    ids: np.ndarray | None = None          # [G] int64 global ids of trained Gaussians, ascending
    metrics: dict = field(default_factory=dict)  # name -> 1D numeric array
    attrs: dict = field(default_factory=dict)    # extra root attributes

    @property
    def num_gaussians(self) -> int:
        return int(self.means.shape[0])

    @property
    def num_cameras(self) -> int:
        return int(self.viewmats.shape[0])

    def gaussians(self) -> dict:
        """The Gaussian parameter arrays by name (means, scales, quats, opacities, colors, and sh when
        the scene has SH coefficients)."""
        out = {name: getattr(self, name) for name in GAUSSIAN_DATASETS}
        return out if self.sh is None else {**out, "sh": self.sh}


def heldout_mask(scene: Scene) -> np.ndarray:
    """Held-out cameras: the file's ``/cameras/heldout`` or else every 8th camera (bool [C])."""
    if scene.heldout is not None:
        return scene.heldout
    return default_heldout(scene.num_cameras)


def default_heldout(cameras: int) -> np.ndarray:
    """bool [cameras]: the held-out cameras of a file without ``/cameras/heldout`` (0, 8, 16, ...)."""
    return np.arange(cameras) % HOLDOUT_EVERY == 0


def _check_array(path, name: str, arr: np.ndarray, dtype, tail: tuple, values: bool = True) -> None:
    """Dtype, rank, trailing dimensions and (with ``values``) finiteness of one array; without ``values``
    ``arr`` may be an unread h5py dataset."""
    if arr.dtype != np.dtype(dtype):
        raise InputError.at(path, name, f"dtype is {arr.dtype}, expected {np.dtype(dtype)}")
    if arr.ndim != 1 + len(tail) or tuple(arr.shape[1:]) != tail:
        want = "[N" + "".join(f", {d}" for d in tail) + "]"
        raise InputError.at(path, name, f"shape is {list(arr.shape)}, expected {want}")
    if values and arr.dtype.kind == "f" and not np.all(np.isfinite(arr)):
        bad = int(np.count_nonzero(~np.isfinite(arr)))
        raise InputError.at(path, name, f"contains {bad} NaN or infinite values")


def _check_count(path, name: str, arr: np.ndarray, expected: int, what: str) -> None:
    if arr.shape[0] != expected:
        raise InputError.at(path, name, f"has {arr.shape[0]} rows but {what} is {expected}")


def validate_gaussians(arrays: dict, path="<scene>", values: bool = True) -> None:
    """Check the Gaussian datasets of a scene (name -> array: ``GAUSSIAN_DATASETS``, optionally ``sh``
    [G, K, 3] and ``ids`` [G] int64, strictly ascending) as the format requires; raise InputError on the
    first problem. A part of a file's rows may be checked at a time (the ids then only among themselves).
    Without ``values`` only their layout is checked (dtypes, shapes, counts), which unread h5py datasets
    allow; finiteness, quaternion lengths and the ids' order need the values."""
    for name, tail in GAUSSIAN_DATASETS.items():
        _check_array(path, f"/gaussians/{name}", arrays[name], np.float32, tail, values)
    g = int(arrays["means"].shape[0])
    if g == 0:
        raise InputError.at(path, "/gaussians/means", "the scene has no Gaussians")
    for name in GAUSSIAN_DATASETS:
        _check_count(path, f"/gaussians/{name}", arrays[name], g, "the number of Gaussians in /gaussians/means")
    sh, ids = arrays.get("sh"), arrays.get("ids")
    if sh is not None:
        count = sh.shape[1] if sh.ndim == 3 else -1
        _check_array(path, "/gaussians/sh", sh, np.float32, (count, 3), values)
        _check_count(path, "/gaussians/sh", sh, g, "the number of Gaussians in /gaussians/means")
        if sh.shape[1] not in SH_COUNTS:
            raise InputError.at(path, "/gaussians/sh", f"has {sh.shape[1]} coefficients per channel, "
                                "expected 1, 4, 9 or 16 (SH degree 0 to 3)")
    if ids is not None:
        _check_array(path, "/gaussians/ids", ids, np.int64, (), values)
        _check_count(path, "/gaussians/ids", ids, g, "the number of Gaussians in /gaussians/means")
        if values and np.any(np.diff(ids) <= 0):
            raise InputError.at(path, "/gaussians/ids", "ids must be strictly ascending (unique)")
    if not values:
        return
    norms = np.linalg.norm(arrays["quats"].astype(np.float64), axis=1)
    if np.any(norms < 1e-8):
        raise InputError.at(path, "/gaussians/quats",
                            f"{int(np.count_nonzero(norms < 1e-8))} quaternions have zero length and cannot be normalised")


def validate(scene: Scene, path="<scene>") -> None:
    """Check a Scene for everything the format requires; raise InputError on the first problem. Its
    Gaussians are skipped when they were not read (``read_scene(..., gaussians=False)``, which checked
    their layout)."""
    for attr in ("width", "height"):
        value = getattr(scene, attr)
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise InputError.at(path, None, f"attribute {attr} must be a positive integer, got {value!r}")
    if scene.means is not None:
        validate_gaussians(scene.gaussians() if scene.ids is None else {**scene.gaussians(), "ids": scene.ids}, path)
    _check_array(path, "/cameras/viewmats", scene.viewmats, np.float32, (4, 4))
    _check_array(path, "/cameras/Ks", scene.Ks, np.float32, (3, 3))
    if scene.images.ndim == 4 and scene.images.shape[1:3] != (scene.height, scene.width):
        raise InputError.at(path, "/images", f"images are {scene.images.shape[2]} x {scene.images.shape[1]} "
                            f"but the attributes say width x height = {scene.width} x {scene.height}")
    _check_array(path, "/images", scene.images, np.uint8, (scene.height, scene.width, 3))
    c = scene.num_cameras
    if c == 0:
        raise InputError.at(path, "/cameras/viewmats", "the scene has no cameras")
    _check_count(path, "/cameras/Ks", scene.Ks, c, "the number of cameras in /cameras/viewmats")
    _check_count(path, "/images", scene.images, c, "the number of cameras in /cameras/viewmats")
    if not np.all(scene.Ks[:, 0, 0] > 0) or not np.all(scene.Ks[:, 1, 1] > 0):
        raise InputError.at(path, "/cameras/Ks", "focal lengths K[0, 0] and K[1, 1] must be positive")

    if (scene.init_means is None) != (scene.init_colors is None):
        raise InputError.at(path, "/init", "needs both means and colors, or neither")
    if scene.init_means is not None:
        _check_init(path, scene.init_means, scene.init_colors)
    if scene.heldout is not None:
        _check_array(path, "/cameras/heldout", scene.heldout, np.bool_, ())
        _check_count(path, "/cameras/heldout", scene.heldout, c, "the number of cameras in /cameras/viewmats")
    validate_metrics(scene.metrics, path)


def _check_init(path, means, colors, values: bool = True) -> None:
    """The initial point cloud: /init/means and /init/colors [P, 3] float32, P > 0 (arrays, or unread
    h5py datasets without ``values``)."""
    _check_array(path, "/init/means", means, np.float32, (3,), values)
    _check_array(path, "/init/colors", colors, np.float32, (3,), values)
    _check_count(path, "/init/colors", colors, means.shape[0], "the number of points in /init/means")
    if means.shape[0] == 0:
        raise InputError.at(path, "/init/means", "the initial point cloud is empty")


def validate_metrics(metrics: dict, path="<scene>") -> None:
    """Check a scene's ``/metrics`` (name -> 1D or 2D numeric array); raise InputError on the first problem."""
    for name, values in metrics.items():
        arr = np.asarray(values)
        if arr.ndim not in (1, 2) or arr.dtype.kind not in "biuf":
            raise InputError.at(path, f"/metrics/{name}",
                                f"must be a 1D or 2D numeric array, got {arr.dtype} {list(arr.shape)}")


def _read_dataset(f: h5py.File, path, name: str, read: bool = True):
    """The dataset ``name`` of an open file as an array, or unless ``read`` the unread h5py dataset (only
    checked to be a dataset; valid while the file is open)."""
    if name not in f:
        raise InputError.at(path, name, "dataset is missing")
    obj = f[name]
    if not isinstance(obj, h5py.Dataset):
        raise InputError.at(path, name, "is a group, expected a dataset")
    return obj[()] if read else obj


class SceneImages:
    """The images [C, H, W, 3] uint8 of a scene file, left on disk: ``images[c]`` reads camera c's image
    (one HDF5 chunk) and counts it in ``reads``; ``shape``, ``dtype``, ``ndim`` and ``len`` as an array's.
    The file is opened (read-only) at the first read and stays open until ``close`` (a context manager
    closes it on leaving): opening it for each image cost an odin rank more than reading it (about 1 ms
    an image). A read after ``close`` opens it again."""

    def __init__(self, path, shape: tuple, dtype):
        self.path, self.shape, self.dtype, self.reads = path, tuple(shape), np.dtype(dtype), 0
        self._file = self._images = None  # the open file and its /images dataset, from the first read

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, cam: int) -> np.ndarray:
        if self._file is None:
            self._file = h5py.File(self.path, "r")
            self._images = self._file["images"]
        image = self._images[int(cam)]
        self.reads += 1
        return image

    def close(self) -> None:
        """Close the file if a read opened it (nothing otherwise)."""
        if self._file is not None:
            self._file.close()
            self._file = self._images = None

    def __enter__(self) -> "SceneImages":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def read_scene(path, lazy_images: bool = False, gaussians: bool = True, init: bool = True) -> Scene:
    """Read and validate a scene file; raise InputError with a one-line message on any problem. With
    ``lazy_images`` the images stay on disk (``Scene.images`` is a ``SceneImages``, checked by shape and
    dtype). Without ``gaussians`` the Gaussian datasets (``/gaussians/*``), and without ``init`` the
    initial point cloud, are not read (their fields are None) and only their layout is checked
    (``validate_gaussians`` without values): what a trainer does with the scene it trains on, whose
    Gaussians it never uses."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise InputError.at(path, None, "file not found")
    try:
        f = h5py.File(path, "r")
    except OSError as exc:
        raise InputError.at(path, None, f"cannot be opened as HDF5 ({exc})") from None
    with f:
        fmt = f.attrs.get("format")
        if isinstance(fmt, bytes):
            fmt = fmt.decode()
        if fmt != FORMAT:
            raise InputError.at(path, None, f"attribute format is {fmt!r}, expected {FORMAT!r}")
        version = f.attrs.get("version")
        version = version.item() if isinstance(version, np.generic) else version  # 2, not np.int64(2)
        if version != VERSION:
            raise InputError.at(path, None, f"attribute version is {version!r}, only version {VERSION} is supported")
        dims = {}
        for attr in ("width", "height"):
            value = f.attrs.get(attr)
            if value is None or np.ndim(value) != 0 or not np.issubdtype(np.asarray(value).dtype, np.integer):
                raise InputError.at(path, None, f"attribute {attr} must be an integer, got {value!r}")
            dims[attr] = int(value)
        arrays = {name: _read_dataset(f, path, f"/gaussians/{name}", gaussians) for name in GAUSSIAN_DATASETS}
        arrays["viewmats"] = _read_dataset(f, path, "/cameras/viewmats")
        arrays["Ks"] = _read_dataset(f, path, "/cameras/Ks")
        if lazy_images:
            _read_dataset(f, path, "/images", read=False)
            arrays["images"] = SceneImages(path, f["images"].shape, f["images"].dtype)
        else:
            arrays["images"] = _read_dataset(f, path, "/images")
        if "init" in f:
            arrays["init_means"] = _read_dataset(f, path, "/init/means", init)
            arrays["init_colors"] = _read_dataset(f, path, "/init/colors", init)
        if "gaussians/sh" in f:
            arrays["sh"] = _read_dataset(f, path, "/gaussians/sh", gaussians)
        if "gaussians/ids" in f:
            arrays["ids"] = _read_dataset(f, path, "/gaussians/ids", gaussians)
        _unread_layout(path, arrays, gaussians, init)
        if "cameras/heldout" in f:
            arrays["heldout"] = _read_dataset(f, path, "/cameras/heldout")
        metrics = {name: _read_dataset(f, path, f"/metrics/{name}") for name in f.get("metrics", {})}
        attrs = {k: (v.decode() if isinstance(v, bytes) else v.item() if isinstance(v, np.generic) else v)
                 for k, v in f.attrs.items() if k not in ("format", "version", "width", "height")}
    scene = Scene(**arrays, **dims, metrics=metrics, attrs=attrs)
    validate(scene, path)
    return scene


def _unread_layout(path, arrays: dict, gaussians: bool, init: bool) -> None:
    """Check the layout of the datasets ``read_scene`` left unread (h5py datasets in ``arrays``, by field
    name) and set their fields to None."""
    names = [*GAUSSIAN_DATASETS, "sh", "ids"]
    if not gaussians:
        validate_gaussians({name: arrays[name] for name in names if name in arrays}, path, values=False)
        arrays.update(dict.fromkeys(names))
    if not init and "init_means" in arrays:
        _check_init(path, arrays["init_means"], arrays["init_colors"], values=False)
        arrays.update(init_means=None, init_colors=None)


def write_scene(path, scene: Scene) -> None:
    """Validate ``scene`` and write it to ``path`` atomically (temporary file, then rename)."""
    path = os.fspath(path)
    validate(scene, path)
    with atomic_h5(path) as f:
        f.attrs["format"] = FORMAT
        f.attrs["version"] = VERSION
        f.attrs["width"] = int(scene.width)
        f.attrs["height"] = int(scene.height)
        for key, value in scene.attrs.items():
            f.attrs[key] = value
        for name in GAUSSIAN_DATASETS:
            f.create_dataset(f"gaussians/{name}", data=getattr(scene, name))
        if scene.sh is not None:
            f.create_dataset("gaussians/sh", data=scene.sh)
        if scene.ids is not None:
            f.create_dataset("gaussians/ids", data=scene.ids)
        f.create_dataset("cameras/viewmats", data=scene.viewmats)
        f.create_dataset("cameras/Ks", data=scene.Ks)
        f.create_dataset("images", data=scene.images, chunks=(1,) + scene.images.shape[1:])
        if scene.heldout is not None:
            f.create_dataset("cameras/heldout", data=scene.heldout)
        if scene.init_means is not None:
            f.create_dataset("init/means", data=scene.init_means)
            f.create_dataset("init/colors", data=scene.init_colors)
        for name, values in scene.metrics.items():
            f.create_dataset(f"metrics/{name}", data=np.asarray(values))
