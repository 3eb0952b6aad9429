"""The CUDA versions of the graph kernels (gather, scatter, segment softmax).

They live apart from their CPU versions because importing ``numba.cuda`` costs about half a second
and slows numba's first compilation in the process: the dispatch functions of ``kernels.gather``,
``kernels.scatter`` and ``kernels.segment_softmax`` import this module only for device arrays, so
CPU runs never load CUDA support.
"""

import math

import numba
import numpy as np
from numba import cuda, njit

from kernels._checks import MEAN, MIN, SUM, _finish_segment
from kernels._device import blocks_for

THREADS_PER_BLOCK = 256


@cuda.jit
def _fill_cuda(out, value):
    """Set every entry of out [S, F] to ``value``."""
    tid = cuda.grid(1)
    if tid < out.shape[0] * out.shape[1]:
        out[tid // out.shape[1], tid % out.shape[1]] = value


@cuda.jit(device=True, inline=True)
def _row_and_column(tid, width):
    """The (row, column) of flat thread index ``tid`` over a grid of rows of ``width`` columns
    (features or heads): consecutive threads take consecutive columns of a row."""
    row = tid // width
    return row, tid - row * width


@cuda.jit(device=True, inline=True)
def _thread_cell(rows, width):
    """(row, column, inside) of this thread in a one-dimensional launch over a [rows, width] grid;
    ``inside`` is False for the spare threads of the last block."""
    tid = cuda.grid(1)
    row, column = _row_and_column(tid, width)
    return row, column, tid < rows * width


SHORT_ROW = 32  # rows with at most this many edges: one thread per (row, feature)
LANE_EDGES = 32  # a piece of a long row gives each of its threads about this many edge terms
MAX_BLOCKS = 4096  # grid-stride kernels over the queued pieces never launch more blocks


@njit(cache=True, inline="always")
def _combine(acc, value, op):
    """One step of the reduction: a sum for sum/mean, a max otherwise (min runs as -max(-v)).

    (Plain ``@njit``: numba-cuda compiles it for the GPU, and compile_ptx needs no driver for it.)
    """
    if op == SUM or op == MEAN:
        return acc + value
    return max(acc, value)


@cuda.jit
def _gather_short_rows_cuda(indptr, indices, x, weights, weighted, add, op, piece_edges, pieces, multi,
                            counters, out):
    """Gather, step 1: one thread per (row, feature) for rows of at most SHORT_ROW edges (consecutive
    threads read consecutive features); the thread of feature 0 of a longer row queues its pieces.

    indptr: [R + 1]; indices: [E]; x: [N, F]; weights: [E], read only when ``weighted`` (CUDA kernels
    cannot be launched with None), added to x when ``add``, else multiplied; out: [R, F], the short
    rows written (empty rows 0). pieces: [max_pieces, 3] int64, multi: [max_multi, 2] int64 and counters: [3] int64 (zeros) are the queue
    that :func:`gather_reduce_cuda` describes.
    """
    num_features = x.shape[1]
    r, f, inside = _thread_cell(out.shape[0], num_features)
    if not inside:
        return
    start = indptr[r]
    end = indptr[r + 1]
    length = end - start
    if length > SHORT_ROW:
        if f == 0:  # queue the row's pieces; a row of several also gets consecutive partial slots
            count = (length + piece_edges - 1) // piece_edges
            first = cuda.atomic.add(counters, 0, count)
            slot = -1
            if count > 1:
                slot = cuda.atomic.add(counters, 1, count)
                m = cuda.atomic.add(counters, 2, 1)
                multi[m, 0] = r
                multi[m, 1] = slot
            for k in range(count):
                pieces[first + k, 0] = r
                pieces[first + k, 1] = k
                pieces[first + k, 2] = slot + k if count > 1 else -1
        return
    sign = np.float32(-1.0) if op == MIN else np.float32(1.0)
    acc = np.float32(0.0) if op == SUM or op == MEAN else np.float32(-np.inf)  # widened for float64
    for e in range(start, end):
        value = x[indices[e], f]
        if weighted:  # these and the op branch go the same way for the whole grid: no divergence
            value = value + weights[e] if add else value * weights[e]
        acc = _combine(acc, sign * value, op)
    out[r, f] = _finish_segment(acc, length, op)


@cuda.jit
def _gather_pieces_cuda(indptr, indices, x, weights, weighted, add, op, piece_edges, feature_lanes,
                        group_threads, pieces, counters, out, partial):
    """Gather, step 2: a group of ``group_threads`` threads (a warp or the whole block) per queued piece.

    The group's threads form a grid of (edge slot, feature lane) with ``feature_lanes`` (a power of two
    up to 32) consecutive features side by side: each thread strides over the piece's edges by the
    number of edge slots, then a shared-memory tree (in a fixed order, so results repeat bit for bit)
    reduces the edge slots; features go in chunks of ``feature_lanes``. Groups loop over the queue
    (grid-stride), every thread of a block the same number of times, so ``syncthreads`` is safe.
    A piece that is its row's only one writes ``out[row]`` (finished: mean divided, min negated back);
    the others write their raw reduction to ``partial[slot]`` [max_slots, F] for step 3.
    """
    scratch = cuda.shared.array(THREADS_PER_BLOCK, dtype=numba.float64)
    t = cuda.threadIdx.x
    lane = t % group_threads
    fl = lane % feature_lanes
    slot_index = lane // feature_lanes
    slots = group_threads // feature_lanes
    groups_per_block = cuda.blockDim.x // group_threads
    num_features = x.shape[1]
    sign = np.float32(-1.0) if op == MIN else np.float32(1.0)
    for base in range(cuda.blockIdx.x * groups_per_block, counters[0], cuda.gridDim.x * groups_per_block):
        p = base + t // group_threads
        active = p < counters[0]
        row = pieces[p, 0] if active else 0
        first = indptr[row]
        length = indptr[row + 1] - first
        start = first + pieces[p, 1] * piece_edges if active else first
        end = min(first + length, start + piece_edges)
        for f0 in range(0, num_features, feature_lanes):
            f = f0 + fl
            acc = np.float32(0.0) if op == SUM or op == MEAN else np.float32(-np.inf)
            if active and f < num_features:
                for e in range(start + slot_index, end, slots):
                    value = x[indices[e], f]
                    if weighted:
                        value = value + weights[e] if add else value * weights[e]
                    acc = _combine(acc, sign * value, op)
            scratch[t] = acc
            cuda.syncthreads()
            half = slots // 2
            while half > 0:
                if slot_index < half:
                    scratch[t] = _combine(scratch[t], scratch[t + half * feature_lanes], op)
                cuda.syncthreads()
                half //= 2
            if active and slot_index == 0 and f < num_features:
                if pieces[p, 2] < 0:
                    out[row, f] = _finish_segment(scratch[t], length, op)
                else:
                    partial[pieces[p, 2], f] = scratch[t]
            cuda.syncthreads()  # the next chunk reuses scratch


@cuda.jit
def _combine_pieces_cuda(indptr, op, piece_edges, multi, counters, partial, out):
    """Gather, step 3: one thread per (row of several pieces, feature) reduces the row's partial
    results in piece order and writes ``out[row, f]`` (grid-stride over the ``counters[2]`` rows).

    indptr: [R + 1]; multi: [max_multi, 2] (row, first slot); partial: [max_slots, F]; out: [R, F].
    """
    num_features = out.shape[1]
    for tid in range(cuda.grid(1), counters[2] * num_features, cuda.gridsize(1)):
        m, f = _row_and_column(tid, num_features)
        row = multi[m, 0]
        first = multi[m, 1]
        length = indptr[row + 1] - indptr[row]
        acc = partial[first, f]
        for slot in range(first + 1, first + (length + piece_edges - 1) // piece_edges):
            acc = _combine(acc, partial[slot, f], op)
        out[row, f] = _finish_segment(acc, length, op)


def row_layout(num_features: int):
    """(feature_lanes, group_threads, piece_edges) of the long-row step for F = ``num_features``.

    Feature lanes: F rounded up to a power of two, at most 32 (a warp's width). Groups: a warp when
    a warp holds several edge slots (F < 32; F = 1 gives 32 lanes striding over the edges), the whole
    block of 256 threads otherwise (8 warps, one edge slot each). A piece holds as many edges as give
    each thread about LANE_EDGES edge terms over all feature chunks: 1,024 edges at F = 1, 256 at
    F = 3, 128 at F = 40 or 64.
    """
    feature_lanes = min(32, 1 << max(0, num_features - 1).bit_length())
    group_threads = 32 if feature_lanes < 32 else THREADS_PER_BLOCK
    chunks = -(-num_features // feature_lanes)
    piece_edges = max(1, (group_threads // feature_lanes) * LANE_EDGES // chunks)
    return feature_lanes, group_threads, piece_edges


_WORKSPACE = {}


def _workspace(name: str, rows: int, columns: int, dtype):
    """A device array [rows, columns] of ``dtype`` for scratch use, reused between calls in the same
    CUDA context (it grows when a call needs more). Calls run on the default stream, in order, so one
    call's kernels finish with it before the next call's start. A real GPU's context object cannot be
    hashed (it defines equality only), so the key holds its id and the entry the context itself, which
    keeps that id from being reused by another context while the entry lives."""
    context = cuda.current_context()
    key = (id(context), name, columns, np.dtype(dtype).str)
    owner, array = _WORKSPACE.get(key, (None, None))
    if owner is not context or array.shape[0] < rows:
        array = cuda.device_array((rows, columns), dtype=dtype)
        _WORKSPACE[key] = (context, array)
    return array[:rows]


def gather_reduce_cuda(indptr, indices, x, weights, op: int, add: bool = False):
    """Launch the row-length-adaptive gather on device arrays; returns out [R, F] (a device array).

    indptr: [R + 1]; indices: [E]; x: [N, F]; weights: [E] with x's dtype, or None; op: the code of
    kernels._checks; add: the weights add to x instead of multiplying it. Nothing is copied to the
    host: rows are classified on the device.

    1. ``_gather_short_rows_cuda``: rows of at most SHORT_ROW edges, a thread per (row, feature);
       each longer row queues its pieces of ``piece_edges`` edges (``row_layout``), counted in
       ``counters`` = [pieces, partial slots, rows of several pieces].
    2. ``_gather_pieces_cuda``: a warp (F < 32) or a block (F >= 32) per piece.
    3. ``_combine_pieces_cuda``: the rows of several pieces, their partial results in order.

    The queue's sizes are bounded from the shapes alone (at most min(R, E / (SHORT_ROW + 1)) long
    rows, E / piece_edges pieces beyond one per row, 2 E / piece_edges partial slots), and steps 2
    and 3 loop over the queue on the device, so the host never waits for the counts. A hub of d
    edges therefore costs about d / piece_edges pieces spread over the GPU instead of d serial steps.
    The scratch arrays are reused between calls (``_workspace``); ``out`` is new each call.

    Performance: the previous kernel (one thread per (row, feature) for every row) took 3.0 ms at
    F = 1 and 5.3 ms at F = 64 on an H200 with the 1M-vertex / 10M-edge power-law graph, against
    0.23 ms and 1.2 ms for cuSPARSE (torch.sparse.mm), because its hub rows ran serially. This
    version has run only under Numba's simulator so far; its H200 figures are to be measured by
    ``benchmarks/gpu.py``.
    """
    num_rows, num_edges, num_features = indptr.shape[0] - 1, indices.shape[0], x.shape[1]
    feature_lanes, group_threads, piece_edges = row_layout(num_features)
    max_long_rows = min(num_rows, num_edges // (SHORT_ROW + 1))
    max_pieces = max_long_rows + num_edges // piece_edges + 1
    max_multi = min(max_long_rows, num_edges // (piece_edges + 1)) + 1
    max_slots = 2 * (num_edges // piece_edges) + 1
    weighted = weights is not None
    if not weighted:  # CUDA kernels cannot be launched with None: a placeholder they never read
        weights = _workspace("no weights", 1, 1, x.dtype).reshape(1)
    counters = _workspace("counters", 1, 3, np.int64)
    _fill_cuda[1, 32](counters, 0)
    counters = counters.reshape(3)
    pieces = _workspace("pieces", max_pieces, 3, np.int64)
    multi = _workspace("multi", max_multi, 2, np.int64)
    partial = _workspace("partial", max_slots, num_features, x.dtype)

    out = cuda.device_array((num_rows, num_features), dtype=x.dtype)
    _gather_short_rows_cuda[blocks_for(num_rows * num_features, THREADS_PER_BLOCK), THREADS_PER_BLOCK](
        indptr, indices, x, weights, weighted, add, op, piece_edges, pieces, multi, counters, out)
    groups_per_block = THREADS_PER_BLOCK // group_threads
    _gather_pieces_cuda[min(blocks_for(max_pieces, groups_per_block), MAX_BLOCKS), THREADS_PER_BLOCK](
        indptr, indices, x, weights, weighted, add, op, piece_edges, feature_lanes, group_threads, pieces,
        counters, out, partial)
    _combine_pieces_cuda[min(blocks_for(max_multi * num_features, THREADS_PER_BLOCK), MAX_BLOCKS),
                         THREADS_PER_BLOCK](indptr, op, piece_edges, multi, counters, partial, out)
    return out


@cuda.jit
def _scatter_reduce_cuda(index, values, op, out, counts):
    """CUDA scatter: one thread per (message, feature), atomics into out [S, F] and counts [S].

    index: [M]; values: [M, F]; ``out`` starts at 0 (sum, mean) or -inf (max, min).
    """
    m, f, inside = _thread_cell(values.shape[0], values.shape[1])
    if not inside:
        return
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
    s, f, inside = _thread_cell(out.shape[0], out.shape[1])
    if inside:
        out[s, f] = _finish_segment(out[s, f], counts[s], op)


@cuda.jit
def _segment_softmax_cuda(indptr, logits, out):
    """CUDA softmax: one thread per (row, head), three passes over the row's edges.

    indptr: [R + 1]; logits: [E, H]; out: [E, H].
    """
    r, h, inside = _thread_cell(indptr.shape[0] - 1, logits.shape[1])
    if not inside:
        return
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
