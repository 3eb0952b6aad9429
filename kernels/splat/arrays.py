"""Array plumbing shared by the splat kernels' dispatch functions: checks, allocation, camera tuples."""

import numpy as np

from kernels._device import is_device_array


def check_array(name, array, shape, dtype):
    """Raise ValueError unless ``array`` (NumPy or device array) has ``shape`` and ``dtype``.

    A ``None`` entry of ``shape`` matches any length.
    """
    actual = tuple(getattr(array, "shape", ()))
    if len(actual) != len(shape) or any(want is not None and have != want for have, want in zip(actual, shape)):
        raise ValueError(f"{name} must have shape {[s if s is not None else '*' for s in shape]}, got {list(actual)}")
    if np.dtype(array.dtype) != np.dtype(dtype):
        raise ValueError(f"{name} must be {np.dtype(dtype).name}, got {np.dtype(array.dtype).name}")


def on_device(arrays) -> bool:
    """True when every array is a device array, False when none is; ValueError for a mix."""
    flags = {is_device_array(a) for a in arrays}
    if len(flags) > 1:
        raise ValueError("arrays must be all NumPy (CPU kernels) or all device arrays (CUDA kernels), not a mix")
    return flags == {True}


def zeros(shape, dtype, device: bool):
    """Zero-filled output array on the host or the device."""
    host = np.zeros(shape, dtype=dtype)
    if not device:
        return host
    from numba import cuda

    return cuda.to_device(host)


def empty(shape, dtype, device: bool):
    """Uninitialised output array on the host or the device."""
    if not device:
        return np.empty(shape, dtype=dtype)
    from numba import cuda

    return cuda.device_array(shape, dtype=dtype)


def camera_tuples(viewmat, K):
    """Camera constants as kernel scalars: the top three rows of viewmat [4, 4] (12-tuple) and
    (fx, fy, cx, cy) from K [3, 3]; both host arrays."""
    viewmat = np.asarray(viewmat, dtype=np.float64)
    K = np.asarray(K, dtype=np.float64)
    if viewmat.shape != (4, 4) or K.shape != (3, 3):
        raise ValueError(f"viewmat must be [4, 4] and K [3, 3], got {list(viewmat.shape)} and {list(K.shape)}")
    if not (np.isfinite(viewmat).all() and np.isfinite(K).all()):
        raise ValueError("viewmat and K must be finite")
    if not (K[0, 0] > 0 and K[1, 1] > 0):
        raise ValueError("K must have positive focal lengths K[0, 0] and K[1, 1]")
    view = tuple(float(v) for v in viewmat[:3].ravel())
    return view, (float(K[0, 0]), float(K[1, 1]), float(K[0, 2]), float(K[1, 2]))


def check_size(width, height):
    """Raise ValueError unless width and height are positive ints."""
    for name, value in (("width", width), ("height", height)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
