"""Undistortion of COLMAP cameras and images, as COLMAP's ``image_undistorter`` does it (with pycolmap).

The rasterizer projects with a pinhole camera. A camera with lens distortion (``SIMPLE_RADIAL``,
``RADIAL``, ``OPENCV``, ``FULL_OPENCV``, ``OPENCV_FISHEYE``, ...) is replaced by the pinhole camera
COLMAP's undistorter computes for it (``pycolmap.undistort_camera``: the same focal length, a new image
size and principal point covering the undistorted field of view, with COLMAP's default options), and
each of its images is resampled into that camera (``pycolmap.undistort_image``), as the reference 3DGS
pipeline does before training (its ``convert.py`` runs ``colmap image_undistorter``). pycolmap is an
optional dependency: ``pip install 'pregel-mpi[colmap]'``.
"""
import numpy as np

from pregel.errors import InputError

INSTALL_HINT = "install it with: pip install 'pregel-mpi[colmap]'"


def pycolmap_module(what: str):
    """The ``pycolmap`` module, or one ``InputError`` line saying ``what`` needs it and how to install it."""
    try:
        import pycolmap
    except ImportError:
        raise InputError(f"{what} needs pycolmap, which is not installed; {INSTALL_HINT}") from None
    return pycolmap


def pinhole_params(model: str, params: np.ndarray) -> np.ndarray | None:
    """(fx, fy, cx, cy) [4] float64 of a camera that is a pinhole as it is, or None when it needs
    undistortion; ``params`` [n] are its COLMAP ``model``'s parameters."""
    if model == "SIMPLE_PINHOLE" or (model in ("SIMPLE_RADIAL", "RADIAL") and not np.any(params[3:])):
        return np.array([params[0], params[0], params[1], params[2]], np.float64)
    if model == "PINHOLE" or (model in ("OPENCV", "FULL_OPENCV") and not np.any(params[4:])):
        return np.array(params[:4], np.float64)
    return None


class Undistorter:
    """COLMAP's undistortion of one camera (``model``, ``width``, ``height``, ``params``) and its images."""

    def __init__(self, model: str, width: int, height: int, params: np.ndarray, what: str = "undistortion"):
        self.pycolmap = pycolmap_module(what)
        self.options = self.pycolmap.UndistortCameraOptions()
        self.camera = self.pycolmap.Camera(model=model, width=int(width), height=int(height),
                                           params=np.asarray(params, np.float64))
        pinhole = self.pycolmap.undistort_camera(self.options, self.camera)
        self.width, self.height = int(pinhole.width), int(pinhole.height)
        self.params = np.asarray(pinhole.params, np.float64)  # PINHOLE fx, fy, cx, cy

    def image(self, pixels: np.ndarray) -> np.ndarray:
        """The undistorted image uint8 [height, width, 3] of ``pixels`` uint8 [H, W, 3] (the camera's size)."""
        bitmap = self.pycolmap.Bitmap.from_array(np.ascontiguousarray(pixels, np.uint8))
        out, _ = self.pycolmap.undistort_image(self.options, bitmap, self.camera)
        return np.asarray(out.to_array(), np.uint8).reshape(self.height, self.width, 3)
