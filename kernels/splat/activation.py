"""Opacity activation (the logistic sigmoid) as a kernel, so that each Gaussian's value does not
depend on where it sits in the array.

``torch.sigmoid`` on the CPU evaluates the body of an array with vector instructions and the tail
with scalar code, and the two round differently: a Gaussian's opacity would then depend on which
other Gaussians were rendered with it. The distributed trainer renders each image with only the
Gaussians of the cells it sees and must reproduce the single-process run bit for bit, so the
activation is computed one element at a time, the same way wherever the element is (Numba on the
CPU, one thread per Gaussian on CUDA). ``torch.sigmoid`` is its reference twin.
"""

import math

import numpy as np
import torch
from numba import njit

from kernels._device import blocks_for

from .arrays import check_array, empty, on_device

THREADS_PER_BLOCK = 256


@njit(cache=True)
def _sigmoid_cpu(x, out):  # x, out: [G] float32
    for g in range(x.shape[0]):
        out[g] = 1.0 / (1.0 + math.exp(-x[g]))


@njit(cache=True)
def _sigmoid_vjp_cpu(y, v_y, out):  # y = sigmoid(x), v_y = dL/dy, out = dL/dx: [G] float32
    for g in range(y.shape[0]):
        out[g] = v_y[g] * y[g] * (1.0 - y[g])


def _launch(cpu_kernel, cuda_name: str, arrays):
    """Run ``cpu_kernel`` on host arrays or the kernel ``cuda_name`` of ``cuda_kernels`` on device arrays."""
    count = arrays[0].shape[0]
    for i, array in enumerate(arrays):
        check_array(f"argument {i}", array, (count,), np.float32)
    device = on_device(arrays)
    out = empty((count,), np.float32, device)
    if count and device:
        from . import cuda_kernels

        getattr(cuda_kernels, cuda_name)[blocks_for(count, THREADS_PER_BLOCK), THREADS_PER_BLOCK](*arrays, out)
    elif count:
        cpu_kernel(*arrays, out)
    return out


def sigmoid(x):
    """Logistic sigmoid of ``x`` [G] float32 (NumPy: CPU kernel; device array: CUDA kernel)."""
    return _launch(_sigmoid_cpu, "sigmoid_cuda", (x,))


def sigmoid_vjp(y, v_y):
    """dL/dx of ``y = sigmoid(x)`` from y [G] and dL/dy [G] (float32): v_y * y * (1 - y)."""
    return _launch(_sigmoid_vjp_cpu, "sigmoid_vjp_cuda", (y, v_y))


def _sigmoid(x: torch.Tensor) -> torch.Tensor:
    """Reference twin: ``torch.sigmoid``."""
    return torch.sigmoid(x)
