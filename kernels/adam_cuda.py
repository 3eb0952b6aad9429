"""The CUDA version of ``kernels.adam``'s one-pass Adam on chosen rows: one thread per number of a stepped row,
with the CPU kernel's arithmetic (float32 with correctly rounded division and square root, the moments'
multiply-adds as float64 sums of exact products), so the two give the same numbers. Imported only for
CUDA tensors, so that CPU runs never load ``numba.cuda``."""

import math

import numpy as np
from numba import cuda, float32, float64

from kernels._device import SIMULATED, across, blocks_for

THREADS_PER_BLOCK = 256


@cuda.jit
def _adam_rows_cuda(param, exp_avg, exp_avg_sq, rows, grads, grad_rows, step_size, bias2_sqrt, weight, beta2, fresh,
                    eps):
    # param, exp_avg, exp_avg_sq [G, C] float32 (updated in place); rows [k] int64; grads [n, C] float32;
    # grad_rows [k] int64; step_size, bias2_sqrt [k] float32; weight = 1 - beta1, beta2, fresh = 1 - beta2, eps
    columns = param.shape[1]
    e = cuda.grid(1)
    if e >= rows.shape[0] * columns:
        return
    i = e // columns
    c = e - i * columns
    r, q = rows[i], grad_rows[i]
    g = grads[q, c]
    m0 = exp_avg[r, c]
    m = float32(float64(m0) + float64(weight) * float64(float32(g - m0)))
    v = float32(float64(float32(exp_avg_sq[r, c] * beta2)) + float64(float32(fresh * g)) * float64(g))
    exp_avg[r, c] = m
    exp_avg_sq[r, c] = v
    param[r, c] = param[r, c] - step_size[i] * m / (math.sqrt(v) / bias2_sqrt[i] + eps)


def adam_rows_cuda(param, exp_avg, exp_avg_sq, rows, grads, grad_rows, step_size, bias2_sqrt, beta1: float,
                   beta2: float, eps: float) -> None:
    """``kernels.adam.adam_rows`` on CUDA tensors (contiguous ``param`` [G, C] and moments viewed as rows of C
    numbers, ``grads`` [n, C], ``rows`` and ``grad_rows`` [k] int64, ``step_size`` and ``bias2_sqrt`` [k]
    float32), in place. Under Numba's simulator the tensors are CPU tensors, copied to its device arrays and
    the three updated ones copied back."""
    count = rows.shape[0] * param.shape[1]
    if count == 0:
        return
    state = [across(t) for t in (param, exp_avg, exp_avg_sq)]
    inputs = [across(t) for t in (rows, grads, grad_rows, step_size, bias2_sqrt)]
    _adam_rows_cuda[blocks_for(count, THREADS_PER_BLOCK), THREADS_PER_BLOCK](
        *state, *inputs, np.float32(1.0 - beta1), np.float32(beta2), np.float32(1.0 - beta2), np.float32(eps))
    if SIMULATED:
        for tensor, array in zip((param, exp_avg, exp_avg_sq), state):
            tensor.copy_(across(array))
