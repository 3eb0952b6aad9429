"""Row-wise gather-reduce over a CSR graph: the receiver-side gather of every superstep.

``gather_reduce(indptr, indices, x, op, weights)`` computes, for each row ``r`` of the CSR,

    out[r] = op over e in indptr[r]:indptr[r+1] of  weights[e] * x[indices[e]]

with ``op`` in ``sum``, ``mean``, ``max``, ``min``; rows without edges give 0 for every op (as PyG's
``spmm(adj_t, x, reduce)`` and DGL's ``copy_u``/``u_mul_e`` + reduce do). With in-edge CSR (rows are
destinations, ``indices`` are sources) this is message passing's gather. The rows of ``x`` may come
in two arrays (``ghosts``: rows ``len(x)`` on), so a rank's own rows and the ghost rows it received
are read where they lie, never copied into one array.
"""

import numpy as np
from numba import njit

from kernels._checks import (FLOAT_DTYPES, INDEX_DTYPES, MEAN, MIN, SUM, as_arrays, check_csr, check_dtype,
                             check_index_range, check_ndim, check_weights, op_code)


@njit(cache=True, inline="always")
def _edge_weight(weights, e):
    """``weights[e]``, or 1 when there are no weights (the branch is pruned at compile time).

    (The CUDA kernel takes a flag instead: a CUDA kernel cannot be launched with None.)
    """
    if weights is None:
        return np.float32(1.0)
    return weights[e]


@njit(cache=True)
def _gather_reduce_1d_cpu(indptr, indices, x, weights, op, out):
    """CPU gather for 1-D x.

    indptr: [R + 1]; indices: [E]; x: [N]; weights: [E] or None; out: [R] zeros, written in place.
    ``min`` is computed as ``-max(-v)`` (negation is exact), so max and min share one loop. Positions
    are unsigned so that Numba emits no negative-index fix-ups (about 25% faster at F = 1); the
    dispatch function has checked them (no bounds checks here).
    """
    sign = np.float32(-1.0) if op == MIN else np.float32(1.0)
    for r in range(out.shape[0]):
        start = np.uint64(indptr[r])
        end = np.uint64(indptr[r + 1])
        if start == end:
            continue
        if op == SUM or op == MEAN:
            acc = np.float32(0.0)  # Numba widens it to float64 when x is float64
            for e in range(start, end):
                acc += _edge_weight(weights, e) * x[np.uint64(indices[e])]
            out[r] = acc / (end - start) if op == MEAN else acc
        else:
            acc = sign * _edge_weight(weights, start) * x[np.uint64(indices[start])]
            for e in range(start + np.uint64(1), end):
                value = sign * _edge_weight(weights, e) * x[np.uint64(indices[e])]
                if value > acc:
                    acc = value
            out[r] = sign * acc


@njit(cache=True)
def _gather_reduce_2d_cpu(indptr, indices, x, ghosts, weights, op, out):
    """CPU gather for 2-D x: edges outer, features inner (contiguous rows of x and out).

    indptr: [R + 1]; indices: [E]; x: [N, F]; ghosts: [G, F] rows N.. or None; weights: [E] or None;
    out: [R, F] zeros, in place. Rows are indexed in two dimensions, with one loop per array read:
    slicing out 1-D row views, or one view chosen from either array, made the two-array gather up to
    2x slower at F = 64 (no vectorised loop).
    """
    sign = np.float32(-1.0) if op == MIN else np.float32(1.0)
    n, num_features = np.uint64(x.shape[0]), x.shape[1]
    for r in range(out.shape[0]):
        start = np.uint64(indptr[r])
        end = np.uint64(indptr[r + 1])
        if start == end:
            continue
        if op == SUM or op == MEAN:
            for e in range(start, end):
                w, i = _edge_weight(weights, e), np.uint64(indices[e])
                if ghosts is None or i < n:
                    for f in range(num_features):
                        out[r, f] += w * x[i, f]
                else:
                    for f in range(num_features):
                        out[r, f] += w * ghosts[i - n, f]
            if op == MEAN:
                count = end - start
                for f in range(num_features):
                    out[r, f] /= count
        else:
            for e in range(start, end):
                w, i, first = sign * _edge_weight(weights, e), np.uint64(indices[e]), e == start
                if ghosts is None or i < n:
                    for f in range(num_features):
                        value = w * x[i, f]
                        if first or value > out[r, f]:
                            out[r, f] = value
                else:
                    for f in range(num_features):
                        value = w * ghosts[i - n, f]
                        if first or value > out[r, f]:
                            out[r, f] = value
            if op == MIN:
                for f in range(num_features):
                    out[r, f] = -out[r, f]


def _gather_reduce(indptr, indices, x, op, weights=None, ghosts=None):
    """NumPy reference twin of :func:`gather_reduce` (same arguments and result)."""
    from kernels.scatter import _scatter_reduce

    if ghosts is not None:
        x = np.concatenate([x, ghosts])
    indptr = np.asarray(indptr)
    rows = np.repeat(np.arange(indptr.shape[0] - 1), np.diff(indptr))
    values = x[np.asarray(indices)]
    if weights is not None:
        w = np.asarray(weights).astype(x.dtype)
        values = values * (w if x.ndim == 1 else w[:, None])
    out, _ = _scatter_reduce(rows, values, indptr.shape[0] - 1, op)
    return out


# ---------------------------------------------------------------------------------------------
# Dispatch
# ---------------------------------------------------------------------------------------------

def gather_reduce(indptr, indices, x, op: str, weights=None, *, ghosts=None, check: bool = True):
    """Reduce ``weights[e] * x[indices[e]]`` over the edges ``e`` of each CSR row.

    indptr:  [R + 1] int64 (or int32)   row pointer: row r owns edges indptr[r]:indptr[r+1]
    indices: [E] int32 or int64         column (source vertex) of each edge, in [0, N)
    x:       [N] or [N, F] float32 or float64
    op:      'sum' | 'mean' | 'max' | 'min'
    weights: [E] float or None          multiplies each edge's term (cast to x's dtype)
    ghosts:  [G] or [G, F] or None      rows N .. N + G - 1 (x's dtype and row shape): indices then
                                        lie in [0, N + G) and each is read from x or ghosts
                                        (host arrays only)
    returns: [R] or [R, F] with x's dtype; rows without edges are 0 for every op.

    NumPy inputs run the Numba CPU kernel, device arrays (all of them) the CUDA kernel and give a
    device array back. Dtypes and shapes are always checked; ``check=True`` also checks the contents
    of host arrays (indptr starts at 0, never decreases and ends at E; indices in [0, N)) in one
    O(R + E) pass — turn it off for arrays already validated. Device array contents are not checked
    (that would copy them to the host). NaN inputs give unspecified results for ``max``/``min``.
    """
    code = op_code(op)
    on_device, a = as_arrays(indptr=indptr, indices=indices, x=x, weights=weights, ghosts=ghosts)
    indptr, indices, x, ghosts = a["indptr"], a["indices"], a["x"], a["ghosts"]
    check_dtype("x", x, FLOAT_DTYPES)
    check_ndim("x", x, (1, 2))
    if ghosts is not None and (ghosts.dtype != x.dtype or tuple(ghosts.shape[1:]) != tuple(x.shape[1:])):
        raise ValueError(f"ghosts must have x's dtype {x.dtype} and row shape {tuple(x.shape[1:])}; got "
                         f"{ghosts.dtype} with shape {tuple(ghosts.shape)}")
    num_columns = x.shape[0] + (0 if ghosts is None else ghosts.shape[0])
    check_dtype("indices", indices, INDEX_DTYPES)
    check_ndim("indices", indices, (1,))
    num_edges = indices.shape[0]
    check_csr(indptr, num_edges, check and not on_device)
    weights = check_weights(a["weights"], num_edges, x.dtype)
    if check and not on_device:
        check_index_range("indices", indices, num_columns, "rows of x" if ghosts is None else "rows of x and ghosts")
    num_rows = indptr.shape[0] - 1

    if on_device:
        from kernels.graph_cuda import gather_reduce_cuda

        if ghosts is not None:
            raise ValueError("ghosts: the device kernel reads one array; concatenate x and ghosts")
        out = gather_reduce_cuda(indptr, indices, x.reshape(x.shape[0], -1), weights, code)
        return out.reshape(num_rows) if x.ndim == 1 else out

    out = np.zeros((num_rows,) + x.shape[1:], dtype=x.dtype)
    if x.ndim == 1:  # scalar rows: joined at little cost, for a kernel 15x faster than one reading two arrays
        x = x if ghosts is None or not len(ghosts) else np.concatenate([x, ghosts])
        _gather_reduce_1d_cpu(indptr, indices, x, weights, code, out)
    else:
        _gather_reduce_2d_cpu(indptr, indices, x, ghosts, weights, code, out)
    return out
