"""Telling device (CUDA) arrays from host arrays, shared by every kernel's dispatch function, and
carrying torch tensors over to the kernels (``across``)."""

import numba

#: Numba's CUDA simulator (NUMBA_ENABLE_CUDASIM=1): no CUDA torch, "device" tensors are CPU tensors
SIMULATED = bool(numba.config.ENABLE_CUDASIM)


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


def across(value):
    """Carry an array over the torch / Numba boundary: a torch tensor [...] becomes a Numba device
    array (for a kernel or ``pregel.device_comm.DeviceComm``), a Numba device array a torch tensor.

    This is the one place where a real GPU and Numba's simulator differ. On a GPU both directions
    are zero-copy views of the same device memory (``numba.cuda.as_cuda_array`` and
    ``torch.as_tensor`` read ``__cuda_array_interface__``). Under the simulator there is no CUDA
    torch: a device run's "device" tensors are CPU tensors (``pregel.device_path.torch_device``),
    and each crossing copies into or out of the simulator's device arrays (``cuda.to_device``,
    ``copy_to_host``).
    """
    import torch
    from numba import cuda

    if isinstance(value, torch.Tensor):
        value = value.detach().contiguous()
        return cuda.to_device(value.numpy()) if SIMULATED else cuda.as_cuda_array(value)
    return torch.from_numpy(value.copy_to_host()) if SIMULATED else torch.as_tensor(value, device="cuda")
