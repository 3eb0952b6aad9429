"""Global Gaussian ids: unique over any sequence of densification rounds, decodable to their root, and
bounded (no overflow, a lineage stops densifying at the limit); densifying any subset of the Gaussians
(one owner's) gives each row exactly what densifying all of them gives."""
import math

import numpy as np
import torch

from odin_sched.training.densify import densify_and_prune
from odin_sched.training.densify_schedule import DensifyConfig
from odin_sched.training.gaussian_ids import DEPTH_SHIFT, can_densify, child_ids, initial_ids, parent_ids


def decode(i: int) -> tuple:
    """(depth, root, path bits) of an id, by the rule written out in Python integers."""
    depth, value = i >> DEPTH_SHIFT, i & ((1 << DEPTH_SHIFT) - 1)
    return depth, value >> depth, value & ((1 << depth) - 1)


def random_params(g: int, gen: torch.Generator) -> dict:
    return {"means": torch.randn(g, 3, generator=gen),
            "scales": torch.randn(g, 3, generator=gen) * 0.5 - 3.0,
            "quats": torch.randn(g, 4, generator=gen),
            "opacities": torch.randn(g, generator=gen) * 2.0,
            "sh0": torch.randn(g, 1, 3, generator=gen)}


def test_ids_stay_unique_over_many_rounds_and_decode_to_their_roots():
    gen = torch.Generator().manual_seed(4)
    params, ids = random_params(300, gen), initial_ids(300)
    roots = {i: i for i in range(300)}  # id -> root, of every id ever given
    config = DensifyConfig(grad_threshold=0.5, percent_dense=0.05, min_opacity=0.05)
    for step in range(1, 151):
        grad = torch.rand(len(ids), generator=gen)
        new, source, _, new_ids = densify_and_prune(params, ids, grad, 1.0, config, 9, step)
        parent_ids = ids[source].tolist()
        for child, parent in zip(new_ids.tolist(), parent_ids):
            if child == parent:
                continue
            assert child not in roots  # never given before
            roots[child] = roots[parent]
            assert decode(child)[:2] == (decode(parent)[0] + 1, roots[parent])
        assert len(set(new_ids.tolist())) == len(new_ids)
        keep = torch.randperm(len(new_ids), generator=gen)[:2000]  # bound the model, as pruning would
        params, ids = {k: v[keep] for k, v in new.items()}, new_ids[keep]
    assert max(decode(i)[0] for i in roots) > 10  # deep lineages were exercised


def test_a_lineage_densifies_until_the_limit_without_overflow():
    for g0 in (2_000_000, 100_000, 3):
        ids = torch.tensor([g0 - 1])
        seen, count = {int(ids)}, 0
        while bool(can_densify(ids)):
            ids = child_ids(ids, count % 2)
            assert int(ids) > 0 and int(ids) not in seen
            seen.add(int(ids))
            count += 1
        assert count == DEPTH_SHIFT - math.ceil(math.log2(g0))  # 36 for 2M, 40 for 100k
        assert decode(int(ids))[1] == g0 - 1


def test_gaussians_at_the_limit_are_kept_as_they_are():
    gen = torch.Generator().manual_seed(1)
    params = random_params(3, gen)
    params["opacities"][:] = 3.0
    ids = torch.tensor([0, (36 << DEPTH_SHIFT) | ((1 << 56) + 5), 2])  # the middle one is at the limit
    _, source, _, new_ids = densify_and_prune(params, ids, torch.ones(3), 1.0, DensifyConfig(), 0, 1)
    assert sorted(source.tolist()) == [0, 0, 1, 2, 2] and int(ids[1]) in new_ids.tolist()


def test_densifying_a_subset_gives_each_gaussian_what_densifying_all_gives():
    gen = torch.Generator().manual_seed(2)
    g = 500
    params, grad = random_params(g, gen), torch.rand(g, generator=gen)
    ids = torch.from_numpy(np.random.default_rng(0).choice(10 ** 9, g, replace=False))
    config = DensifyConfig(grad_threshold=0.4, percent_dense=0.05, min_opacity=0.05)
    whole, _, _, whole_ids = densify_and_prune(params, ids, grad, 1.0, config, 5, 33)
    owner = torch.randint(0, 3, (g,), generator=gen)
    parts = [densify_and_prune({k: v[owner == r] for k, v in params.items()}, ids[owner == r], grad[owner == r],
                               1.0, config, 5, 33) for r in range(3)]
    part_ids = torch.cat([p[3] for p in parts])
    assert torch.equal(torch.sort(part_ids).values, torch.sort(whole_ids).values)
    for name in params:
        got = torch.cat([p[0][name] for p in parts])[torch.argsort(part_ids)]
        assert torch.equal(got, whole[name][torch.argsort(whole_ids)]), name


def test_parent_ids_invert_child_ids():
    ids = torch.tensor([0, 7, (3 << DEPTH_SHIFT) | 45, (1 << DEPTH_SHIFT) | 2])
    for child in (0, 1):
        assert torch.equal(parent_ids(child_ids(ids, child)), ids)
    # by hand: (1, 2 x 7 + 1) is 7's child 1; (4, 90) and (4, 91) are (3, 45)'s
    assert parent_ids(torch.tensor([(1 << DEPTH_SHIFT) | 15, (4 << DEPTH_SHIFT) | 91])).tolist() == [
        7, (3 << DEPTH_SHIFT) | 45]
