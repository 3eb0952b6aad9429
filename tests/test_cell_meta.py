"""Cell metadata and planning from it.

Oracles: a brute-force loop over each cell's Gaussians for the metadata (box of the means, largest
scale, count); the plan made from the Gaussians themselves (``plan_window``) for the plan made from
metadata exchanged by owners (the same visibility and the same step graph, so the same conflicts); the
rasterizer's own visible mask for the prediction (every cell holding a rendered-visible Gaussian is
predicted, for every camera); a loop over every owner for the shards.
"""
import numpy as np
import pytest
import torch
from mpi4py import MPI

from kernels.splat import render
from odin_sched.odin.cell_meta import META_COLUMNS, bounds_of, exchange_metadata, grouped_metadata
from odin_sched.odin.planner import PlanConfig, plan_cells, plan_window
from odin_sched.odin.shard import FullState, Shard, owners_by_count
from odin_sched.scenes.cells import cell_members, kd_cells
from odin_sched.scenes.scene_gen import generate_scene
from odin_sched.scenes.visibility import Margin, predict_visible_cells
from odin_sched.training.densify import GradAccumulator
from odin_sched.training.optim import VisibleAdam, default_lrs
from pregel.comm import Comm

RANKS = 3


class GatheredComm:
    """What ``allgather_known`` returns on every rank of a job: every rank's rows in rank order (given)."""

    def __init__(self, parts):
        self.parts, self.size = parts, len(parts)

    def allgather_known(self, rows, counts):
        assert [len(p) for p in self.parts] == list(counts)  # the sizes every rank knows are the sizes sent
        return np.concatenate(self.parts)


def random_gaussians(g, seed):
    rng = np.random.default_rng(seed)
    means = (rng.normal(size=(g, 3)) * [5.0, 2.0, 1.0]).astype(np.float32)
    scales = rng.uniform(-4, 0, size=(g, 3)).astype(np.float32)
    return means, scales


def brute_force(means, scales, cell_of, k):
    """lo, hi [K, 3], max_sigma [K], count [K] by a loop over the cells."""
    lo, hi, sigma, count = np.zeros((k, 3)), np.zeros((k, 3)), np.zeros(k), np.zeros(k, np.int64)
    for c in range(k):
        rows = np.flatnonzero(cell_of == c)
        count[c] = len(rows)
        if len(rows):
            lo[c] = means[rows].astype(np.float64).min(axis=0)
            hi[c] = means[rows].astype(np.float64).max(axis=0)
            sigma[c] = np.exp(scales[rows].astype(np.float64)).max()
    return lo, hi, sigma, count


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_exchanged_metadata_equals_a_brute_force_pass(seed):
    g, k = 400, 9
    means, scales = random_gaussians(g, seed)
    rng = np.random.default_rng(seed + 10)
    cell_of = rng.integers(0, k - 1, size=g)  # the last cell stays empty
    owner = rng.permutation(np.arange(k) % RANKS)
    parts = []
    for rank in range(RANKS):
        mine = np.flatnonzero(owner[cell_of] == rank)
        mine = mine[np.argsort(cell_of[mine], kind="stable")]  # cell after cell, as a shard keeps them
        count = [np.count_nonzero(cell_of[mine] == c) for c in np.flatnonzero(owner == rank)]
        rows = grouped_metadata(means[mine], scales[mine], np.array(count))
        assert rows.shape == (np.count_nonzero(owner == rank), META_COLUMNS) and rows.dtype == np.float32
        parts.append(rows)
    bounds = exchange_metadata(GatheredComm(parts), parts[0], owner)
    lo, hi, sigma, count = brute_force(means, scales, cell_of, k)
    assert np.array_equal(bounds.count, count) and count[-1] == 0
    assert np.array_equal(bounds.lo, lo) and np.array_equal(bounds.hi, hi)
    assert np.allclose(bounds.max_sigma, sigma, rtol=1e-6, atol=0)  # exp in float64 of a float32 maximum


@pytest.fixture(scope="module")
def city():
    return generate_scene(1500, 16, 48, 36, seed=4, layout="city")


def shards_of(city, num_cells):
    """The RANKS shards of the city's Gaussians (zero optimizer state) and the full model."""
    params = {name: torch.from_numpy(np.asarray(getattr(city, name), np.float32))
              for name in ("means", "scales", "quats", "opacities")}
    opt = VisibleAdam(params, default_lrs(1.0))
    opt.step_count = torch.arange(opt.num_gaussians)  # distinct per Gaussian, to follow rows
    full = FullState(opt, GradAccumulator(opt.num_gaussians))
    full.accum.count = torch.arange(opt.num_gaussians) * 3
    return [Shard.from_full(r, RANKS, full, num_cells) for r in range(RANKS)], full


def test_metadata_after_cell_versions_moved_some_cells_equals_a_brute_force_pass(city):
    # cell versions change rows of some owned cells and say so (Shard.moved); the metadata recomputes
    # those cells and keeps the others, and must equal a brute-force pass over the parameters now
    shards, _ = shards_of(city, 10)
    rng = np.random.default_rng(7)
    for s in shards:
        s.metadata()
        for round_ in range(3):
            for cell in rng.choice(s.owned_cells, size=max(1, len(s.owned_cells) // 2), replace=False):
                rows = torch.from_numpy(s.local(s.cell_rows(cell))[::2])
                with torch.no_grad():
                    s.opt.params["means"][rows] += torch.from_numpy(rng.normal(0, 3, (len(rows), 3)).astype(np.float32))
                    s.opt.params["scales"][rows] += float(rng.normal(0, 0.5))
                s.moved(cell)
            got = bounds_of(s.metadata())
            cell_of = np.repeat(s.owned_cells, s.owned_counts)
            by_cell = s.owned_by_cell
            means, scales = (s.opt.params[n].detach().numpy()[by_cell] for n in ("means", "scales"))
            local_cell = np.searchsorted(s.owned_cells, cell_of)
            lo, hi, sigma, count = brute_force(means, scales, local_cell, len(s.owned_cells))
            assert np.array_equal(got.count, count) and np.array_equal(got.lo, lo) and np.array_equal(got.hi, hi)
            assert np.allclose(got.max_sigma, sigma, rtol=1e-6, atol=0)


def test_every_gaussian_is_owned_once_with_its_own_state(city):
    shards, full = shards_of(city, 10)
    owned = np.concatenate([s.owned_ids for s in shards])
    assert np.array_equal(np.sort(owned), np.arange(full.opt.num_gaussians))
    for s in shards:
        ids = torch.from_numpy(s.owned_ids)
        assert torch.equal(s.opt.params["means"], full.opt.params["means"][ids])
        assert torch.equal(s.opt.step_count, ids) and torch.equal(s.accum.count, ids * 3)
        for cell in s.owned_cells:  # each owned cell's rows map to the cell's Gaussians
            assert np.array_equal(s.owned_ids[s.local(s.cell_rows(cell))], s.cell_rows(cell))


def test_plan_from_exchanged_metadata_equals_the_plan_from_the_gaussians(city):
    shards, full = shards_of(city, 10)
    means, scales = (full.opt.params[n].detach().numpy() for n in ("means", "scales"))
    parts = [s.metadata() for s in shards]
    bounds = exchange_metadata(GatheredComm(parts), parts[0], shards[0].owner)
    lo, hi, sigma, count = brute_force(means, scales, kd_cells(means, 10), 10)  # the owners' metadata
    assert np.array_equal(bounds.count, count) and np.array_equal(bounds.lo, lo) and np.array_equal(bounds.hi, hi)
    assert np.allclose(bounds.max_sigma, sigma, rtol=1e-6, atol=0)
    local = Comm(MPI.COMM_SELF)
    batches = np.arange(16).reshape(8, 2) % len(city.viewmats)  # every camera in the window
    margin = Margin(0.05, 0.01)
    config = PlanConfig(10, RANKS)
    from_meta, _ = plan_cells(local, bounds, shards[0].owner, city, batches, 0, 8, margin, config)
    from_model, _ = plan_window(local, means, scales, city, batches, 0, 8, margin, config)
    assert np.array_equal(from_meta.visible, from_model.visible)
    assert np.array_equal(from_meta.owner, from_model.owner)
    for name in ("image_reads_indptr", "image_reads", "image_writes", "version_cell", "version_batch"):
        assert np.array_equal(getattr(from_meta.steps, name), getattr(from_model.steps, name)), name
    assert np.array_equal(from_meta.plan.rank, from_model.plan.rank)
    # the prediction covers the rasterizer's visibility (margin 0 at the metadata's state)
    predicted, _ = plan_cells(local, bounds, shards[0].owner, city, batches, 0, 8, Margin(0.0, 0.0), config)
    indptr, members = cell_members(kd_cells(means, 10), 10)
    cell_of = np.empty(len(means), np.int64)
    cell_of[members] = np.repeat(np.arange(10), np.diff(indptr))
    params = {n: full.opt.params[n].detach() for n in ("means", "scales", "quats", "opacities")}
    colors = torch.from_numpy(np.asarray(city.colors, np.float32))
    for cam in range(len(city.viewmats)):
        with torch.no_grad():
            _, seen = render(**params, colors=colors, viewmat=torch.from_numpy(city.viewmats[cam]),
                             K=torch.from_numpy(city.Ks[cam]), width=city.width, height=city.height)
        truth = np.zeros(10, bool)
        truth[cell_of[seen.numpy()]] = True
        assert not np.any(truth & ~predicted.visible[cam]), cam
    assert predicted.visible.sum() < predicted.visible.size  # the test is not vacuous
    # a window predicts its own cameras only, as the prediction over all cameras does; the rest is False
    first, _ = plan_cells(local, bounds, shards[0].owner, city, batches, 0, 2, margin, config)
    everyone = predict_visible_cells(bounds, city.viewmats, city.Ks, city.width, city.height, margin)
    used = np.unique(batches[:2])
    assert np.array_equal(first.visible[used], everyone[used])
    assert not first.visible[np.setdiff1d(np.arange(16), used)].any()


def test_owners_by_count_deals_rounds_by_load():
    # worked by hand: rounds {0, 1, 2} -> ranks 0, 1, 2 (loads 5, 5, 5); {3, 4, 5}: cell 4 (100) first,
    # to rank 0, then 3 and 5 to ranks 1, 2 (105, 10, 10); {6, 7} to the two lightest, 1 and 2
    counts = np.array([5, 5, 5, 5, 100, 5, 5, 5])
    assert owners_by_count(counts, 3).tolist() == [0, 1, 2, 1, 0, 2, 1, 2]


def test_owners_by_count_deals_groups_of_neighbours():
    # worked by hand, groups of 2: {0, 1} 10, {2, 3} 10, {4, 5} 105, {6, 7} 10; the round of groups 0-2
    # by count: {4, 5} to rank 0, {0, 1} to 1, {2, 3} to 2 (loads 105, 10, 10); {6, 7} to the lightest, 1.
    # Groups of 4 would leave 2 groups for 3 ranks: cut to 8 // 3 = 2 cells a group, the same owners
    counts = np.array([5, 5, 5, 5, 100, 5, 5, 5])
    assert owners_by_count(counts, 3, 2).tolist() == [1, 1, 2, 2, 0, 0, 1, 1]
    assert owners_by_count(counts, 3, 4).tolist() == [1, 1, 2, 2, 0, 0, 1, 1]
    # a last group shorter than the others: {0, 1, 2} 8, {3, 4, 5} 15, {6} 2; 15 to rank 0, 8 to 1, 2 to 1
    assert owners_by_count(np.array([3, 1, 4, 1, 5, 9, 2]), 2, 3).tolist() == [1, 1, 1, 0, 0, 0, 1]


@pytest.mark.parametrize("size,group", [(1, 1), (4, 1), (7, 1), (4, 3), (7, 4), (5, 9)])
def test_owners_by_count_balances_and_interleaves(size, group):
    counts = np.random.default_rng(size).integers(0, 1000, 45)
    owner = owners_by_count(counts, size, group)
    assert set(owner.tolist()) == set(range(size))
    k = min(group, 45 // size)  # groups of k consecutive cells, at least one a rank
    starts = np.arange(0, 45, k)
    group_counts = np.array([counts[s:s + k].sum() for s in starts])
    assert all(len(set(owner[s:s + k].tolist())) == 1 for s in starts)
    loads = np.bincount(owner, weights=counts, minlength=size)
    assert loads.max() - loads.min() <= group_counts.max()
    firsts = owner[starts]
    for start in range(0, len(starts), size):  # each round of consecutive groups on distinct ranks
        part = firsts[start:start + size]
        assert len(set(part.tolist())) == len(part)


def test_bounds_of_reads_counts_exactly():
    rows = np.zeros((2, META_COLUMNS), np.float32)
    rows[:, 7] = np.array([0, 2 ** 30 + 7], np.int32).view(np.float32)
    rows[:, 6] = [-np.inf, 0.0]
    bounds = bounds_of(rows)
    assert bounds.count.tolist() == [0, 2 ** 30 + 7] and bounds.max_sigma.tolist() == [0.0, 1.0]
