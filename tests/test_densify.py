"""Clone / split / prune counts, split geometry, optimizer state resized consistently."""
import math

import torch

from odin_sched.training.densify import DensifyConfig, GradAccumulator, densify_and_prune, screen_grad_norm
from odin_sched.training.optim import VisibleAdam, default_lrs


def params_for(scales, opacities):
    g = len(scales)
    return {
        "means": torch.arange(g * 3, dtype=torch.float32).reshape(g, 3),
        "scales": torch.log(torch.tensor(scales, dtype=torch.float32))[:, None].repeat(1, 3),
        "quats": torch.tensor([[1.0, 0, 0, 0]]).repeat(g, 1),
        "opacities": torch.logit(torch.tensor(opacities, dtype=torch.float32)),
        "sh0": torch.rand(g, 1, 3),
        "shN": torch.rand(g, 15, 3),
    }


def test_clone_split_prune_counts_and_state():
    extent = 10.0  # percent_dense * extent = 0.1
    #            small/hot  large/hot  small/cold  transparent/cold  large/cold
    params = params_for([0.05, 0.5, 0.05, 0.05, 0.5], [0.5, 0.5, 0.5, 0.001, 0.5])
    grad = torch.tensor([1e-3, 1e-3, 1e-5, 1e-5, 1e-5])
    cfg = DensifyConfig()
    new, source = densify_and_prune(params, grad, extent, cfg, torch.Generator().manual_seed(0))
    # kept: 0, 2, 4 (1 is split away, 3 pruned), + clone of 0, + two children of 1
    assert source.tolist() == [0, 2, 4, -1, -1, -1]
    assert all(v.shape[0] == 6 for v in new.values())
    assert torch.equal(new["means"][3], params["means"][0])  # clone is an exact copy
    children = new["scales"][4:]
    torch.testing.assert_close(torch.exp(children), torch.full((2, 3), 0.5 / 1.6))
    # children are sampled around the parent within a few of its standard deviations
    assert torch.all((new["means"][4:] - params["means"][1]).abs() < 4 * 0.5)
    assert not torch.equal(new["means"][4], new["means"][5])
    for name in ("sh0", "shN"):  # clones and split children carry their parent's SH coefficients
        assert torch.equal(new[name][:3], params[name][[0, 2, 4]]) and torch.equal(new[name][3], params[name][0])
        assert torch.equal(new[name][4:], params[name][[1, 1]])

    opt = VisibleAdam(params, default_lrs(extent))
    for p in opt.params.values():
        p.grad = torch.ones_like(p)
    opt.step(torch.ones(5, dtype=torch.bool))
    m_before = opt.exp_avg["scales"].clone()
    opt.replace(new, source)
    assert opt.num_gaussians == 6
    for name in opt.params:
        assert opt.exp_avg[name].shape == opt.params[name].shape == opt.exp_avg_sq[name].shape
    assert torch.equal(opt.exp_avg["scales"][:3], m_before[[0, 2, 4]])
    assert torch.all(opt.exp_avg["scales"][3:] == 0)
    assert opt.step_count.tolist() == [1, 1, 1, 0, 0, 0]


def test_schedule():
    cfg = DensifyConfig(interval=100, start=200, stop=500)
    assert [s for s in range(1, 700) if cfg.due(s)] == [200, 300, 400]


def test_accumulator_averages_over_visible_steps():
    acc = GradAccumulator(3)
    acc.add(torch.tensor([1.0, 2.0, 3.0]), torch.tensor([True, True, False]))
    acc.add(torch.tensor([3.0, 5.0, 7.0]), torch.tensor([True, False, False]))
    assert acc.average().tolist() == [2.0, 2.0, 0.0]


def test_screen_grad_matches_autograd_through_projection():
    """Oracle: autograd of the pinhole projection u = fx x/z + cx with respect to the pixel position."""
    torch.manual_seed(0)
    g, w, h = 6, 64, 48
    means = torch.randn(g, 3) + torch.tensor([0.0, 0.0, 6.0])
    K = torch.tensor([[50.0, 0, 32], [0, 55.0, 24], [0, 0, 1]])
    angle = 0.3
    viewmat = torch.eye(4)
    viewmat[:3, :3] = torch.tensor([[math.cos(angle), 0, math.sin(angle)], [0, 1, 0],
                                    [-math.sin(angle), 0, math.cos(angle)]])
    viewmat[:3, 3] = torch.tensor([0.2, -0.1, 0.5])
    m = means.clone().requires_grad_(True)
    cam = m @ viewmat[:3, :3].T + viewmat[:3, 3]
    uv = torch.stack([K[0, 0] * cam[:, 0] / cam[:, 2] + K[0, 2], K[1, 1] * cam[:, 1] / cam[:, 2] + K[1, 2]], 1)
    # a loss that depends on the 2D positions only, in NDC units
    ndc = torch.stack([uv[:, 0] * 2 / w, uv[:, 1] * 2 / h], 1)
    weights = torch.randn(g, 2)
    (ndc * weights).sum().backward()
    got = screen_grad_norm(means, m.grad, viewmat, K, w, h)
    # d loss / d ndc = weights; x (y) enters only u (v), through fx x / z, so the recovery is exact
    torch.testing.assert_close(got, weights.norm(dim=1), rtol=1e-4, atol=0.0)
