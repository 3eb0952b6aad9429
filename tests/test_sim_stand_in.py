"""Stand-in scenes of the simulator: n generated Gaussians standing for f each plan and cost exactly as the
scene where each of them is there f times.

Oracle: the simulator on the explicit scene (every Gaussian repeated f times, its camera views projected
from all of them), which needs no stand-in weight anywhere.
"""
import dataclasses

import numpy as np
import pytest

from odin_sched.sim.costmodel import camera_views, load_profile
from odin_sched.sim.simulate import SimScene, cells, metadata_scene, preset_scene, simulate, standing_for
from odin_sched.sim.presets import PRESETS


def _repeated(scene: SimScene, f: int) -> SimScene:
    """``scene`` with every Gaussian there f times (consecutive ids), projected again from all of them."""
    means, scales, quats = (np.repeat(a, f, axis=0) for a in (scene.means, scene.scales, scene.quats))
    views = camera_views(means, scales, quats, scene.viewmats, scene.Ks, scene.width, scene.height)
    return SimScene(means, scales, quats, scene.viewmats, scene.Ks, scene.width, scene.height, scene.train_ids, views)


@pytest.mark.parametrize("layout", ["objects", "city"])
def test_a_stand_in_simulates_as_its_gaussians_repeated(layout):
    f, gpus, batch = 3, 4, 4
    small = metadata_scene(layout, 1024, 24, 64, 48, sample=1.0)  # 1024: a multiple of every cell count below
    stand_in, full = standing_for(small, 1024 * f), _repeated(small, f)
    assert stand_in.stands_for == f and full.stands_for == 1
    assert np.array_equal(stand_in.features, full.features)
    for name, mode in (("a100-nvlink", "odin"), ("a100-nvlink", "barrier"), ("h200-kernels", "odin")):
        # h200-kernels gathers the whole model at window ends (the sharded profiles, metadata)
        profile = dataclasses.replace(load_profile(name, 3072), image_noise=(-0.1, 0.2))
        a = simulate(stand_in, profile, mode, gpus, 8, batch, window=4)
        b = simulate(full, profile, mode, gpus, 8, batch, window=4)
        for name in ("seconds", "bound_seconds", "memory_bytes", "parallelism"):
            assert getattr(a, name) == getattr(b, name), (mode, name)
        for name in ("compute", "comm", "wait"):
            assert np.array_equal(getattr(a, name), getattr(b, name)), (mode, name)
    cell_of, bounds = cells(stand_in, 16 * gpus)
    full_of, full_bounds = cells(full, 16 * gpus)
    assert np.array_equal(np.repeat(cell_of, f), full_of) and np.array_equal(bounds.count, full_bounds.count)


def test_odin_refuses_a_scene_that_stands_for_a_fraction_per_gaussian():
    small = metadata_scene("city", 1000, 12, 32, 24)
    with pytest.raises(ValueError, match="whole number"):
        simulate(standing_for(small, 2500), load_profile("a100-nvlink"), "odin", 2, 2, 2)
    assert simulate(standing_for(small, 2500), load_profile("a100-nvlink"), "grendel", 2, 2, 2).seconds > 0


def test_a_preset_stand_in_generates_a_multiple_of_the_cells_standing_for_a_whole_number_each():
    preset = PRESETS["rubble"]
    scene = preset_scene("rubble", generated=20_000, multiple_of=1024)
    f = -(-preset.gaussians // 20_000)
    assert scene.stands_for == f and len(scene.means) % 1024 == 0 and len(scene.means) <= 20_000
    assert scene.total_gaussians == len(scene.means) * f
    assert preset.gaussians - 1024 * f < scene.total_gaussians <= preset.gaussians
    assert (scene.width, scene.height, len(scene.viewmats)) == (preset.width, preset.height, preset.cameras)
    # each generated Gaussian the size the layout gives f times as many: 1 / sqrt(f) of its own
    plain = metadata_scene(preset.layout, len(scene.means), 4, preset.width, preset.height, sample=0.01)
    assert np.allclose(np.exp(scene.scales), np.exp(plain.scales) / np.sqrt(f), rtol=1e-5)
    assert np.array_equal(scene.means, plain.means)
