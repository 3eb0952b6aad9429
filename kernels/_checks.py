"""Argument checks, reduction codes and the final step of a reduction, shared by the graph kernels (gather,
scatter, softmax) on the CPU and on the GPU.

The dispatch functions call these before launching a kernel, so a bad argument gets a clear
``ValueError`` naming it instead of a crash or a silently wrong result inside Numba.
"""

import numpy as np
from numba import njit

from kernels._device import is_device_array

SUM, MEAN, MAX, MIN = 0, 1, 2, 3
OPS = {"sum": SUM, "mean": MEAN, "max": MAX, "min": MIN}
#: how an edge's weight meets the message it carries: ``w * x``, or ``x + w`` (shortest paths' min-plus)
WEIGHT_OPS = ("mul", "add")
FLOAT_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
INDEX_DTYPES = (np.dtype(np.int32), np.dtype(np.int64))


@njit(cache=True, inline="always")
def _finish_segment(value, count, op):
    """A segment's final value: 0 when untouched, sum / count for mean, sign flip back for min.

    Called by the CPU and the CUDA kernels alike (numba-cuda compiles ``@njit`` functions for the GPU).
    """
    if count == 0:
        return 0
    if op == MEAN:
        return value / count
    if op == MIN:
        return -value
    return value


def check_weight_op(weight_op) -> bool:
    """Whether ``weight_op`` ('mul' or 'add') adds the weights; ValueError for anything else."""
    if weight_op not in WEIGHT_OPS:
        raise ValueError(f"weight_op must be one of {', '.join(repr(name) for name in WEIGHT_OPS)}; "
                         f"got {weight_op!r}")
    return weight_op == "add"


def op_code(op) -> int:
    """The kernel code of reduction ``op`` ('sum', 'mean', 'max' or 'min'); ValueError otherwise."""
    if not isinstance(op, str) or op not in OPS:
        raise ValueError(f"op must be one of {', '.join(repr(name) for name in OPS)}; got {op!r}")
    return OPS[op]


def as_arrays(**arrays):
    """Bring the named array arguments (None passes through) to one place: host or device.

    Returns ``(on_device, converted)`` where ``converted`` maps each name to a C-contiguous NumPy
    array (host) or a Numba device array (device: Numba device arrays, simulator arrays, or anything
    with ``__cuda_array_interface__``, such as CUDA torch tensors or CuPy arrays). A mix of host and
    device arrays is a ValueError.
    """
    given = {name: a for name, a in arrays.items() if a is not None}
    device = {name for name, a in given.items() if is_device_array(a)}
    if device and len(device) != len(given):
        host = sorted(set(given) - device)
        raise ValueError(f"arrays {', '.join(sorted(device))} are on the GPU but {', '.join(host)} "
                         f"{'is' if len(host) == 1 else 'are'} on the host; pass all of them on one device")
    converted = dict(arrays)
    if device:
        from numba import cuda
    for name, a in given.items():
        if device:
            converted[name] = a if cuda.devicearray.is_cuda_ndarray(a) else cuda.as_cuda_array(a)
        else:
            converted[name] = np.ascontiguousarray(a)
    return bool(device), converted


def check_dtype(name: str, array, allowed) -> None:
    """ValueError unless ``array.dtype`` is one of ``allowed``."""
    if array.dtype not in allowed:
        names = " or ".join(str(d) for d in allowed)
        raise ValueError(f"{name} must have dtype {names}; got {array.dtype}")


def check_ndim(name: str, array, allowed) -> None:
    """ValueError unless ``array.ndim`` is one of ``allowed``."""
    if array.ndim not in allowed:
        shapes = " or ".join(f"{n}-D" for n in allowed)
        raise ValueError(f"{name} must be {shapes}; got shape {tuple(array.shape)}")


def check_csr(indptr, num_edges: int, check_values: bool, edges_name: str = "indices") -> None:
    """Validate a CSR row pointer ``indptr`` [R + 1] for ``num_edges`` edges.

    Always checks dtype (int32/int64) and shape; with ``check_values`` (host arrays) also that it
    starts at 0, never decreases and ends at ``num_edges`` (one O(R) pass).
    """
    check_dtype("indptr", indptr, INDEX_DTYPES)
    if indptr.ndim != 1 or indptr.shape[0] < 1:
        raise ValueError(f"indptr must be 1-D with at least one entry; got shape {tuple(indptr.shape)}")
    if not check_values:
        return
    if indptr[0] != 0:
        raise ValueError(f"indptr must start at 0; got indptr[0] = {indptr[0]}")
    if indptr[-1] != num_edges:
        raise ValueError(f"indptr[-1] = {indptr[-1]} must equal the number of edges, "
                         f"len({edges_name}) = {num_edges}")
    if indptr.shape[0] > 1 and np.any(indptr[1:] < indptr[:-1]):
        row = int(np.argmax(indptr[1:] < indptr[:-1]))
        raise ValueError(f"indptr must not decrease; indptr[{row + 1}] = {indptr[row + 1]} < "
                         f"indptr[{row}] = {indptr[row]}")


def check_index_range(name: str, index: np.ndarray, upper: int, what: str) -> None:
    """ValueError unless every entry of the host integer array ``index`` (any shape) lies in [0, ``upper``).

    One pass: viewed as unsigned, negative entries become huge, so a single max finds both kinds.
    """
    if index.size == 0:
        return
    largest = int(index.view(np.dtype(f"u{index.dtype.itemsize}")).max())
    if largest >= upper:
        bad = index[(index < 0) | (index >= upper)][0]
        raise ValueError(f"{name} must lie in [0, {upper}) ({what}); found {bad}")


def check_weights(weights, num_edges: int, dtype):
    """Validate ``weights`` [E] floating point; return it cast to ``dtype`` (host arrays only), or as
    it is when it is float32 and ``dtype`` float64: the kernels widen each weight exactly as they read
    it, so a float64 gather does not copy a float32 graph's [E] weights every call."""
    if weights is None:
        return None
    if weights.ndim != 1 or weights.shape[0] != num_edges:
        raise ValueError(f"weights must have shape ({num_edges},) (one per edge); "
                         f"got {tuple(weights.shape)}")
    if not np.issubdtype(weights.dtype, np.floating):
        raise ValueError(f"weights must be a floating-point array; got dtype {weights.dtype}")
    if weights.dtype != dtype:
        if is_device_array(weights):
            raise ValueError(f"device weights must have x's dtype {dtype}; got {weights.dtype}")
        if not (weights.dtype == FLOAT_DTYPES[0] and dtype == FLOAT_DTYPES[1]):
            weights = weights.astype(dtype)
    return weights
