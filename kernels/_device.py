"""Telling device (CUDA) arrays from host arrays, shared by every kernel's dispatch function."""

import numba


def is_device_array(array) -> bool:
    """True for arrays that live on a CUDA device (Numba device arrays, CUDA torch tensors, CuPy).

    Such arrays expose ``__cuda_array_interface__``; NumPy arrays and CPU tensors do not. Under the
    CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``) the simulator's fake device arrays count as device
    arrays, so the CUDA path can be tested on a machine without a GPU.
    """
    if hasattr(array, "__cuda_array_interface__"):
        return True
    if numba.config.ENABLE_CUDASIM:
        from numba import cuda

        return cuda.devicearray.is_cuda_ndarray(array)
    return False


def blocks_for(count: int, threads_per_block: int) -> int:
    """Number of blocks so that ``blocks * threads_per_block >= count`` (at least one)."""
    return max(1, (count + threads_per_block - 1) // threads_per_block)
