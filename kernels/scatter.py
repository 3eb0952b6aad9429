"""Unsorted segment reduction: the sender-side combiner of the superstep engine.

``scatter_reduce(index, values, num_segments, op)`` reduces ``values[m]`` into segment ``index[m]``
with ``op`` in ``sum``, ``mean``, ``max``, ``min``, in any order of ``index``. Messages bound for the
same destination are pre-reduced this way before they are sent (partial gather).
"""

import numpy as np
from numba import njit

from kernels._device import blocks_for
from kernels._checks import (FLOAT_DTYPES, INDEX_DTYPES, MEAN, MIN, SUM, _finish_segment, as_arrays,
                             check_dtype, check_index_range, check_ndim, op_code)


@njit(cache=True)
def _scatter_reduce_cpu(index, values, op, out, counts):
    """CPU scatter. index: [M]; values: [M, F]; out: [S, F]; counts: [S] int64 zeros.

    ``out`` starts at 0 (sum, mean) or -inf (max, min); ``min`` runs as ``-max(-v)``.
    """
    sign = np.float32(-1.0) if op == MIN else np.float32(1.0)
    num_features = values.shape[1]
    if op == SUM or op == MEAN:
        for m in range(values.shape[0]):
            s = np.uint64(index[m])
            counts[s] += 1
            for f in range(num_features):
                out[s, f] += values[m, f]
    else:
        for m in range(values.shape[0]):
            s = np.uint64(index[m])
            counts[s] += 1
            for f in range(num_features):
                value = sign * values[m, f]
                if value > out[s, f]:
                    out[s, f] = value
    for s in range(out.shape[0]):
        for f in range(num_features):
            out[s, f] = _finish_segment(out[s, f], counts[s], op)


def _scatter_reduce(index, values, num_segments, op):
    """NumPy reference twin of :func:`scatter_reduce` (``np.add.at`` / ``np.maximum.at``)."""
    index = np.asarray(index)
    values = np.asarray(values)
    counts = np.bincount(index, minlength=num_segments).astype(np.int64)
    shape = (num_segments,) + values.shape[1:]
    if op in ("sum", "mean"):
        out = np.zeros(shape, dtype=values.dtype)
        np.add.at(out, index, values)
    else:
        out = np.full(shape, -np.inf if op == "max" else np.inf, dtype=values.dtype)
        (np.maximum if op == "max" else np.minimum).at(out, index, values)
    touched = (counts > 0).reshape((-1,) + (1,) * (values.ndim - 1))
    if op == "mean":
        out = out / np.maximum(counts, 1).reshape(touched.shape).astype(values.dtype)
    return np.where(touched, out, 0).astype(values.dtype), counts


def scatter_reduce(index, values, num_segments: int, op: str, *, check: bool = True):
    """Reduce ``values[m]`` into segment ``index[m]``, in any order of ``index``.

    index:        [M] int32 or int64, each in [0, num_segments)
    values:       [M] or [M, F] float32 or float64
    num_segments: S, the number of segments
    op:           'sum' | 'mean' | 'max' | 'min'
    returns:      ``(out, counts)``: out [S] or [S, F] with values' dtype; counts [S] int64, the
                  number of values each segment received.

    A segment that received nothing has ``counts[s] == 0`` and ``out[s] == 0`` for every op: read
    the counts to tell "no contribution" from a true 0 (e.g. a vertex that got no message).
    NumPy inputs run the Numba CPU kernel; device arrays run the CUDA kernel (atomics) and return
    device arrays. On the GPU, float atomics add in a nondeterministic order, so ``sum`` and
    ``mean`` may differ from the CPU result (and between runs) within float rounding; max, min
    and counts are exact. ``check=True`` also checks that host ``index`` lies in range (one O(M)
    pass); device contents are never checked. NaN values give unspecified max/min results.
    """
    code = op_code(op)
    if isinstance(num_segments, bool) or not isinstance(num_segments, (int, np.integer)) \
            or num_segments < 0:
        raise ValueError(f"num_segments must be a non-negative integer; got {num_segments!r}")
    num_segments = int(num_segments)
    on_device, a = as_arrays(index=index, values=values)
    index, values = a["index"], a["values"]
    check_dtype("index", index, INDEX_DTYPES)
    check_ndim("index", index, (1,))
    check_dtype("values", values, FLOAT_DTYPES)
    check_ndim("values", values, (1, 2))
    if values.shape[0] != index.shape[0]:
        raise ValueError(f"values has {values.shape[0]} rows but index has {index.shape[0]} entries; "
                         "they must match")
    if check and not on_device:
        check_index_range("index", index, num_segments, "segment ids")

    values2 = values.reshape(values.shape[0], 1) if values.ndim == 1 else values
    shape2 = (num_segments, values2.shape[1])
    initial = 0.0 if code in (SUM, MEAN) else -np.inf
    if on_device:
        from numba import cuda

        from kernels.graph_cuda import (THREADS_PER_BLOCK, _fill_cuda, _finish_segments_cuda,
                                        _scatter_reduce_cuda)

        out = cuda.device_array(shape2, dtype=values.dtype)
        counts = cuda.device_array(num_segments, dtype=np.int64)
        out_blocks = blocks_for(out.size, THREADS_PER_BLOCK)
        _fill_cuda[out_blocks, THREADS_PER_BLOCK](out, initial)
        _fill_cuda[blocks_for(num_segments, THREADS_PER_BLOCK), THREADS_PER_BLOCK](
            counts.reshape(num_segments, 1), 0)
        _scatter_reduce_cuda[blocks_for(values2.size, THREADS_PER_BLOCK), THREADS_PER_BLOCK](
            index, values2, code, out, counts)
        _finish_segments_cuda[out_blocks, THREADS_PER_BLOCK](code, out, counts)
    else:
        out = np.full(shape2, initial, dtype=values.dtype)
        counts = np.zeros(num_segments, dtype=np.int64)
        _scatter_reduce_cpu(index, values2, code, out, counts)
    return (out.reshape(num_segments) if values.ndim == 1 else out), counts
