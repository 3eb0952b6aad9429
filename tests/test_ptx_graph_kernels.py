"""Every CUDA graph kernel compiles to PTX for compute capability 9.0 (sm_90), for each argument
type combination the dispatch functions launch it with, so a kernel that would not build on a GPU
fails here (no GPU or simulator needed).
"""
import itertools

import pytest
from numba import cuda, types

from kernels import graph_cuda

FLOATS = [types.float32, types.float64]
INDEX = [types.int32, types.int64]
OP = types.int64  # the op code is a Python int


def vector(dtype):
    return types.Array(dtype, 1, "C")


def matrix(dtype):
    return types.Array(dtype, 2, "C")


def launch_signatures():
    """(kernel, signature) for every kernel launch of the dispatch functions in kernels.gather /
    scatter / segment_softmax (the kernels are in kernels.graph_cuda)."""
    queue = matrix(types.int64)  # leading slices of the reused scratch arrays: still C-contiguous
    counters = vector(types.int64)
    for indptr, indices, dtype in itertools.product(INDEX, INDEX, FLOATS):
        edge_args = (vector(indptr), vector(indices), matrix(dtype), vector(dtype), types.boolean, types.boolean,
                     OP)  # weighted, add
        yield graph_cuda._gather_short_rows_cuda, types.void(
            *edge_args, types.int64, queue, queue, counters, matrix(dtype))
        yield graph_cuda._gather_pieces_cuda, types.void(
            *edge_args, types.int64, types.int64, types.int64, queue, counters, matrix(dtype),
            matrix(dtype))
    for indptr, dtype in itertools.product(INDEX, FLOATS):
        yield graph_cuda._combine_pieces_cuda, types.void(
            vector(indptr), OP, types.int64, queue, counters, matrix(dtype), matrix(dtype))
    for dtype in FLOATS:
        yield graph_cuda._fill_cuda, types.void(matrix(dtype), types.float64)
        yield graph_cuda._finish_segments_cuda, types.void(OP, matrix(dtype), vector(types.int64))
        for index in INDEX:
            yield graph_cuda._scatter_reduce_cuda, types.void(
                vector(index), matrix(dtype), OP, matrix(dtype), vector(types.int64))
    yield graph_cuda._fill_cuda, types.void(matrix(types.int64), types.int64)  # the counts
    for indptr, dtype in itertools.product(INDEX, FLOATS):
        yield graph_cuda._segment_softmax_cuda, types.void(
            vector(indptr), matrix(dtype), matrix(dtype))


CASES = list(launch_signatures())


@pytest.mark.parametrize("kernel,signature", CASES,
                         ids=[f"{k.py_func.__name__}-{s}" for k, s in CASES])
def test_graph_kernel_compiles_to_ptx_for_sm90(kernel, signature):
    ptx, _ = cuda.compile_ptx(kernel.py_func, signature, cc=(9, 0))
    assert ".target sm_90" in ptx
    assert ".entry" in ptx
