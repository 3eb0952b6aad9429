"""Stand-in scenes of the simulator: n generated Gaussians standing for f each plan and cost exactly as the
scene where each of them is there f times.

Oracle: the simulator on the explicit scene (every Gaussian repeated f times, its camera views projected
from all of them), which needs no stand-in weight anywhere.
"""
import dataclasses

import numpy as np
import pytest

from pregel.errors import InputError

from odin_sched.sim.costmodel import camera_views, load_profile
from odin_sched.sim.scene import SimScene, cells, metadata_scene, num_cells, preset_scene, stand_in_size, standing_for
from odin_sched.sim.simulate import simulate
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


def test_a_preset_stand_in_is_the_generated_count_standing_for_the_factor_each():
    preset, f = PRESETS["rubble"], 2023
    scene = preset_scene("rubble", generated=19_968, factor=f)
    assert scene.stands_for == f and len(scene.means) == 19_968
    assert scene.total_gaussians == 19_968 * f == 40_395_264
    assert (scene.width, scene.height, len(scene.viewmats)) == (preset.width, preset.height, preset.cameras)
    # each generated Gaussian the size the layout gives f times as many: 1 / sqrt(f) of its own
    plain = metadata_scene(preset.layout, len(scene.means), 4, preset.width, preset.height, sample=0.01)
    assert np.allclose(np.exp(scene.scales), np.exp(plain.scales) / np.sqrt(f), rtol=1e-5)
    assert np.array_equal(scene.means, plain.means)


def test_odin_cuts_the_runtimes_default_cells_of_the_gaussians_a_stand_in_stands_for():
    small = metadata_scene("city", 2048, 12, 32, 24, sample=1.0)
    scene = standing_for(small, 2048 * 512)  # 1,048,576 Gaussians: 128 cells of 8,192 at 2 GPUs (64 each)
    assert num_cells(scene.total_gaussians, 2) == 128 and num_cells(scene.total_gaussians, 2, 16) == 32
    _, bounds = cells(scene, 128)
    assert np.array_equal(bounds.count, np.full(128, 8192))  # 16 generated Gaussians of 512 each
    profile = load_profile("a100-nvlink", scene.total_gaussians)
    default = simulate(scene, profile, "odin", 2, 4, 2, window=2)
    assert default.seconds == simulate(scene, profile, "odin", 2, 4, 2, window=2, cells_per_gpu=64).seconds
    assert default.seconds != simulate(scene, profile, "odin", 2, 4, 2, window=2, cells_per_gpu=16).seconds


def test_a_stand_in_holds_a_whole_number_of_generated_gaussians_per_cell_at_every_gpu_count():
    # rubble's 40.4 M by default: cells of exactly 8,192 (4,928 of them) where uncapped, which f = 32
    # Gaussians a generated one gives with 256 generated a cell; 2,048 / 4,096 cells (512 per GPU) at 4 / 8
    n, f = stand_in_size(40_400_000, 2_000_000, (4, 8, 16, 32, 64))
    assert (n, f) == (4928 * 256, 32) and n * f == 4928 * 8192 == 40_370_176
    assert [num_cells(n * f, p) for p in (4, 8, 16, 32, 64)] == [2048, 4096, 4928, 4928, 4928]
    assert n % 4096 == 0 and n % 64 == 0
    # 16 per GPU: 21 each (40.4 M / 2 M rounded up), n the largest multiple of 1,024 below 40.4 M / 21
    assert stand_in_size(40_400_000, 2_000_000, (4, 8, 16, 32, 64), 16) == (1_923_072, 21)
    assert 1_923_072 == 1878 * 1024 and 1879 * 1024 * 21 > 40_400_000
    # 1,000 cells: n a multiple of 8,000 (and of 64), at most 10,000: 8,000, but 8,000 f is never within
    # 1 % below 100,000 (f = 12: 96,000; 13: 104,000)
    with pytest.raises(InputError, match="no stand-in of at most 10,000 Gaussians for 100,000"):
        stand_in_size(100_000, 10_000, (1,), 1000)
