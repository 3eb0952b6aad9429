"""Softmax of per-edge scores within each CSR row: the attention normalisation of GAT-style layers.

``segment_softmax(indptr, logits)`` gives ``exp(l[e] - m_r) / sum_{e' in row r} exp(l[e'] - m_r)``
for every edge ``e`` of row ``r``, with ``m_r`` the row's maximum score (numerically stable), per head.
"""

import numpy as np
from numba import njit

from kernels._device import blocks_for
from kernels._checks import FLOAT_DTYPES, as_arrays, check_csr, check_dtype, check_ndim


@njit(cache=True)
def _segment_softmax_cpu(indptr, logits, out):
    """CPU softmax. indptr: [R + 1]; logits: [E, H]; out: [E, H], written in place."""
    num_heads = logits.shape[1]
    row_max = np.empty(num_heads, dtype=logits.dtype)
    row_sum = np.empty(num_heads, dtype=logits.dtype)
    for r in range(indptr.shape[0] - 1):
        start = np.uint64(indptr[r])  # unsigned: no negative-index fix-ups in the loops
        end = np.uint64(indptr[r + 1])
        if start == end:
            continue
        row_max[:] = logits[start]
        for e in range(start + np.uint64(1), end):
            for h in range(num_heads):
                if logits[e, h] > row_max[h]:
                    row_max[h] = logits[e, h]
        row_sum[:] = 0
        for e in range(start, end):
            for h in range(num_heads):
                value = np.exp(logits[e, h] - row_max[h])
                out[e, h] = value
                row_sum[h] += value
        for e in range(start, end):
            for h in range(num_heads):
                out[e, h] /= row_sum[h]


def _segment_softmax(indptr, logits):
    """NumPy reference twin of :func:`segment_softmax`."""
    indptr = np.asarray(indptr)
    logits = np.asarray(logits)
    rows = np.repeat(np.arange(indptr.shape[0] - 1), np.diff(indptr))
    row_max = np.full((indptr.shape[0] - 1,) + logits.shape[1:], -np.inf, dtype=logits.dtype)
    np.maximum.at(row_max, rows, logits)
    exp = np.exp(logits - row_max[rows])
    row_sum = np.zeros_like(row_max)
    np.add.at(row_sum, rows, exp)
    return exp / row_sum[rows]


def segment_softmax(indptr, logits, *, check: bool = True):
    """Softmax of edge scores within each CSR row, per head.

    indptr:  [R + 1] int64 (or int32)   row pointer: row r owns edges indptr[r]:indptr[r+1]
    logits:  [E] or [E, H] float32 or float64 (H attention heads)
    returns: same shape and dtype as logits; each row's entries sum to 1 per head.

    The row maximum is subtracted before ``exp``, so large scores do not overflow. NumPy inputs run
    the Numba CPU kernel, device arrays the CUDA kernel (device array back). ``check=True`` also
    checks host indptr's contents (starts at 0, never decreases, ends at E).
    """
    on_device, a = as_arrays(indptr=indptr, logits=logits)
    indptr, logits = a["indptr"], a["logits"]
    check_dtype("logits", logits, FLOAT_DTYPES)
    check_ndim("logits", logits, (1, 2))
    check_csr(indptr, logits.shape[0], check and not on_device, edges_name="logits")

    logits2 = logits.reshape(logits.shape[0], 1) if logits.ndim == 1 else logits
    if on_device:
        from numba import cuda

        from kernels.graph_cuda import THREADS_PER_BLOCK, _segment_softmax_cuda

        out = cuda.device_array(logits2.shape, dtype=logits.dtype)
        blocks = blocks_for((indptr.shape[0] - 1) * logits2.shape[1], THREADS_PER_BLOCK)
        _segment_softmax_cuda[blocks, THREADS_PER_BLOCK](indptr, logits2, out)
    else:
        out = np.empty_like(logits2)
        _segment_softmax_cpu(indptr, logits2, out)
    return out.reshape(logits.shape)
