"""Visible Adam: invisible Gaussians unchanged bit for bit; visible ones follow torch.optim.Adam."""
import pytest
import torch

from odin_sched.training.optim import VisibleAdam, default_lrs

SHAPES = {"means": (3,), "scales": (3,), "quats": (4,), "opacities": (), "sh0": (1, 3), "shN": (15, 3)}


def make_params(g, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return {name: torch.randn((g,) + tail, generator=gen) for name, tail in SHAPES.items()}


def fake_grads(g, step):
    gen = torch.Generator().manual_seed(100 + step)
    return {name: torch.randn((g,) + tail, generator=gen) for name, tail in SHAPES.items()}


def test_invisible_gaussians_are_bit_for_bit_unchanged():
    g = 50
    opt = VisibleAdam(make_params(g), default_lrs(3.0))
    # warm every Gaussian up so that moments are non-zero
    for step in range(3):
        for name, grad in fake_grads(g, step).items():
            opt.params[name].grad = grad
        opt.step(torch.ones(g, dtype=torch.bool))
    before = {k: (opt.params[k].detach().clone(), opt.exp_avg[k].clone(), opt.exp_avg_sq[k].clone())
              for k in SHAPES}
    steps_before = opt.step_count.clone()
    visible = torch.zeros(g, dtype=torch.bool)
    visible[::3] = True
    for name, grad in fake_grads(g, 7).items():
        opt.params[name].grad = grad  # invisible rows get (non-zero) gradients too; they must be ignored
    opt.step(visible)
    for k in SHAPES:
        for now, old in zip((opt.params[k].detach(), opt.exp_avg[k], opt.exp_avg_sq[k]), before[k]):
            assert torch.equal(now[~visible], old[~visible])  # bitwise
            assert not torch.equal(now[visible], old[visible])
    assert torch.equal(opt.step_count[~visible], steps_before[~visible])
    assert torch.equal(opt.step_count[visible], steps_before[visible] + 1)


def test_visible_gaussians_follow_torch_adam_per_gaussian():
    """Oracle: torch.optim.Adam over one parameter tensor per Gaussian; invisible ones get grad None."""
    g, steps = 7, 12
    init = make_params(g, seed=3)
    lrs = default_lrs(2.0)
    opt = VisibleAdam(init, lrs)
    oracle_params = {k: [v[i].clone().requires_grad_(True) for i in range(g)] for k, v in init.items()}
    oracle = torch.optim.Adam([{"params": oracle_params[k], "lr": lrs[k]} for k in SHAPES], eps=1e-15,
                              foreach=False)
    gen = torch.Generator().manual_seed(9)
    for step in range(steps):
        visible = torch.rand(g, generator=gen) < 0.6
        grads = fake_grads(g, step)
        for k in SHAPES:
            opt.params[k].grad = grads[k]
            for i in range(g):
                oracle_params[k][i].grad = grads[k][i].clone() if visible[i] else None
        opt.step(visible)
        oracle.step()
    for k in SHAPES:
        expected = torch.stack([p.detach() for p in oracle_params[k]])
        torch.testing.assert_close(opt.params[k].detach(), expected, rtol=1e-5, atol=1e-7)
        states = [oracle.state[p] for p in oracle_params[k]]
        for i, st in enumerate(states):
            if st:
                torch.testing.assert_close(opt.exp_avg[k][i], st["exp_avg"], rtol=1e-6, atol=1e-9)
                torch.testing.assert_close(opt.exp_avg_sq[k][i], st["exp_avg_sq"], rtol=1e-6, atol=1e-12)
                assert opt.step_count[i].item() == int(st["step"])
            else:
                assert opt.step_count[i].item() == 0


def test_replace_carries_state_and_zeroes_new_rows():
    g = 5
    opt = VisibleAdam(make_params(g), default_lrs(1.0))
    assert opt.ids.tolist() == [0, 1, 2, 3, 4]
    for name, grad in fake_grads(g, 0).items():
        opt.params[name].grad = grad
    opt.step(torch.ones(g, dtype=torch.bool))
    old_m = opt.exp_avg["means"].clone()
    source = torch.tensor([4, -1, 0, 2, -1])
    new = make_params(5, seed=8)
    opt.replace(new, source, None, torch.tensor([4, 9, 0, 2, 7]))
    assert opt.ids.tolist() == [4, 9, 0, 2, 7]
    assert torch.equal(opt.exp_avg["means"][0], old_m[4])
    assert torch.equal(opt.exp_avg["means"][3], old_m[2])
    assert torch.all(opt.exp_avg["means"][[1, 4]] == 0)
    assert opt.step_count.tolist() == [1, 0, 1, 1, 0]
    assert torch.equal(opt.params["shN"].detach(), new["shN"])
    assert opt.params["shN"].requires_grad


def test_bad_visible_mask_is_rejected():
    opt = VisibleAdam(make_params(4), default_lrs(1.0))
    with pytest.raises(ValueError, match="visible"):
        opt.step(torch.ones(3, dtype=torch.bool))


def test_without_a_copy_the_given_tensors_are_trained_the_same():
    g = 40
    given = make_params(g, seed=3)
    copied, own = VisibleAdam(make_params(g, seed=3), default_lrs(2.0)), VisibleAdam(given, default_lrs(2.0), copy=False)
    start = {k: v.clone() for k, v in given.items()}
    for step in range(3):
        visible = torch.arange(g) % (step + 2) == 0
        for opt in (copied, own):
            for name, grad in fake_grads(g, step).items():
                opt.params[name].grad = grad
            opt.step(visible)
    for k in SHAPES:
        assert own.params[k].data_ptr() == given[k].data_ptr()  # trained in place, no second copy
        assert torch.equal(given[k], own.params[k].detach()) and not torch.equal(given[k], start[k])
        assert torch.equal(own.params[k], copied.params[k]) and torch.equal(own.exp_avg_sq[k], copied.exp_avg_sq[k])
