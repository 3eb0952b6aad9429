"""Photos in, scene out: structure from motion with pycolmap (``pregel sfm``).

What the reference 3DGS code's ``convert.py`` does with the COLMAP binaries, with pycolmap: SIFT
features of every photo of the folder (one shared camera of the model ``camera_model``, ``OPENCV`` as
the reference's default ``--camera``), exhaustive matching, incremental mapping; the largest
reconstruction is written as a COLMAP sparse model and converted to a scene by
``odin_sched.colmap.convert_colmap``, which undistorts the photos into a pinhole camera
(``odin_sched.scenes.undistort``). Photos that do not register are listed; fewer than two registered
photos is an ``InputError``. pycolmap is an optional dependency
(``pip install 'pregel-mpi[colmap]'``).

Few photos may not be enough to calibrate a camera with many parameters: on the five photos of
tests/data/cour_carree, ``OPENCV``'s fx and fy come out 725.7 and 301.8 (a real camera's pixels are
square) with large tangential terms, which the undistortion turns into warped images that fit 3.3 dB
worse after 1,500 training steps than those of a ``SIMPLE_RADIAL`` camera (docs/performance-history.md,
"Real captures: why the fit was poor before issue 22"). ``calibration_warning`` says so when it happens.
"""
import os
import tempfile
from dataclasses import dataclass

from odin_sched.scenes.colmap import DEFAULT_HELDOUT_EVERY, check_scene_options, convert_colmap, downscaled_size
from odin_sched.scenes.undistort import pycolmap_module
from pregel.errors import InputError

#: file name endings read as photos (case-insensitive)
PHOTO_EXTENSIONS = (".jpg", ".jpeg", ".png", ".tif", ".tiff", ".bmp")
CAMERA_MODEL = "OPENCV"  # the reference convert.py's default
#: the camera models SfM may calibrate (COLMAP's names), fewest parameters first
CAMERA_MODELS = ("SIMPLE_PINHOLE", "PINHOLE", "SIMPLE_RADIAL", "RADIAL", "OPENCV")
#: fx / fy beyond which a calibrated camera's pixels are reported as far from square
MAX_ASPECT = 1.1


@dataclass
class SfmResult:
    """A scene from photos, and which photos made it in."""

    scene: object            # odin_sched.scene_io.Scene
    registered: list         # photo names in the scene
    unregistered: list       # photo names that did not register
    num_points: int          # 3D points of the reconstruction
    camera: str              # the calibrated camera, as pycolmap prints it
    warning: str | None      # ``calibration_warning`` of that camera


def photo_names(images_dir) -> list:
    """The photo file names of ``images_dir`` (sorted), or one ``InputError`` line when there are fewer
    than two."""
    images_dir = os.fspath(images_dir)
    if not os.path.isdir(images_dir):
        raise InputError.at(images_dir, None, "no such folder of photos")
    names = sorted(n for n in os.listdir(images_dir)
                   if n.lower().endswith(PHOTO_EXTENSIONS) and os.path.isfile(os.path.join(images_dir, n)))
    if len(names) < 2:
        raise InputError.at(images_dir, None, f"found {len(names)} photo(s) ({', '.join(PHOTO_EXTENSIONS)}); "
                            "structure from motion needs at least two")
    return names


def check_photo_downscale(images_dir, names: list, downscale: float) -> None:
    """One InputError line when ``downscale`` would leave the smallest of the photos ``names`` under
    ``MIN_IMAGE_SIDE`` pixels on a side: checked on the photos' sizes (their headers) before the structure
    from motion, and again by ``convert_colmap`` on the undistorted size."""
    from PIL import Image, UnidentifiedImageError

    sizes = []
    for name in names:
        try:
            with Image.open(os.path.join(images_dir, name)) as img:
                sizes.append(img.size)
        except (UnidentifiedImageError, OSError):
            continue  # pycolmap reports a photo it cannot read
    if sizes:
        width, height = min(sizes, key=min)
        downscaled_size(width, height, downscale, f"photos of {os.fspath(images_dir)}")


def check_camera_model(camera_model: str) -> None:
    """One InputError line unless ``camera_model`` is one of ``CAMERA_MODELS``."""
    if camera_model not in CAMERA_MODELS:
        raise InputError(f"`camera_model` must be one of {', '.join(CAMERA_MODELS)}, got {camera_model!r}")


def calibration_warning(model: str, params) -> str | None:
    """A line saying that a calibrated camera (COLMAP ``model`` and ``params``) has far from square pixels
    (fx / fy beyond ``MAX_ASPECT``), a sign that the photos could not calibrate that many parameters;
    None when fx and fy agree (or the model has one focal length)."""
    if model not in ("PINHOLE", "OPENCV", "FULL_OPENCV", "OPENCV_FISHEYE"):
        return None
    fx, fy = float(params[0]), float(params[1])
    if max(fx, fy) <= MAX_ASPECT * min(fx, fy):
        return None
    return (f"the {model} camera calibrated to fx {fx:.1f}, fy {fy:.1f} px (a real camera's pixels are square): "
            f"too few photos or points to calibrate its parameters; the undistorted photos will be warped "
            f"(try camera model SIMPLE_RADIAL)")


def reconstruct(images_dir, work_dir, names: list, threads: int = -1, camera_model: str = CAMERA_MODEL):
    """Features, matches and incremental mapping of the photos ``names`` in ``images_dir``, with the
    database and models under ``work_dir``, one shared camera of ``camera_model``; returns the pycolmap
    Reconstruction with the most registered images, or None when mapping made none. ``threads``: -1 for
    all cores."""
    pycolmap = pycolmap_module("pregel sfm")
    pycolmap.logging.minloglevel = 3  # fatal only: no INFO lines, and failures are reported here in one line
    database = os.path.join(work_dir, "database.db")
    reader = pycolmap.ImageReaderOptions()
    reader.camera_model = camera_model
    extraction = pycolmap.FeatureExtractionOptions()
    extraction.num_threads = threads
    pycolmap.extract_features(database, images_dir, image_names=names, camera_mode=pycolmap.CameraMode.SINGLE,
                              reader_options=reader, extraction_options=extraction)
    matching = pycolmap.FeatureMatchingOptions()
    matching.num_threads = threads
    pycolmap.match_exhaustive(database, matching_options=matching)
    mapping = pycolmap.IncrementalPipelineOptions()
    mapping.num_threads = threads
    models = pycolmap.incremental_mapping(database, images_dir, os.path.join(work_dir, "sparse"), options=mapping)
    return max(models.values(), key=lambda model: model.num_reg_images(), default=None)


def photos_to_scene(images_dir, downscale: float = 1.0, heldout_every: int = DEFAULT_HELDOUT_EVERY,
                    threads: int = -1, camera_model: str = CAMERA_MODEL) -> SfmResult:
    """Structure from motion on the photos of ``images_dir`` and the scene of its largest reconstruction
    (see the module docstring; ``downscale``, ``heldout_every`` as ``convert_colmap``; ``camera_model``
    one of ``CAMERA_MODELS``)."""
    check_scene_options(downscale, heldout_every)  # before the structure from motion
    check_camera_model(camera_model)
    names = photo_names(images_dir)
    check_photo_downscale(images_dir, names, downscale)
    with tempfile.TemporaryDirectory(prefix="pregel-sfm-") as work:
        model = reconstruct(images_dir, work, names, threads, camera_model)
        registered = sorted(model.image(i).name for i in model.reg_image_ids()) if model is not None else []
        unregistered = [n for n in names if n not in set(registered)]
        if len(registered) < 2:
            raise InputError.at(images_dir, None, f"only {len(registered)} of {len(names)} photos registered "
                                "(structure from motion needs two that overlap); not registered: "
                                f"{', '.join(unregistered)}")
        sparse = os.path.join(work, "model")
        os.makedirs(sparse)
        model.write_text(sparse)
        try:
            scene = convert_colmap(sparse, images_dir, downscale=downscale, heldout_every=heldout_every)
        except InputError as err:  # name the photos, not the temporary folder the user never sees
            raise InputError(str(err).replace(sparse, f"the reconstruction of {images_dir}")) from None
    scene.attrs.pop("colmap_model")  # a temporary folder
    scene.attrs.update({"source": "pregel sfm", "photos": os.path.abspath(images_dir)})
    camera = next(iter(model.cameras.values()))
    return SfmResult(scene, registered, unregistered, int(model.num_points3D()), str(camera),
                     calibration_warning(camera.model.name, camera.params))
