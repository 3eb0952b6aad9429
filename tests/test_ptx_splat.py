"""Every splatting CUDA kernel compiles to PTX for compute capability 9.0 (no GPU needed).

The kernels call ``@njit`` scalar helpers, which numba-cuda compiles as device functions for the
current device's compute capability; with no GPU here, the test reports cc 9.0 for that lookup.
"""

import types

import pytest
from numba import cuda
from numba import types as nt

import numba.cuda.dispatcher
from kernels.splat import cuda_kernels

F1, F2, F3 = nt.float32[:], nt.float32[:, :], nt.float32[:, :, :]
I1, I2 = nt.int32[:], nt.int32[:, :]
VIEW, INTR, RGB = nt.UniTuple(nt.float64, 12), nt.UniTuple(nt.float64, 4), nt.UniTuple(nt.float64, 3)
CAMPOS = RGB
SIZE = nt.int64

KERNELS = {
    "project": (cuda_kernels.project_cuda, (F2, F2, F2, VIEW, INTR, SIZE, SIZE, F2, F2, F1, I1)),
    "project_backward": (
        cuda_kernels.project_backward_cuda, (F2, F2, F2, VIEW, INTR, SIZE, SIZE, I1, F2, F2, F2, F2, F2)),
    "rasterize_forward": (
        cuda_kernels.rasterize_forward_cuda, (I1, I1, F2, F2, F1, F2, RGB, SIZE, SIZE, F3, F2, I2)),
    "rasterize_backward": (
        cuda_kernels.rasterize_backward_cuda,
        (I1, I1, F2, F2, F1, F2, RGB, SIZE, SIZE, F2, I2, F3, F2, F2, F1, F2)),
    "sh_to_colors": (cuda_kernels.sh_to_colors_cuda, (F2, F3, CAMPOS, SIZE, F2)),
    "sh_to_colors_backward": (cuda_kernels.sh_to_colors_backward_cuda, (F2, F3, CAMPOS, SIZE, F2, F2, F3)),
}


@pytest.fixture
def cc90_device(monkeypatch):
    monkeypatch.setattr(numba.cuda.dispatcher, "get_current_device",
                        lambda: types.SimpleNamespace(compute_capability=(9, 0)))


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_kernel_compiles_to_ptx_for_sm90(name, cc90_device):
    kernel, signature = KERNELS[name]
    ptx, resty = cuda.compile_ptx(kernel.py_func, signature, cc=(9, 0))
    assert resty == nt.void
    assert ".target sm_90" in ptx and ".entry" in ptx
