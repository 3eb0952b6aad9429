"""Clone / split / prune counts, split geometry, optimizer state resized consistently."""
import math

import torch

from odin_sched.training.densify import (GradAccumulator, densify_and_prune, densify_round, most_opaque,
                                         reset_opacity, screen_grad_norm)
from odin_sched.training.densify_schedule import DensifyConfig
from odin_sched.training.optim import VisibleAdam, default_lrs

SHAPES = ("means", "scales", "quats", "opacities", "sh0", "shN")


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
    new, source, fresh, ids = densify_and_prune(params, torch.arange(5), grad, extent, cfg, 0, 7)
    # kept: 2, 4 and 0 (1 is split away, 3 pruned), + clone of 0, + two children of 1, in ascending id
    assert source.tolist() == [2, 4, 0, 0, 1, 1]
    # ids: depth 1 in the top bits, value 2 x parent + child below (0 renamed child 0, its clone child 1)
    depth1 = 1 << 57
    assert ids.tolist() == [2, 4, depth1 + 0, depth1 + 1, depth1 + 2, depth1 + 3]
    assert fresh.tolist() == [False, False, False, True, True, True]
    assert all(v.shape[0] == 6 for v in new.values())
    assert torch.equal(new["means"][3], params["means"][0])  # clone is an exact copy
    children = new["scales"][4:]
    torch.testing.assert_close(torch.exp(children), torch.full((2, 3), 0.5 / 1.6))
    # children are sampled around the parent within a few of its standard deviations
    assert torch.all((new["means"][4:] - params["means"][1]).abs() < 4 * 0.5)
    assert not torch.equal(new["means"][4], new["means"][5])
    for name in ("sh0", "shN"):  # clones and split children carry their parent's SH coefficients
        assert torch.equal(new[name][:3], params[name][[2, 4, 0]]) and torch.equal(new[name][3], params[name][0])
        assert torch.equal(new[name][4:], params[name][[1, 1]])

    opt = VisibleAdam(params, default_lrs(extent))
    for p in opt.params.values():
        p.grad = torch.ones_like(p)
    opt.step(torch.ones(5, dtype=torch.bool))
    opt.step(torch.tensor([False, True, False, False, False]))  # Gaussian 1 has taken two steps
    m_before = opt.exp_avg["scales"].clone()
    opt.replace(new, source, fresh, ids)
    assert opt.num_gaussians == 6
    for name in opt.params:
        assert opt.exp_avg[name].shape == opt.params[name].shape == opt.exp_avg_sq[name].shape
    assert torch.equal(opt.exp_avg["scales"][:3], m_before[[2, 4, 0]])
    assert torch.all(opt.exp_avg["scales"][3:] == 0)
    # new Gaussians keep their parent's Adam step count (the reference's shared per-tensor step)
    assert opt.step_count.tolist() == [1, 1, 1, 1, 2, 2]


def grendel_update_at(iteration, bsz, interval):
    """Grendel-GS's check_update_at_this_iter(iteration, bsz, interval, 0), transcribed as the oracle."""
    left = iteration % interval
    return (left <= 0 < left + bsz) or (left <= interval < left + bsz)


def test_schedule_single_images_as_the_reference():
    # reference train.py: stats while iteration < until; round when iteration > from and % interval == 0
    cfg = DensifyConfig(interval=100, start=200, stop=500)
    assert [s for s in range(1, 700) if cfg.due(s, 700)] == [300, 400]
    # until 15,000 whatever the run's length, but never after the last step
    assert [s for s in range(1, 1501) if DensifyConfig().due(s, 1500)] == list(range(600, 1500, 100))
    assert [s for s in range(1, 30_001) if DensifyConfig().due(s, 30_000)][::50] == [600, 5600, 10600]
    assert max(s for s in range(1, 30_001) if DensifyConfig().due(s, 30_000)) == 14_900
    assert not DensifyConfig(stop=10_000).due(600, 600)  # never after the run's last step
    resets = [s for s in range(1, 30_001) if DensifyConfig().reset_due(s, 30_000)]
    assert resets == [3000, 6000, 9000, 12000]
    assert not DensifyConfig().prunes_large(3000) and DensifyConfig().prunes_large(3001)


def test_schedule_counts_images_as_grendel_for_batches():
    cfg, b, steps = DensifyConfig(), 4, 3000
    due = [s for s in range(1, steps + 1) if cfg.due(s, steps, b)]
    it = lambda s: (s - 1) * b + 1  # noqa: E731, Grendel-GS's iteration of batch s
    expected = [s for s in range(1, steps) if it(s) > 500 and it(s) < 15_000 and grendel_update_at(it(s), b, 100)]
    assert due == expected and due[0] == 150  # images 597..600
    resets = [s for s in range(1, steps + 1) if cfg.reset_due(s, steps, b)]
    assert resets == [s for s in range(1, steps) if it(s) < 15_000 and grendel_update_at(it(s), b, 3000)]
    assert resets == [750, 1500, 2250]


def test_accumulator_averages_over_visible_steps_and_tracks_largest_radius():
    acc = GradAccumulator(3)
    acc.add(torch.tensor([1.0, 2.0, 3.0]), torch.tensor([True, True, False]), torch.tensor([4, 9, 50]))
    acc.add(torch.tensor([3.0, 5.0, 7.0]), torch.tensor([True, False, False]), torch.tensor([7, 90, 50]))
    assert acc.average().tolist() == [2.0, 2.0, 0.0]
    assert acc.max_radii.tolist() == [7.0, 9.0, 0.0]


def test_prune_too_large_on_screen_or_in_world():
    extent = 10.0  # world limit 0.1 x extent = 1.0
    params = params_for([0.05, 0.05, 2.0, 0.05], [0.5, 0.5, 0.5, 0.5])
    grad = torch.zeros(4)
    radii = torch.tensor([5.0, 21.0, 3.0, 20.0])
    ids = torch.arange(4)
    new, source, _, kept = densify_and_prune(params, ids, grad, extent, DensifyConfig(), 0, 1, max_radii=radii)
    assert source.tolist() == [0, 3] and kept.tolist() == [0, 3]  # 1: 21 px > 20 on screen; 2: scale 2.0 > 1.0
    _, source, _, _ = densify_and_prune(params, ids, grad, extent, DensifyConfig(), 0, 1)
    assert source.tolist() == [0, 1, 2, 3]  # before the first reset: opacity pruning only


def test_a_round_that_prunes_everything_keeps_the_most_opaque_lowest_id():
    params = params_for([0.05, 0.05, 0.05, 0.05], [0.002, 0.004, 0.001, 0.004])  # all below 0.005
    ids = torch.tensor([9, 7, 2, 3])
    new, source, _, kept = densify_and_prune(params, ids, torch.zeros(4), 10.0, DensifyConfig(), 0, 1)
    assert kept.tolist() == [3] and source.tolist() == [3]  # 7 and 3 are the most opaque; 3 is the lower id
    alive = torch.tensor([False, True])
    assert most_opaque(torch.zeros(2), torch.tensor([4, 1]), alive) is alive  # someone survives: unchanged
    assert most_opaque(torch.zeros(0), torch.zeros(0, dtype=torch.int64), torch.zeros(0, dtype=torch.bool)).numel() == 0


def test_opacity_reset_as_the_reference():
    params = params_for([0.05, 0.05, 0.05], [0.5, 0.005, 0.9])
    opt = VisibleAdam(params, default_lrs(1.0))
    for p in opt.params.values():
        p.grad = torch.ones_like(p)
    opt.step(torch.ones(3, dtype=torch.bool))
    means_m, before = opt.exp_avg["means"].clone(), opt.params["opacities"].detach().clone()
    reset_opacity(opt)
    # reference: inverse_sigmoid(min(sigmoid(o), 0.01)), Adam moments of the opacity zeroed, step kept
    expected = torch.logit(torch.clamp(torch.sigmoid(before), max=0.01))
    torch.testing.assert_close(opt.params["opacities"].detach(), expected)
    assert torch.all(opt.exp_avg["opacities"] == 0) and torch.all(opt.exp_avg_sq["opacities"] == 0)
    assert torch.equal(opt.exp_avg["means"], means_m) and opt.step_count.tolist() == [1, 1, 1]


def test_round_densifies_then_resets_when_both_are_due():
    params = params_for([0.05, 0.5], [0.5, 0.5])
    opt = VisibleAdam(params, default_lrs(10.0))
    acc = GradAccumulator(2)
    acc.add(torch.tensor([1e-3, 1e-5]), torch.ones(2, dtype=torch.bool), torch.tensor([3, 3]))
    out = densify_round(opt, acc, 2999, 30_000, 1, 10.0, DensifyConfig(), 0)
    assert out is acc and opt.num_gaussians == 2  # nothing due at 2999
    out = densify_round(opt, acc, 3000, 30_000, 1, 10.0, DensifyConfig(), 0)
    assert opt.num_gaussians == 3 and out is not acc and out.count.tolist() == [0, 0, 0]
    assert opt.ids.tolist() == [1, (1 << 57) + 0, (1 << 57) + 1]  # 0 cloned into its two children, by id
    assert torch.all(torch.sigmoid(opt.params["opacities"]) <= 0.01 + 1e-7)


def test_round_installs_the_new_rows_without_a_second_copy(monkeypatch):
    """A round holds one copy of the new model, not two (at 2,000,000 Gaussians a copy is 0.7 GB): the
    optimizer trains the tensors densify_and_prune made, and the state equals replacing with a copy."""
    import copy

    import odin_sched.training.densify as densify

    params = params_for([0.05, 0.5, 0.02, 0.3], [0.5, 0.5, 0.001, 0.9])
    opt = VisibleAdam(params, default_lrs(10.0))
    for name, p in opt.params.items():
        p.grad = torch.rand_like(p)
    opt.step(torch.ones(4, dtype=torch.bool))
    acc = GradAccumulator(4)
    acc.add(torch.tensor([1e-3, 1e-3, 1e-5, 1e-3]), torch.ones(4, dtype=torch.bool), torch.tensor([3, 3, 3, 3]))
    oracle = copy.deepcopy(opt)  # the copying replace, done by hand
    new, source, fresh, ids = densify_and_prune({k: p.detach() for k, p in oracle.params.items()}, oracle.ids,
                                                acc.average(), 10.0, DensifyConfig(), 0, 600)
    oracle.replace(new, source, fresh, ids)
    made = {}

    def recording(*args, **kwargs):
        result = densify_and_prune(*args, **kwargs)
        made.update(result[0])
        return result

    monkeypatch.setattr(densify, "densify_and_prune", recording)
    densify_round(opt, acc, 600, 30_000, 1, 10.0, DensifyConfig(), 0)
    assert opt.num_gaussians == oracle.num_gaussians == 6 and torch.equal(opt.ids, oracle.ids)
    for name in SHAPES:
        assert opt.params[name].data_ptr() == made[name].data_ptr(), name  # no second copy
        assert opt.params[name].requires_grad
        for mine, theirs in ((opt.params, oracle.params), (opt.exp_avg, oracle.exp_avg),
                             (opt.exp_avg_sq, oracle.exp_avg_sq)):
            assert torch.equal(mine[name], theirs[name]), name
    assert torch.equal(opt.step_count, oracle.step_count)


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
