"""The fused attention gather (``kernels.attention_gather``) against its NumPy twin and by hand."""

import numpy as np
import pytest

from kernels.attention_gather import _attention_gather, attention_gather


def _case(rng, rows, n, heads, channels, dtype):
    degrees = rng.integers(0, 7, rows)
    degrees[::5] = 0  # rows without edges
    indptr = np.concatenate([[0], np.cumsum(degrees)]).astype(np.int64)
    indices = rng.integers(0, n, indptr[-1]).astype(np.int32)
    ext = rng.standard_normal((n, heads * (channels + 1))).astype(dtype)
    dst = rng.standard_normal((rows, heads)).astype(dtype)
    ext_ids = rng.permutation(n).astype(np.int64)  # as the engine's: the owned rows come first
    return indptr, indices, ext, dst, ext_ids, ext_ids[:rows]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("skip_self", [False, True])
def test_kernel_matches_twin(dtype, skip_self):
    rng = np.random.default_rng(7)
    heads, channels = 3, 5
    indptr, indices, ext, dst, ext_ids, row_ids = _case(rng, 60, 90, heads, channels, dtype)
    if skip_self:  # make every fourth edge a self-loop: row r of ext is destination r itself
        indices[::4] = np.repeat(np.arange(60), np.diff(indptr))[::4]
    got = attention_gather(indptr, indices, ext, dst, heads, channels, 0.2, ext_ids, row_ids, skip_self)
    want = _attention_gather(indptr, indices, ext, dst, heads, channels, 0.2, ext_ids, row_ids, skip_self)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    for a, b in zip(got, want):
        assert a.dtype == dtype
        assert np.array_equal(np.isinf(a), np.isinf(b))
        np.testing.assert_allclose(np.where(np.isinf(a), 0, a), np.where(np.isinf(b), 0, b), rtol=tol, atol=tol)


def test_by_hand_one_row():
    # one destination (id 9), two in-edges from rows 0 and 1, one head of two channels, slope 0.5
    ext = np.array([[1.0, 2.0, 0.5], [3.0, 4.0, -2.0]], np.float32)  # [values | source score]
    dst = np.array([[0.5]], np.float32)
    m, s, acc = attention_gather(np.array([0, 2]), np.array([0, 1]), ext, dst, 1, 2, 0.5,
                                 np.array([3, 4]), np.array([9]), True)
    scores = np.array([1.0, -0.75])  # leaky(0.5 + 0.5), leaky(-2 + 0.5) = -1.5 * 0.5
    w = np.exp(scores - 1.0)
    np.testing.assert_allclose(m, [[1.0]])
    np.testing.assert_allclose(s, [[w.sum()]], rtol=1e-6)
    np.testing.assert_allclose(acc, [[[w[0] * 1 + w[1] * 3, w[0] * 2 + w[1] * 4]]], rtol=1e-6)
    m, s, acc = attention_gather(np.array([0, 2]), np.array([0, 1]), ext, dst, 1, 2, 0.5,
                                 np.array([9, 4]), np.array([9]), True)  # row 0 is the vertex itself
    np.testing.assert_allclose(m, [[-0.75]])
    np.testing.assert_allclose(s, [[1.0]])
    np.testing.assert_allclose(acc, [[[3.0, 4.0]]])


def test_ghost_rows_read_where_they_lie():
    """ext split into owned rows and ghosts (no copy) gives the twin's result on the whole array."""
    rng = np.random.default_rng(8)
    heads, channels = 2, 3
    indptr, indices, ext, dst, ext_ids, row_ids = _case(rng, 40, 70, heads, channels, np.float32)
    indices[::3] = np.repeat(np.arange(40), np.diff(indptr))[::3]  # self-loops to skip
    got = attention_gather(indptr, indices, ext[:40], dst, heads, channels, 0.2, ext_ids, row_ids, True,
                           ghosts=ext[40:])
    want = _attention_gather(indptr, indices, ext, dst, heads, channels, 0.2, ext_ids, row_ids, True)
    for a, b in zip(got, want):
        assert np.array_equal(np.isinf(a), np.isinf(b))
        np.testing.assert_allclose(np.where(np.isinf(a), 0, a), np.where(np.isinf(b), 0, b), rtol=1e-5, atol=1e-6)
    whole = attention_gather(indptr, indices, ext, dst, heads, channels, 0.2, ext_ids, row_ids, True)
    for a, b in zip(got, whole):  # the same arithmetic, read from two arrays
        np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError, match="ghosts"):
        attention_gather(indptr, indices, ext[:40], dst, heads, channels, 0.2, ext_ids, row_ids, True,
                         ghosts=ext[40:].astype(np.float64))
