"""Adam on chosen rows of a parameter, in one pass and in place: the optimizer step of Gaussian training.

Row ``rows[i]`` of the parameter and of its two moments is updated from gradient row ``grads[i]`` with
torch's Adam formula (``torch.optim.Adam``, ``foreach=False``: epsilon added after dividing the root of
the second moment by its bias correction)::

    m = lerp(m, g, 1 - beta1);  v = beta2 v + (1 - beta2) g g
    p = p - step_size[i] m / (sqrt(v) / bias2_sqrt[i] + eps)

with each row's ``step_size`` (the learning rate over the first moment's bias correction) and
``bias2_sqrt`` given, since rows may be at different steps. The torch expression this replaces (about
fifteen passes, each a new array of the rows: 2.9 s and 2.1 GB above the model a step for 2,000,000
Gaussians with SH degree 3, ``benchmarks/adam.py``) is the reference twin ``_adam_rows``; the CUDA version
is in ``kernels.adam_cuda``. Every row is updated independently of the others, so updating some rows gives
bit for bit what updating them among more does.
"""

import numpy as np
import torch
from numba import njit, prange


@njit(parallel=True, cache=True)
def _adam_rows_cpu(
    param,  # [G, C] float32, updated in place
    exp_avg,  # [G, C] float32, updated in place
    exp_avg_sq,  # [G, C] float32, updated in place
    rows,  # [k] int64, distinct rows of the above
    grads,  # [n, C] float32, gradient rows
    grad_rows,  # [k] int64: row i's gradient is grads[grad_rows[i]]
    step_size,  # [k] float32
    bias2_sqrt,  # [k] float32
    weight,  # float32, 1 - beta1: lerp's weight (below 0.5: start + weight (end - start), as torch's)
    beta2,  # float32, exp_avg_sq's decay
    fresh,  # float32, 1 - beta2 (rounded from float64, as torch's scalar is: not 1 - float32(beta2))
    eps,  # float32
):
    for i in prange(rows.shape[0]):
        r, q = rows[i], grad_rows[i]
        size, correction = step_size[i], bias2_sqrt[i]
        for c in range(param.shape[1]):
            g = grads[q, c]
            # torch's vectorised CPU lerp and addcmul end in a fused multiply-add (one rounding); a float64 sum
            # of an exact float64 product, rounded to float32, gives the same numbers (but for double
            # rounding, about once in 2^29)
            m = np.float32(exp_avg[r, c] + np.float64(weight) * np.float64(g - exp_avg[r, c]))
            v = np.float32(np.float64(exp_avg_sq[r, c] * beta2) + np.float64(fresh * g) * np.float64(g))
            exp_avg[r, c] = m
            exp_avg_sq[r, c] = v
            param[r, c] = param[r, c] - size * m / (np.sqrt(v) / correction + eps)


def _adam_rows(param, exp_avg, exp_avg_sq, rows, grads, step_size, bias2_sqrt, beta1, beta2, eps,
               grad_rows=None) -> None:
    """Torch reference twin of :func:`adam_rows` (same arguments, any device; ``step_size`` and
    ``bias2_sqrt`` broadcast against the rows)."""
    if grad_rows is not None:
        grads = grads.index_select(0, grad_rows)
    shape = (-1,) + (1,) * (grads.dim() - 1)
    m = torch.lerp(exp_avg.index_select(0, rows), grads, 1.0 - beta1)
    v = exp_avg_sq.index_select(0, rows).mul_(beta2).addcmul_(grads, grads, value=1.0 - beta2)
    denom = v.sqrt() / bias2_sqrt.view(shape) + eps
    exp_avg.index_copy_(0, rows, m)
    exp_avg_sq.index_copy_(0, rows, v)
    param.index_copy_(0, rows, param.index_select(0, rows) - step_size.view(shape) * m / denom)


def adam_rows(param: torch.Tensor, exp_avg: torch.Tensor, exp_avg_sq: torch.Tensor, rows: torch.Tensor,
              grads: torch.Tensor, step_size: torch.Tensor, bias2_sqrt: torch.Tensor, beta1: float, beta2: float,
              eps: float, grad_rows: torch.Tensor | None = None) -> None:
    """One Adam step, in place, on rows ``rows`` of ``param`` and its moments.

    param, exp_avg, exp_avg_sq: [G, ...] float32 tensors on one device (``param`` may require grad; it
    is written through its data)
    rows: [k] int64, distinct, each in [0, G)
    grads: [k, ...] float32, the gradient of each row (the trailing shape of ``param``); with ``grad_rows``
    [k] int64, [n, ...] gradient rows of which row ``rows[i]`` takes ``grads[grad_rows[i]]`` (no copy of
    the chosen rows is made)
    step_size, bias2_sqrt: [k] float32, each row's learning rate over 1 - beta1^t and sqrt(1 - beta2^t)
    beta1, beta2, eps: Adam's constants
    CPU tensors run the Numba kernel, CUDA tensors its CUDA version (``kernels.adam_cuda``; contiguous
    ``param`` and moments are updated where they lie, with the same numbers on both); others, and state
    that is not contiguous, run the torch twin.
    """
    picked = rows.shape[0] if grad_rows is None else grad_rows.shape[0]
    if grads.shape[1:] != param.shape[1:] or picked != rows.shape[0] or (grad_rows is None
                                                                          and grads.shape[0] != picked):
        raise ValueError(f"grads: expected shape {(rows.shape[0],) + tuple(param.shape[1:])}, got "
                         f"{tuple(grads.shape)}" + ("" if grad_rows is None else f" with {picked} grad_rows"))
    if param.device.type not in ("cpu", "cuda") or not all(t.is_contiguous() for t in (param, exp_avg, exp_avg_sq)):
        _adam_rows(param.detach(), exp_avg, exp_avg_sq, rows, grads, step_size, bias2_sqrt, beta1, beta2, eps,
                   grad_rows)
        return
    columns = int(np.prod(param.shape[1:], dtype=np.int64))
    if columns == 0:  # rows of no numbers (SH of degree 0 has no higher coefficients): nothing to step
        return
    state = [t.detach().view(-1, columns) for t in (param, exp_avg, exp_avg_sq)]
    grads = grads.detach().reshape(-1, columns)
    grad_rows = torch.arange(picked, device=rows.device) if grad_rows is None else grad_rows
    if param.device.type == "cuda":
        from kernels.adam_cuda import adam_rows_cuda

        adam_rows_cuda(*state, rows, grads, grad_rows, step_size, bias2_sqrt, beta1, beta2, eps)
        return
    _adam_rows_cpu(*(t.numpy() for t in state), rows.numpy(), grads.numpy(), grad_rows.numpy(), step_size.numpy(),
                   bias2_sqrt.numpy(), np.float32(1.0 - beta1), np.float32(beta2), np.float32(1.0 - beta2),
                   np.float32(eps))
