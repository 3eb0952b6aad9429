"""Graph kernels, CUDA versions (run under NUMBA_ENABLE_CUDASIM=1): device inputs through the public
dispatch functions, compared with the NumPy reference twins on tiny inputs with an empty row, a
single-edge row and hub rows (for the gather, hubs long enough for every path of its row-length-
adaptive kernel: one thread per row, one warp or block per row, a row split into several pieces).
"""
import numpy as np
import pytest
from numba import cuda

from kernels._device import is_device_array
from kernels import graph_cuda
from kernels.graph_cuda import SHORT_ROW, row_layout
from kernels.gather import _gather_reduce, gather_reduce
from kernels.scatter import _scatter_reduce, scatter_reduce
from kernels.segment_softmax import _segment_softmax, segment_softmax

OPS = ["sum", "mean", "max", "min"]
DTYPES = [np.float32, np.float64]
NUM_ROWS, NUM_COLS = 10, 8


def tiny_csr(rng, index_dtype=np.int64):
    """indptr [R + 1], indices [E]: row 0 empty, row 1 single-edge, row 4 a hub of 12 edges."""
    degrees = rng.integers(1, 3, NUM_ROWS)
    degrees[0], degrees[1], degrees[4] = 0, 1, 12
    indptr = np.concatenate([[0], np.cumsum(degrees)]).astype(np.int64)
    return indptr, rng.integers(0, NUM_COLS, int(indptr[-1])).astype(index_dtype)


def assert_close(device_out, expected, dtype):
    assert is_device_array(device_out)
    actual = device_out.copy_to_host()
    assert actual.dtype == dtype and actual.shape == expected.shape
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(actual, expected, rtol=tol, atol=tol)


@pytest.fixture
def rng():
    return np.random.default_rng(7)


@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "weighted"])
@pytest.mark.parametrize("num_features", [None, 2], ids=["1d", "2d"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", OPS)
def test_gather_reduce_cuda(rng, op, dtype, num_features, weighted):
    index_dtype = np.int32 if weighted else np.int64
    indptr, indices = tiny_csr(rng, index_dtype)
    shape = (NUM_COLS,) if num_features is None else (NUM_COLS, num_features)
    x = rng.standard_normal(shape).astype(dtype)
    weights = rng.uniform(-2, 2, len(indices)).astype(dtype) if weighted else None

    out = gather_reduce(cuda.to_device(indptr), cuda.to_device(indices), cuda.to_device(x), op,
                        None if weights is None else cuda.to_device(weights))

    assert_close(out, _gather_reduce(indptr, indices, x, op, weights), dtype)


@pytest.mark.parametrize("num_features", [None, 2], ids=["1d", "2d"])
@pytest.mark.parametrize("op", OPS)
def test_gather_reduce_cuda_adds_the_weights_with_weight_op_add(rng, op, num_features):
    """``weight_op='add'`` (x + weight, shortest paths' relaxation) against the twin, and on a hub row
    split into pieces; max and min bit for bit."""
    for indptr, indices in (tiny_csr(rng), hub_csr(rng, num_features or 1)):
        shape = (indices.max() + 1,) if num_features is None else (indices.max() + 1, num_features)
        x = rng.standard_normal(shape)
        weights = rng.uniform(0, 2, len(indices))
        out = gather_reduce(cuda.to_device(indptr), cuda.to_device(indices), cuda.to_device(x), op,
                            cuda.to_device(weights), weight_op="add")
        expected = _gather_reduce(indptr, indices, x, op, weights, weight_op="add")
        if op in ("max", "min"):
            np.testing.assert_array_equal(out.copy_to_host(), expected)
        else:
            assert_close(out, expected, np.float64)


NUM_HUB_COLS = 50


def hub_csr(rng, num_features, index_dtype=np.int64):
    """indptr [R + 1], indices [E] over NUM_HUB_COLS sources for F = ``num_features``: empty rows
    (first and last), short rows, a row just longer than SHORT_ROW (one warp or block) and two hubs
    split into 2 and 3 pieces of the kernel's piece length (the last one partly filled)."""
    piece_edges = row_layout(num_features)[2]
    degrees = rng.integers(1, 4, 12)
    degrees[[0, 5, 11]] = 0
    degrees[[2, 4, 7]] = SHORT_ROW + 8, 2 * piece_edges + 5, piece_edges + 1
    indptr = np.concatenate([[0], np.cumsum(degrees)]).astype(index_dtype)
    return indptr, rng.integers(0, NUM_HUB_COLS, int(indptr[-1])).astype(index_dtype)


def assert_close_to_exact(device_out, indptr, indices, x, op, weights):
    """Compare with the float64 reference: max/min to the input's rounding, sums and means within
    a few rounding errors of the sum of |terms| (the kernel adds in another order than the twin)."""
    exact = _gather_reduce(indptr, indices, x.astype(np.float64), op,
                           None if weights is None else weights.astype(np.float64))
    eps = float(np.finfo(x.dtype).eps)
    if op in ("sum", "mean"):
        magnitude = _gather_reduce(indptr, indices, np.abs(x).astype(np.float64), op,
                                   None if weights is None else np.abs(weights).astype(np.float64))
        tolerance = 16 * eps * magnitude
    else:
        tolerance = 2 * eps * np.abs(exact)
    assert is_device_array(device_out)
    actual = device_out.copy_to_host()
    assert actual.dtype == x.dtype and actual.shape == exact.shape
    assert np.all(np.abs(actual - exact) <= tolerance), np.abs(actual - exact).max()


def test_hub_rows_cover_every_gather_path():
    for num_features in (1, 3, 40):
        piece_edges = row_layout(num_features)[2]
        degrees = np.diff(hub_csr(np.random.default_rng(0), num_features)[0])
        long_rows = degrees[degrees > SHORT_ROW]
        assert (long_rows <= piece_edges).any() and (long_rows > 2 * piece_edges).any()
        assert (degrees == 0).any() and (degrees == 1).any()


@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "weighted"])
@pytest.mark.parametrize("num_features,dtype", [(None, np.float32), (None, np.float64), (3, np.float32),
                                                (3, np.float64), (40, np.float32)],
                         ids=["1d-float32", "1d-float64", "F3-float32", "F3-float64", "F40-float32"])
@pytest.mark.parametrize("op", OPS)
def test_gather_reduce_cuda_hub_rows(rng, op, num_features, dtype, weighted):
    """F = 40 (a block per piece, two feature chunks) runs in float32 only: the simulator is slow."""
    indptr, indices = hub_csr(rng, num_features or 1, np.int32 if weighted else np.int64)
    shape = (NUM_HUB_COLS,) if num_features is None else (NUM_HUB_COLS, num_features)
    x = rng.standard_normal(shape).astype(dtype)
    weights = rng.uniform(-2, 2, len(indices)).astype(dtype) if weighted else None

    out = gather_reduce(cuda.to_device(indptr), cuda.to_device(indices), cuda.to_device(x), op,
                        None if weights is None else cuda.to_device(weights))

    assert_close_to_exact(out, indptr, indices, x, op, weights)


def test_gather_reduce_cuda_reuses_its_scratch_between_calls(rng):
    """A large call, then a smaller one with other shapes: nothing left over from the first leaks in."""
    big_indptr, big_indices = hub_csr(rng, 3)
    small_indptr, small_indices = tiny_csr(rng)
    for indptr, indices, width in ((big_indptr, big_indices, 3), (small_indptr, small_indices, 2),
                                   (big_indptr, big_indices, 3)):
        x = rng.standard_normal((NUM_HUB_COLS, width))
        out = gather_reduce(cuda.to_device(indptr), cuda.to_device(indices), cuda.to_device(x), "mean")
        assert_close(out, _gather_reduce(indptr, indices, x, "mean"), np.float64)


def test_gather_reduce_cuda_scratch_needs_no_hashable_context(rng, monkeypatch):
    """A real GPU's numba context defines equality without a hash (the simulator's can be hashed):
    the scratch is found again under such a context, and a new context gets its own."""
    class Context:  # as numba-cuda's driver.Context: __eq__ without __hash__
        def __eq__(self, other):
            return self is other

    indptr, indices = tiny_csr(rng)
    x = rng.standard_normal((NUM_HUB_COLS, 2))
    expected = _gather_reduce(indptr, indices, x, "mean")
    for context in (Context(), Context()):
        monkeypatch.setattr(graph_cuda.cuda, "current_context", lambda context=context: context)
        with pytest.raises(TypeError):
            hash(context)
        for _ in range(2):
            out = gather_reduce(cuda.to_device(indptr), cuda.to_device(indices), cuda.to_device(x), "mean")
            assert_close(out, expected, np.float64)
        assert sum(owner is context for owner, _ in graph_cuda._WORKSPACE.values()) > 0


@pytest.mark.parametrize("num_features", [None, 2], ids=["1d", "2d"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", OPS)
def test_scatter_reduce_cuda(rng, op, dtype, num_features):
    index = rng.integers(0, 6, 24)  # segments 6, 7 untouched
    index[:10] = 3  # a hub segment
    shape = (len(index),) if num_features is None else (len(index), num_features)
    values = rng.standard_normal(shape).astype(dtype)

    out, counts = scatter_reduce(cuda.to_device(index), cuda.to_device(values), 8, op)

    ref_out, ref_counts = _scatter_reduce(index, values, 8, op)
    assert_close(out, ref_out, dtype)
    np.testing.assert_array_equal(counts.copy_to_host(), ref_counts)


@pytest.mark.parametrize("num_heads", [None, 2], ids=["1d", "2d"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_segment_softmax_cuda(rng, dtype, num_heads):
    indptr, _ = tiny_csr(rng)
    shape = (int(indptr[-1]),) if num_heads is None else (int(indptr[-1]), num_heads)
    logits = (rng.standard_normal(shape) * 30).astype(dtype)

    out = segment_softmax(cuda.to_device(indptr), cuda.to_device(logits))

    assert_close(out, _segment_softmax(indptr, logits), dtype)


def test_mixed_host_and_device_arrays_are_rejected(rng):
    indptr, indices = tiny_csr(rng)
    x = rng.standard_normal(NUM_COLS)
    with pytest.raises(ValueError, match="arrays indices, indptr are on the GPU but x is on the host"):
        gather_reduce(cuda.to_device(indptr), cuda.to_device(indices), x, "sum")


def test_device_weights_must_match_x_dtype(rng):
    indptr, indices = tiny_csr(rng)
    x = rng.standard_normal(NUM_COLS).astype(np.float32)
    weights = np.ones(len(indices))  # float64: no implicit device-side cast
    with pytest.raises(ValueError, match="device weights must have x's dtype float32"):
        gather_reduce(cuda.to_device(indptr), cuda.to_device(indices), cuda.to_device(x), "sum",
                      cuda.to_device(weights))
