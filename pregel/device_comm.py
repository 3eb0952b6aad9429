"""Moving device (GPU) arrays between ranks: CUDA-aware MPI where the library has it, staging otherwise.

Whether MPI can take device buffers is decided once per job by ``cuda_aware_mpi``, in this order:

1. the environment variable ``PREGEL_CUDA_AWARE_MPI``: ``1`` (yes) or ``0`` (no); any other value
   is an ``InputError``. Use it for libraries that are CUDA-aware but do not say so, or to force
   staging on one that is;
2. otherwise the MPI library itself: ``MPIX_Query_cuda_support()``, which Open MPI and MPICH export
   (it returns 1 only when the library was built with CUDA and CUDA support is on at run time);
3. a library without that function is taken as not CUDA-aware.

``DeviceComm`` then hands device buffers straight to mpi4py (CUDA-aware) or copies them through
reusable page-locked host buffers, one device-to-host copy before and one host-to-device copy after
each exchange, and counts the bytes it staged.
"""

import ctypes
import importlib
import os

import numpy as np

from kernels._checks import as_arrays
from pregel.comm import Comm
from pregel.errors import InputError

ENV_VARIABLE = "PREGEL_CUDA_AWARE_MPI"
#: the smallest page-locked staging buffer allocated (page-locking is slow: allocate rarely)
MIN_PINNED_BYTES = 1 << 16


def cuda_aware_mpi() -> bool:
    """True when MPI on this rank takes device buffers (decision order: the module docstring)."""
    value = os.environ.get(ENV_VARIABLE)
    if value is not None:
        if value not in ("0", "1"):
            raise InputError(f"{ENV_VARIABLE}={value!r}: must be 1 (MPI is CUDA-aware) or 0 (it is not)")
        return value == "1"
    return bool(library_cuda_support())


def library_cuda_support() -> bool | None:
    """The MPI library's own answer, ``MPIX_Query_cuda_support() == 1``; None when it lacks the function."""
    importlib.import_module("mpi4py.MPI")  # loads and initialises the MPI library before asking it

    for library in _mpi_libraries():
        query = getattr(library, "MPIX_Query_cuda_support", None)
        if query is not None:
            query.restype, query.argtypes = ctypes.c_int, []
            return query() == 1
    return None


def _mpi_libraries():
    """ctypes handles in which to look for the MPI library's functions, most likely first.

    The process's global namespace holds them when the library was loaded with ``RTLD_GLOBAL``;
    mpi4py 4 loads it with ``RTLD_LOCAL``, so every loaded shared object named ``libmpi*`` follows
    (``libmpi.so.40`` of Open MPI, ``libmpi.so.12`` of MPICH, ``libmpich.so``, ``libmpi_cray.so``),
    found in ``/proc/self/maps`` where the system has it and opened without loading anything new.
    """
    yield ctypes.CDLL(None)
    try:
        with open("/proc/self/maps") as maps:
            fields = [line.split(None, 5) for line in maps]  # address perms offset dev inode [path]
    except OSError:
        return
    paths = {entry[5].strip() for entry in fields if len(entry) == 6}
    for path in sorted(paths):
        if os.path.basename(path).startswith("libmpi"):
            try:
                yield ctypes.CDLL(path, mode=os.RTLD_NOLOAD)
            except OSError:
                continue


class PinnedBuffer:
    """A page-locked host buffer reused across exchanges, grown (at least doubling) only when a
    request does not fit, so a steady exchange pattern allocates once."""

    def __init__(self):
        self.storage = None  # np.ndarray [capacity] uint8, page-locked (plain NumPy under the simulator)
        self.allocations = 0

    def view(self, shape: tuple, dtype) -> np.ndarray:
        """A C-contiguous ``shape`` ``dtype`` array over the start of the buffer (grown if needed)."""
        dtype = np.dtype(dtype)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        capacity = 0 if self.storage is None else self.storage.nbytes
        if self.storage is None or nbytes > capacity:
            from numba import cuda

            self.storage = cuda.pinned_array(max(nbytes, 2 * capacity, MIN_PINNED_BYTES), dtype=np.uint8)
            self.allocations += 1
        return self.storage[:nbytes].view(dtype).reshape(shape)


class DeviceComm:
    """Exchanges device arrays among the ranks of ``comm``, directly or through host staging.

    ``cuda_aware``: None asks ``cuda_aware_mpi`` on every rank (collective: a bad
    ``PREGEL_CUDA_AWARE_MPI`` on any rank raises its ``InputError`` on all of them, and the direct
    path is taken only when every rank's library is CUDA-aware); True or False forces the path.
    ``bytes_staged`` counts the bytes copied between device and host (both directions).
    """

    def __init__(self, comm: Comm, cuda_aware: bool | None = None):
        self.comm = comm
        if cuda_aware is None:
            error, aware = None, False
            try:
                aware = cuda_aware_mpi()
            except InputError as exc:
                error = exc
            comm.agree(error)
            cuda_aware = all(comm.allgather(aware))
        self.cuda_aware = bool(cuda_aware)
        self.bytes_staged = 0
        self.send_host = PinnedBuffer()
        self.recv_host = PinnedBuffer()

    @property
    def path(self) -> str:
        """Which path the exchanges take: ``'cuda-aware'`` or ``'staged'``."""
        return "cuda-aware" if self.cuda_aware else "staged"

    def attributes(self) -> dict:
        """What a result file records about the transport: ``cuda_aware_mpi`` and ``bytes_staged``."""
        return {"cuda_aware_mpi": self.cuda_aware, "bytes_staged": self.bytes_staged}

    def alltoallv_known(self, send, send_counts, recv_counts):
        """``Comm.alltoallv_known`` for a device array; returns a device array.

        ``send``: device array [sum(send_counts), ...] C-contiguous, blocks ordered by destination
        rank (Numba device arrays, or anything with ``__cuda_array_interface__``: CUDA torch
        tensors, CuPy); ``send_counts``, ``recv_counts``: [size] rows to and from each rank. Returns
        a Numba device array [sum(recv_counts), ...] ordered by source rank (``send`` itself at one
        rank). Rows may have trailing dimensions (sent as a unit).
        """
        on_device, arrays = as_arrays(send=send)
        if not on_device:
            raise ValueError("send must be a device array; Comm.alltoallv_known exchanges host arrays")
        rows = arrays["send"]  # a Numba view of ``send``, for its shape, dtype and copies
        send_counts = np.asarray(send_counts, dtype=np.int64)
        recv_counts = np.asarray(recv_counts, dtype=np.int64)
        if not rows.is_c_contiguous():
            raise ValueError("send must be C-contiguous")
        if send_counts.shape != (self.comm.size,) or recv_counts.shape != (self.comm.size,):
            raise ValueError(f"send_counts and recv_counts must have shape ({self.comm.size},) (one per "
                             f"rank); got {send_counts.shape} and {recv_counts.shape}")
        if send_counts.sum() != rows.shape[0]:
            raise ValueError(f"send has {rows.shape[0]} rows but send_counts sum to {send_counts.sum()}")
        if self.comm.size == 1:
            return send
        from numba import cuda

        shape = (int(recv_counts.sum()),) + tuple(rows.shape[1:])
        row_bytes = int(np.prod(rows.shape[1:], dtype=np.int64)) * rows.dtype.itemsize
        if self.cuda_aware:
            received = cuda.device_array(shape, rows.dtype)
            cuda.synchronize()  # kernels that wrote ``send`` may still run; MPI reads the device memory
            self.comm.alltoallv_bytes(send, send_counts * row_bytes, received, recv_counts * row_bytes)
            return received
        host_send = self.send_host.view(rows.shape, rows.dtype)
        if rows.size:  # (an empty device array's strides may not match the host view's)
            rows.copy_to_host(host_send)
        host_received = self.recv_host.view(shape, rows.dtype)
        self.comm.alltoallv_bytes(host_send, send_counts * row_bytes, host_received, recv_counts * row_bytes)
        self.bytes_staged += host_send.nbytes + host_received.nbytes
        return cuda.to_device(host_received)
