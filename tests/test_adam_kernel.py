"""The one-pass Adam kernel on chosen rows (``kernels.adam``) against its torch twin and torch.optim.Adam."""
import numpy as np
import pytest
import torch

from kernels.adam import _adam_rows, adam_rows

BETAS, EPS = (0.9, 0.999), 1e-15


def state(g, tail, seed):
    """A parameter [g, *tail] and warm moments (second moment >= 0), float32."""
    gen = torch.Generator().manual_seed(seed)
    shape = (g,) + tail
    return [torch.randn(shape, generator=gen), 0.1 * torch.randn(shape, generator=gen),
            0.01 * torch.rand(shape, generator=gen)]


def row_constants(rows, seed):
    """Each row's step size and sqrt(1 - beta2^t) at its own step count t in 1..50, as VisibleAdam makes them."""
    t = torch.randint(1, 50, (len(rows),), generator=torch.Generator().manual_seed(seed)).to(torch.float64)
    return (1e-2 / (1 - BETAS[0] ** t)).to(torch.float32), torch.sqrt(1 - BETAS[1] ** t).to(torch.float32)


@pytest.mark.parametrize("tail", [(), (3,), (15, 3), (0, 3)])
def test_kernel_matches_its_torch_twin_and_leaves_other_rows(tail):
    g = 2000
    rows = torch.nonzero(torch.rand(g, generator=torch.Generator().manual_seed(1)) < 0.4).squeeze(1)
    grads = torch.randn((len(rows),) + tail, generator=torch.Generator().manual_seed(2))
    grads[::7] = 0.0
    size, bias2 = row_constants(rows, 3)
    mine, twin, start = state(g, tail, 4), state(g, tail, 4), state(g, tail, 4)
    adam_rows(*mine, rows, grads, size, bias2, *BETAS, EPS)
    _adam_rows(*twin, rows, grads, size, bias2, *BETAS, EPS)
    others = torch.ones(g, dtype=torch.bool)
    others[rows] = False
    for now, ref, old in zip(mine, twin, start):
        assert torch.equal(now[others], old[others])  # untouched, bit for bit
        assert not torch.equal(now[rows], old[rows]) or now.numel() == 0  # (SH of degree 0: [G, 0, 3])
    torch.testing.assert_close(mine[1], twin[1], rtol=1e-6, atol=1e-9)
    torch.testing.assert_close(mine[2], twin[2], rtol=1e-6, atol=1e-12)
    torch.testing.assert_close(mine[0], twin[0], rtol=1e-6, atol=1e-8)


def test_gradient_rows_picked_in_place_equal_the_gathered_rows():
    g, tail = 500, (4,)
    rows = torch.arange(3, g, 5)
    every = torch.randn((g,) + tail, generator=torch.Generator().manual_seed(5))
    picked = torch.arange(0, g, 5)[:len(rows)].flip(0)
    size, bias2 = row_constants(rows, 6)
    a, b = state(g, tail, 7), state(g, tail, 7)
    adam_rows(*a, rows, every, size, bias2, *BETAS, EPS, grad_rows=picked)
    adam_rows(*b, rows, every[picked].clone(), size, bias2, *BETAS, EPS)
    for x, y in zip(a, b):
        assert torch.equal(x, y)


def test_non_contiguous_state_runs_the_twin_and_agrees():
    g = 300
    rows = torch.arange(0, g, 2)
    grads = torch.randn(len(rows), 3, generator=torch.Generator().manual_seed(8))
    size, bias2 = row_constants(rows, 9)
    wide = [t.repeat(1, 2) for t in state(g, (3,), 10)]
    strided = [t[:, ::2] for t in wide]  # views, every other column
    dense = [t.contiguous() for t in strided]
    adam_rows(*strided, rows, grads, size, bias2, *BETAS, EPS)
    adam_rows(*dense, rows, grads, size, bias2, *BETAS, EPS)
    for x, y in zip(strided, dense):
        torch.testing.assert_close(x, y, rtol=1e-6, atol=1e-8)


def test_repeated_steps_follow_torch_adam():
    """Oracle: torch.optim.Adam (foreach=False) on the same rows, twelve steps with fresh gradients."""
    g, tail, lr = 64, (3,), 1e-2
    start = torch.randn((g,) + tail, generator=torch.Generator().manual_seed(11))
    param, m, v = start.clone(), torch.zeros_like(start), torch.zeros_like(start)
    oracle = start.clone().requires_grad_(True)
    opt = torch.optim.Adam([oracle], lr=lr, betas=BETAS, eps=EPS, foreach=False)
    rows = torch.arange(g)
    gen = torch.Generator().manual_seed(12)
    for t in range(1, 13):
        grad = torch.randn((g,) + tail, generator=gen)
        oracle.grad = grad.clone()
        opt.step()
        size = torch.full((g,), lr / (1 - BETAS[0] ** t), dtype=torch.float64).to(torch.float32)
        bias2 = torch.full((g,), np.sqrt(1 - BETAS[1] ** t)).to(torch.float32)
        adam_rows(param, m, v, rows, grad, size, bias2, *BETAS, EPS)
    st = opt.state[oracle]
    torch.testing.assert_close(m, st["exp_avg"], rtol=1e-6, atol=1e-9)
    torch.testing.assert_close(v, st["exp_avg_sq"], rtol=1e-6, atol=1e-12)
    torch.testing.assert_close(param, oracle.detach(), rtol=1e-6, atol=1e-7)


def test_bad_gradient_shapes_are_refused():
    param, m, v = state(10, (3,), 13)
    rows = torch.arange(4)
    size, bias2 = row_constants(rows, 14)
    with pytest.raises(ValueError, match=r"grads: expected shape \(4, 3\), got \(4, 2\)"):
        adam_rows(param, m, v, rows, torch.zeros(4, 2), size, bias2, *BETAS, EPS)
    with pytest.raises(ValueError, match=r"got \(5, 3\)"):
        adam_rows(param, m, v, rows, torch.zeros(5, 3), size, bias2, *BETAS, EPS)
    with pytest.raises(ValueError, match="with 3 grad_rows"):
        adam_rows(param, m, v, rows, torch.zeros(9, 3), size, bias2, *BETAS, EPS, grad_rows=torch.arange(3))
