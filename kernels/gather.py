"""Row-wise gather-reduce over a CSR graph: the receiver-side gather of every superstep.

``gather_reduce(indptr, indices, x, op, weights)`` computes, for each row ``r`` of the CSR,

    out[r] = op over e in indptr[r]:indptr[r+1] of  weights[e] * x[indices[e]]

(``x[indices[e]] + weights[e]`` with ``weight_op='add'``: shortest paths' min-plus) with ``op`` in
``sum``, ``mean``, ``max``, ``min``; rows without edges give 0 for every op (as PyG's
``spmm(adj_t, x, reduce)`` and DGL's ``copy_u``/``u_mul_e`` + reduce do). With in-edge CSR (rows are
destinations, ``indices`` are sources) this is message passing's gather. The rows of ``x`` may come
in two arrays (``ghosts``: rows ``len(x)`` on), so a rank's own rows and the ghost rows it received
are read where they lie, never copied into one array.
"""

import numpy as np
from numba import njit

from kernels._checks import (FLOAT_DTYPES, INDEX_DTYPES, MEAN, MIN, SUM, as_arrays, check_csr, check_dtype,
                             check_index_range, check_ndim, check_weight_op, check_weights, op_code)
from kernels.bits import bit_set, bit_words


@njit(cache=True, inline="always")
def _edge_weight(weights, e):
    """``weights[e]``, or 1 when there are no weights (the branch is pruned at compile time).

    (The CUDA kernel takes a flag instead: a CUDA kernel cannot be launched with None.)
    """
    if weights is None:
        return np.float32(1.0)
    return weights[e]


@njit(cache=True, inline="always")
def _plus(addends, e, value):
    """``value + addends[e]``, or ``value`` when there are no addends (pruned at compile time)."""
    if addends is None:
        return value
    return value + addends[e]


@njit(cache=True, inline="always")
def _sends(sent, i):
    """Whether column ``i`` sent: bit ``i`` of ``sent`` (``kernels.bits.bit_words``), or True when there
    is no mask (pruned at compile time)."""
    if sent is None:
        return True
    return bit_set(sent, i)


@njit(cache=True)
def _gather_reduce_1d_cpu(indptr, indices, x, weights, addends, sent, op, out, counts):
    """CPU gather for 1-D x.

    indptr: [R + 1]; indices: [E]; x: [N]; weights: [E] or None, multiplied; addends: [E] or None,
    added (the weights of ``weight_op='add'``; the dispatch passes one of the two or neither);
    sent: [ceil(N / 64)] uint64 bits (``kernels.bits.bit_words``) or None (every column sends);
    out: [R] zeros, written in place; counts: [R] int64 written with the number of edges reduced
    into each row, or None. Edges from columns that did not send are skipped.
    ``min`` is computed as ``-max(-v)`` (negation is exact), so max and min share one loop. Positions
    are unsigned so that Numba emits no negative-index fix-ups (about 25% faster at F = 1); the
    dispatch function has checked them (no bounds checks here).
    """
    sign = np.float32(-1.0) if op == MIN else np.float32(1.0)
    for r in range(out.shape[0]):
        start = np.uint64(indptr[r])
        end = np.uint64(indptr[r + 1])
        taken = 0
        if op == SUM or op == MEAN:
            acc = np.float32(0.0)  # Numba widens it to float64 when x is float64
            for e in range(start, end):
                i = np.uint64(indices[e])
                if _sends(sent, i):
                    acc += _edge_weight(weights, e) * _plus(addends, e, x[i])
                    taken += 1
            if taken:
                out[r] = acc / taken if op == MEAN else acc
        else:
            acc = np.float32(0.0)
            for e in range(start, end):
                i = np.uint64(indices[e])
                if _sends(sent, i):
                    value = sign * _edge_weight(weights, e) * _plus(addends, e, x[i])
                    if taken == 0 or value > acc:
                        acc = value
                    taken += 1
            if taken:
                out[r] = sign * acc
        if counts is not None:
            counts[r] = taken


@njit(cache=True, inline="always")
def _row_value(out, scratch, r, f):
    """The running value of feature ``f`` of row ``r``: in ``out``, or in the ``scratch`` row when there
    is one (the branch is pruned at compile time)."""
    if scratch is None:
        return out[r, f]
    return scratch[f]


@njit(cache=True, inline="always")
def _set_row_value(out, scratch, r, f, value):
    """Set the running value of feature ``f`` of row ``r`` (see ``_row_value``)."""
    if scratch is None:
        out[r, f] = value
    else:
        scratch[f] = value


@njit(cache=True)
def _gather_reduce_2d_cpu(indptr, indices, x, ghosts, weights, addends, sent, op, out, counts, scratch):
    """CPU gather for 2-D x: edges outer, features inner (contiguous rows of x).

    indptr: [R + 1]; indices: [E]; x: [N, F]; ghosts: [G, F] rows N.. or None; weights, addends: [E]
    or None (as in the 1-D kernel);
    sent: [ceil((N + G) / 64)] uint64 bits or None; out: [R, F]; counts: [R] int64 or None (as in the
    1-D kernel); scratch: None, reducing in ``out`` (contiguous zeros, in place), or [F], where each
    row is reduced before it is written to ``out`` (any rows: a slice of a wider array's columns, which
    reduced in place took 2-3x as long, a store per edge; a scratch row for every gather made those of
    16 columns 7-12 % slower). Rows are indexed in two dimensions, with one loop per array read: slicing
    out 1-D row views, or one view chosen from either array, made the two-array gather up to 2x slower
    at F = 64 (no vectorised loop).
    """
    sign = np.float32(-1.0) if op == MIN else np.float32(1.0)
    n, num_features = np.uint64(x.shape[0]), x.shape[1]
    for r in range(out.shape[0]):
        start = np.uint64(indptr[r])
        end = np.uint64(indptr[r + 1])
        taken = 0
        if scratch is not None:
            for f in range(num_features):
                scratch[f] = 0
        if op == SUM or op == MEAN:
            for e in range(start, end):
                w, i = _edge_weight(weights, e), np.uint64(indices[e])
                if not _sends(sent, i):
                    continue
                taken += 1
                if ghosts is None or i < n:
                    for f in range(num_features):
                        _set_row_value(out, scratch, r, f,
                                       _row_value(out, scratch, r, f) + w * _plus(addends, e, x[i, f]))
                else:
                    for f in range(num_features):
                        _set_row_value(out, scratch, r, f,
                                       _row_value(out, scratch, r, f) + w * _plus(addends, e, ghosts[i - n, f]))
            if op == MEAN and taken:
                for f in range(num_features):
                    _set_row_value(out, scratch, r, f, _row_value(out, scratch, r, f) / taken)
        else:
            for e in range(start, end):
                w, i, first = sign * _edge_weight(weights, e), np.uint64(indices[e]), taken == 0
                if not _sends(sent, i):
                    continue
                taken += 1
                if ghosts is None or i < n:
                    for f in range(num_features):
                        value = w * _plus(addends, e, x[i, f])
                        if first or value > _row_value(out, scratch, r, f):
                            _set_row_value(out, scratch, r, f, value)
                else:
                    for f in range(num_features):
                        value = w * _plus(addends, e, ghosts[i - n, f])
                        if first or value > _row_value(out, scratch, r, f):
                            _set_row_value(out, scratch, r, f, value)
            if op == MIN and taken:
                for f in range(num_features):
                    _set_row_value(out, scratch, r, f, -_row_value(out, scratch, r, f))
        if scratch is not None:
            for f in range(num_features):
                out[r, f] = scratch[f]
        if counts is not None:
            counts[r] = taken


def _gather_reduce(indptr, indices, x, op, weights=None, ghosts=None, weight_op="mul"):
    """NumPy reference twin of :func:`gather_reduce` (same arguments and result)."""
    from kernels.scatter import _scatter_reduce

    if ghosts is not None:
        x = np.concatenate([x, ghosts])
    indptr = np.asarray(indptr)
    rows = np.repeat(np.arange(indptr.shape[0] - 1), np.diff(indptr))
    values = x[np.asarray(indices)]
    if weights is not None:
        w = np.asarray(weights).astype(x.dtype)
        w = w if x.ndim == 1 else w[:, None]
        values = values + w if weight_op == "add" else values * w
    out, _ = _scatter_reduce(rows, values, indptr.shape[0] - 1, op)
    return out


def _gather_reduce_sent(indptr, indices, x, sent, op, weights=None, ghosts=None, weight_op="mul"):
    """NumPy reference twin of :func:`gather_reduce_sent` (same arguments and result)."""
    sent_indptr, positions = _sent_edges(indptr, indices, sent)
    weights = None if weights is None else np.asarray(weights)[positions]
    out = _gather_reduce(sent_indptr, np.asarray(indices)[positions], x, op, weights, ghosts, weight_op)
    return out, np.diff(sent_indptr)


def _sent_edges(indptr, indices, sent):
    """NumPy reference twin of :func:`sent_edges` (same arguments and result)."""
    indptr = np.asarray(indptr)
    keep = np.asarray(sent)[np.asarray(indices)]
    rows = np.repeat(np.arange(indptr.shape[0] - 1), np.diff(indptr))
    counts = np.bincount(rows[keep], minlength=indptr.shape[0] - 1)
    return np.concatenate([[0], np.cumsum(counts)]).astype(np.int64), np.flatnonzero(keep)


@njit(cache=True)
def _count_sent_cpu(indptr, indices, sent, counts):
    """counts [R] int64 (in place): the edges of each CSR row whose column sent (``sent``: bits)."""
    for r in range(counts.shape[0]):
        taken = 0
        for e in range(np.uint64(indptr[r]), np.uint64(indptr[r + 1])):
            if _sends(sent, np.uint64(indices[e])):
                taken += 1
        counts[r] = taken


@njit(cache=True)
def _sent_positions_cpu(indices, sent, positions, start, found):
    """Write the edges from ``start`` on whose column sent (``sent``: bits), in order, to
    ``positions[found:]`` while it has room; returns ``found`` plus how many there are (room or not)."""
    k = found
    for e in range(np.uint64(start), np.uint64(indices.shape[0])):
        if _sends(sent, np.uint64(indices[e])):
            if k < positions.shape[0]:
                positions[k] = e
            k += 1
    return k


# ---------------------------------------------------------------------------------------------
# Dispatch
# ---------------------------------------------------------------------------------------------

def gather_reduce(indptr, indices, x, op: str, weights=None, *, weight_op: str = "mul", ghosts=None,
                  check: bool = True, out=None):
    """Reduce ``weights[e] * x[indices[e]]`` (or ``x[indices[e]] + weights[e]``) over the edges ``e``
    of each CSR row.

    indptr:  [R + 1] int64 (or int32)   row pointer: row r owns edges indptr[r]:indptr[r+1]
    indices: [E] int32 or int64         column (source vertex) of each edge, in [0, N)
    x:       [N] or [N, F] float32 or float64
    op:      'sum' | 'mean' | 'max' | 'min'
    weights: [E] float or None          multiplies each edge's term (cast to x's dtype)
    weight_op: 'mul' | 'add'            'add': the weights add to the terms instead (with 'min',
                                        shortest paths' relaxation); without weights, either op
                                        leaves the terms as they are (its identity, 1 or 0)
    ghosts:  [G] or [G, F] or None      rows N .. N + G - 1 (x's dtype and row shape): indices then
                                        lie in [0, N + G) and each is read from x or ghosts
                                        (host arrays only)
    out:     [R, F] or None             host arrays only: the result is written here (overwritten), a
                                        view whose columns lie next to each other (a slice of a wider
                                        array's columns: the rows may be strided)
    returns: [R] or [R, F] with x's dtype (``out`` when given); rows without edges are 0 for every op.

    NumPy inputs run the Numba CPU kernel, device arrays (all of them) the CUDA kernel and give a
    device array back. Dtypes and shapes are always checked; ``check=True`` also checks the contents
    of host arrays (indptr starts at 0, never decreases and ends at E; indices in [0, N)) in one
    O(R + E) pass — turn it off for arrays already validated. Device array contents are not checked
    (that would copy them to the host). NaN inputs give unspecified results for ``max``/``min``.
    """
    code, add = op_code(op), check_weight_op(weight_op)
    on_device, indptr, indices, x, weights, ghosts = _checked(indptr, indices, x, weights, ghosts, check)
    num_rows = indptr.shape[0] - 1
    if on_device:
        from kernels.graph_cuda import gather_reduce_cuda

        if ghosts is not None or out is not None:
            raise ValueError("ghosts, out: the device kernel reads one array and returns its own")
        out = gather_reduce_cuda(indptr, indices, x.reshape(x.shape[0], -1), weights, code, add)
        return out.reshape(num_rows) if x.ndim == 1 else out
    return _gather_cpu(indptr, indices, x, ghosts, weights, add, None, code, out)[0]


def gather_reduce_sent(indptr, indices, x, sent, op: str, weights=None, *, weight_op: str = "mul", ghosts=None,
                       check: bool = True, out=None):
    """``gather_reduce`` over only the edges whose column sent, and how many each row reduced.

    sent: [N + G] bool, whether each row of x (then of ghosts) sent; the other arguments (``out``
    too) as in ``gather_reduce`` (host arrays only). Returns (out [R] / [R, F], counts [R] int64): rows whose
    edges all come from columns that did not send are 0, as rows without edges are, and ``mean``
    divides by the edges reduced. One pass over the edges, reading ``x`` only where the column sent:
    the receiver's gather of a superstep in which only some vertices send.
    """
    code, add = op_code(op), check_weight_op(weight_op)
    on_device, indptr, indices, x, weights, ghosts = _checked(indptr, indices, x, weights, ghosts, check)
    if on_device:
        raise ValueError("gather_reduce_sent runs on host arrays only")
    sent = _check_sent(sent, x.shape[0] + (0 if ghosts is None else ghosts.shape[0]))
    return _gather_cpu(indptr, indices, x, ghosts, weights, add, bit_words(sent), code, out)


def sent_edges(indptr, indices, sent, *, check: bool = True):
    """The CSR's edges whose column sent: (sent_indptr [R + 1] int64, positions [k] int64).

    indptr [R + 1], indices [E] as in ``gather_reduce``; sent [N] bool over the columns (host
    arrays). ``positions`` are the kept edges' positions in CSR order and ``sent_indptr`` their row
    pointer, so ``indices[positions]`` with ``sent_indptr`` is the CSR of the kept edges. Two passes
    over the edges; nothing of size E is allocated but the positions kept.
    """
    _, a = as_arrays(indptr=indptr, indices=indices)
    indptr, indices = a["indptr"], a["indices"]
    check_dtype("indices", indices, INDEX_DTYPES)
    check_csr(indptr, indices.shape[0], check)
    sent = _check_sent(sent, None)
    if check:
        check_index_range("indices", indices, sent.shape[0], "entries of sent")
    bits = bit_words(sent)
    counts = np.empty(indptr.shape[0] - 1, np.int64)
    _count_sent_cpu(indptr, indices, bits, counts)
    sent_indptr = np.zeros(indptr.shape[0], np.int64)
    np.cumsum(counts, out=sent_indptr[1:])
    positions = np.empty(int(sent_indptr[-1]), np.int64)
    _sent_positions_cpu(indices, bits, positions, 0, 0)
    return sent_indptr, positions


def _sent_positions(indices, sent, expected: int = 0):
    """NumPy reference twin of :func:`sent_positions` (same arguments and result)."""
    return np.flatnonzero(np.asarray(sent)[np.asarray(indices)])


def sent_positions(indices, sent, expected: int = 1024, *, check: bool = True):
    """[k] int64: the positions, ascending, of the edges whose column sent, in one pass over them.

    indices [E] int32 or int64 columns; sent [N] bool over the columns (host arrays); ``expected``:
    a guess of k (when short, the edges after the guess's last are found in a second pass).
    ``sent_edges``' positions without its counting pass and row pointer.
    """
    _, a = as_arrays(indices=indices)
    indices = a["indices"]
    check_dtype("indices", indices, INDEX_DTYPES)
    sent = _check_sent(sent, None)
    if check:
        check_index_range("indices", indices, sent.shape[0], "entries of sent")
    bits = bit_words(sent)
    positions = np.empty(max(int(expected), 1), np.int64)
    found = _sent_positions_cpu(indices, bits, positions, 0, 0)
    if found > len(positions):  # the guess was short: the rest, after the last edge written
        full, positions = positions, np.empty(found, np.int64)
        positions[:len(full)] = full
        _sent_positions_cpu(indices, bits, positions, full[-1] + 1, len(full))
    return positions[:found]


def _check_out(out, shape, dtype) -> None:
    """ValueError unless ``out`` is a 2-D host array of ``shape`` and ``dtype`` with its columns next
    to each other (rows may be strided)."""
    if (not isinstance(out, np.ndarray) or out.shape != shape or out.dtype != dtype or out.ndim != 2
            or (out.size and out.shape[1] > 1 and out.strides[1] != out.itemsize)):
        got = f"{type(out).__name__} {getattr(out, 'dtype', '')}{tuple(getattr(out, 'shape', ()))}"
        raise ValueError(f"out must be a {dtype} NumPy array of shape {shape} whose columns lie next to each "
                         f"other; got {got}")


def _check_sent(sent, num_columns):
    """``sent`` as a [num_columns] bool NumPy array (any length when ``num_columns`` is None)."""
    if not isinstance(sent, np.ndarray) or sent.dtype != np.bool_ or sent.ndim != 1:
        raise ValueError(f"sent must be a 1-D bool NumPy array; got {type(sent).__name__} "
                         f"{getattr(sent, 'dtype', '')}{tuple(getattr(sent, 'shape', ()))}")
    if num_columns is not None and sent.shape[0] != num_columns:
        raise ValueError(f"sent must have one entry per row of x and ghosts ({num_columns}); got {sent.shape[0]}")
    return np.ascontiguousarray(sent)


def _checked(indptr, indices, x, weights, ghosts, check: bool):
    """The arguments of ``gather_reduce`` checked and brought to one place: (on_device, indptr,
    indices, x, weights cast to x's dtype or None, ghosts)."""
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
    return on_device, indptr, indices, x, weights, ghosts


def _gather_cpu(indptr, indices, x, ghosts, weights, add, sent, code, out=None):
    """(out, counts or None) of the CPU kernels on checked host arrays; ``add``: the weights add to
    the terms; ``sent``: ``bit_words``'s words, or None for every edge; ``out``: where to write the
    result (2-D only; checked here), or None for a new array."""
    weights, addends = (None, weights) if add else (weights, None)
    num_rows = indptr.shape[0] - 1
    scratch = None
    if out is None:
        out = np.zeros((num_rows,) + x.shape[1:], dtype=x.dtype)
    else:
        _check_out(out, (num_rows,) + x.shape[1:], x.dtype)
        scratch = np.empty(x.shape[1], x.dtype)
    counts = None if sent is None else np.empty(num_rows, np.int64)
    if x.ndim == 1:  # scalar rows: joined at little cost, for a kernel 15x faster than one reading two arrays
        x = x if ghosts is None or not len(ghosts) else np.concatenate([x, ghosts])
        _gather_reduce_1d_cpu(indptr, indices, x, weights, addends, sent, code, out, counts)
    else:
        _gather_reduce_2d_cpu(indptr, indices, x, ghosts, weights, addends, sent, code, out, counts, scratch)
    return out, counts
