"""Fused attention gather (GAT): per destination and head, the partial softmax sums of its in-edges.

For row r of an in-edge CSR (rows are destinations, ``indices`` point at rows of ``ext``) and head h,
every edge e = (j → r) has the score

    l_e = leaky_relu(ext[j, H·C + h] + dst[r, h], slope)

(GAT's α_src of the source plus α_dst of the destination), and the kernel returns

    m[r, h] = max_e l_e,   s[r, h] = Σ_e exp(l_e − m),   acc[r, h, :] = Σ_e exp(l_e − m) · ext[j, h·C:(h+1)·C]

(``pregel.softmax_parts.SoftmaxParts``), computed online in one pass over the edges: no per-edge
array is made. With ``skip_self``, edges whose source and destination are the same vertex
(``ext_ids[j] == row_ids[r]``) are left out (GAT drops the file's self-loops and adds its own).
Rows without edges give m = −inf, s = 0, acc = 0.
"""

import numpy as np
from numba import njit

from kernels._checks import FLOAT_DTYPES, INDEX_DTYPES, check_csr, check_dtype, check_index_range, check_ndim


@njit(cache=True)
def _attention_gather_cpu(indptr, indices, ext, ghosts, dst, heads, channels, slope, ext_ids, row_ids, skip_self,
                          m, s, acc):
    """CPU kernel. indptr [R + 1]; indices [E]; ext [N, H·C + H]; ghosts [G, H·C + H] rows N.. or None;
    dst [R, H]; ext_ids [N (+ G)], row_ids [R] int64; m, s [R, H] and acc [R, H, C] prefilled with −inf,
    0, 0 and written in place."""
    split = heads * channels
    n = ext.shape[0]
    for r in range(indptr.shape[0] - 1):
        for e in range(indptr[r], indptr[r + 1]):
            j = indices[e]
            if skip_self and ext_ids[j] == row_ids[r]:
                continue
            rows = ext
            if ghosts is not None and j >= n:
                rows, j = ghosts, j - n
            for h in range(heads):
                score = rows[j, split + h] + dst[r, h]
                if score < 0:
                    score = score * slope
                base = h * channels
                if score > m[r, h]:  # a new maximum: rescale what is there
                    scale = np.exp(m[r, h] - score)
                    s[r, h] = s[r, h] * scale + 1
                    for c in range(channels):
                        acc[r, h, c] = acc[r, h, c] * scale + rows[j, base + c]
                    m[r, h] = score
                else:
                    weight = np.exp(score - m[r, h])
                    s[r, h] += weight
                    for c in range(channels):
                        acc[r, h, c] += weight * rows[j, base + c]


def _attention_gather(indptr, indices, ext, dst, heads, channels, slope, ext_ids, row_ids, skip_self, ghosts=None):
    """NumPy reference twin of :func:`attention_gather` (same arguments and result), edge by edge."""
    indptr, indices = np.asarray(indptr), np.asarray(indices)
    ext = ext if ghosts is None else np.concatenate([ext, ghosts])
    rows = np.repeat(np.arange(len(indptr) - 1), np.diff(indptr))
    split = heads * channels
    scores = ext[indices, split:] + dst[rows]
    scores = np.where(scores > 0, scores, scores * ext.dtype.type(slope))
    if skip_self:
        scores[np.asarray(ext_ids)[indices] == np.asarray(row_ids)[rows]] = -np.inf
    m = np.full(dst.shape, -np.inf, ext.dtype)
    np.maximum.at(m, rows, scores)
    weight = np.where(np.isfinite(scores), np.exp(scores - np.where(np.isfinite(m), m, 0)[rows]), 0).astype(ext.dtype)
    s = np.zeros(dst.shape, ext.dtype)
    np.add.at(s, rows, weight)
    acc = np.zeros(dst.shape + (channels,), ext.dtype)
    np.add.at(acc, rows, weight[:, :, None] * ext[indices, :split].reshape(-1, heads, channels))
    return m, s, acc


def attention_gather(indptr, indices, ext, dst, heads: int, channels: int, slope: float, ext_ids, row_ids,
                     skip_self: bool, ghosts=None):
    """(m [R, H], s [R, H], acc [R, H, C]) of the module docstring.

    indptr [R + 1] int64; indices [E] int32/int64 rows of ``ext``; ext [N, H·C + H] float32/float64
    (each row: the H·C values, then the H source scores); dst [R, H] destination scores (ext's
    dtype); ext_ids [N], row_ids [R] int64 vertex ids (used with ``skip_self``). ``ghosts`` [G, H·C + H]
    (ext's dtype) or None: rows N .. N + G - 1, read where they lie (``indices`` then lie in
    [0, N + G) and ``ext_ids`` has N + G ids), so the owned and received rows need not be copied
    into one array. Host arrays only.
    """
    ext, dst = np.ascontiguousarray(ext), np.ascontiguousarray(dst, dtype=ext.dtype)
    check_dtype("ext", ext, FLOAT_DTYPES)
    check_ndim("ext", ext, (2,))
    num_rows = ext.shape[0]
    if ghosts is not None:
        ghosts = np.ascontiguousarray(ghosts)
        if ghosts.dtype != ext.dtype or ghosts.shape[1:] != ext.shape[1:]:
            raise ValueError(f"ghosts {ghosts.dtype} {ghosts.shape} must have ext's dtype {ext.dtype} and row "
                             f"width {ext.shape[1]}")
        num_rows += ghosts.shape[0]
    check_dtype("indices", indices, INDEX_DTYPES)
    check_csr(indptr, len(indices), False)
    if ext.shape[1] != heads * (channels + 1) or dst.shape != (len(indptr) - 1, heads):
        raise ValueError(f"ext {ext.shape} / dst {dst.shape} do not fit {heads} heads of {channels} channels")
    check_index_range("indices", indices, num_rows, "rows of ext" if ghosts is None else "rows of ext and ghosts")
    rows = len(indptr) - 1
    m = np.full((rows, heads), -np.inf, ext.dtype)
    s = np.zeros((rows, heads), ext.dtype)
    acc = np.zeros((rows, heads, channels), ext.dtype)
    _attention_gather_cpu(indptr, indices, ext, ghosts, dst, heads, channels, ext.dtype.type(slope),
                          np.asarray(ext_ids, np.int64), np.asarray(row_ids, np.int64), bool(skip_self), m, s, acc)
    return m, s, acc
