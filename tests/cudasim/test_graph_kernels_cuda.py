"""Graph kernels, CUDA versions (run under NUMBA_ENABLE_CUDASIM=1): device inputs through the public
dispatch functions, compared with the NumPy reference twins on tiny inputs with an empty row, a
single-edge row and a hub row.
"""
import numpy as np
import pytest
from numba import cuda

from kernels._device import is_device_array
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
