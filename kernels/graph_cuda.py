"""The CUDA versions of the graph kernels (gather, scatter, segment softmax).

They live apart from their CPU versions because importing ``numba.cuda`` costs about half a second
and slows numba's first compilation in the process: the dispatch functions of ``kernels.gather``,
``kernels.scatter`` and ``kernels.segment_softmax`` import this module only for device arrays, so
CPU runs never load CUDA support.
"""

import math

import numpy as np
from numba import cuda

from kernels._checks import MEAN, MIN, SUM
from kernels.scatter import _finish_segment

THREADS_PER_BLOCK = 256


@cuda.jit
def _gather_reduce_cuda(indptr, indices, x, weights, weighted, op, out):
    """CUDA gather: one thread per (row, feature); consecutive threads read consecutive features.

    indptr: [R + 1]; indices: [E]; x: [N, F]; weights: [E], read only when ``weighted`` (CUDA
    kernels cannot be launched with None); out: [R, F], fully written.
    A row's edges run serially in its thread, so the largest hub row bounds the kernel's time: on an
    H200 with the 1M-vertex / 10M-edge power-law graph of benchmarks/bench_kernels.py it took 3.0 ms at
    F = 1 and 5.3 ms at F = 64 against cuSPARSE's 0.23 ms and 1.2 ms (torch.sparse.mm).
    """
    tid = cuda.grid(1)
    num_features = x.shape[1]
    if tid >= out.shape[0] * num_features:
        return
    r = tid // num_features
    f = tid - r * num_features
    start = indptr[r]
    end = indptr[r + 1]
    if start == end:
        out[r, f] = 0
        return
    sign = np.float32(-1.0) if op == MIN else np.float32(1.0)
    acc = np.float32(0.0)  # Numba widens it to float64 when x is float64
    for e in range(start, end):
        value = x[indices[e], f]
        if weighted:  # this and the op branch go the same way for the whole grid: no divergence
            value = value * weights[e]
        if op == SUM or op == MEAN:
            acc += value
        elif e == start or sign * value > acc:
            acc = sign * value
    if op == SUM:
        out[r, f] = acc
    elif op == MEAN:
        out[r, f] = acc / (end - start)
    else:
        out[r, f] = sign * acc


@cuda.jit
def _fill_cuda(out, value):
    """Set every entry of out [S, F] to ``value``."""
    tid = cuda.grid(1)
    if tid < out.shape[0] * out.shape[1]:
        out[tid // out.shape[1], tid % out.shape[1]] = value


@cuda.jit
def _scatter_reduce_cuda(index, values, op, out, counts):
    """CUDA scatter: one thread per (message, feature), atomics into out [S, F] and counts [S].

    index: [M]; values: [M, F]; ``out`` starts at 0 (sum, mean) or -inf (max, min).
    """
    tid = cuda.grid(1)
    num_features = values.shape[1]
    if tid >= values.shape[0] * num_features:
        return
    m = tid // num_features
    f = tid - m * num_features
    s = index[m]
    if f == 0:
        cuda.atomic.add(counts, s, 1)
    if op == SUM or op == MEAN:
        cuda.atomic.add(out, (s, f), values[m, f])
    elif op == MIN:
        cuda.atomic.max(out, (s, f), -values[m, f])
    else:
        cuda.atomic.max(out, (s, f), values[m, f])


@cuda.jit
def _finish_segments_cuda(op, out, counts):
    """CUDA finish of out [S, F] given counts [S]: see ``_finish_segment``."""
    tid = cuda.grid(1)
    num_features = out.shape[1]
    if tid < out.shape[0] * num_features:
        s = tid // num_features
        f = tid - s * num_features
        out[s, f] = _finish_segment(out[s, f], counts[s], op)


@cuda.jit
def _segment_softmax_cuda(indptr, logits, out):
    """CUDA softmax: one thread per (row, head), three passes over the row's edges.

    indptr: [R + 1]; logits: [E, H]; out: [E, H].
    """
    tid = cuda.grid(1)
    num_heads = logits.shape[1]
    if tid >= (indptr.shape[0] - 1) * num_heads:
        return
    r = tid // num_heads
    h = tid - r * num_heads
    start = indptr[r]
    end = indptr[r + 1]
    if start == end:
        return
    row_max = logits[start, h]
    for e in range(start + 1, end):
        row_max = max(row_max, logits[e, h])
    row_sum = math.exp(logits[start, h] - row_max)  # the sum starts in the logits' precision
    out[start, h] = row_sum
    for e in range(start + 1, end):
        value = math.exp(logits[e, h] - row_max)
        out[e, h] = value
        row_sum += value
    for e in range(start, end):
        out[e, h] /= row_sum
