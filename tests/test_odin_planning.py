"""Planning ahead (``odin_sched.odin.planner.WindowPlanner``): the premise checked before a plan made
ahead runs, and what happens when it fails.

Oracles: ``window_margin`` evaluated by hand for the premise (the margin of the batches between the
plan's metadata and the window's start, which the learning rates' decay makes no larger); the
single-process trainer for a run in which every plan made ahead is dropped and made again; a loop over
a rank's images for the bytes of other ranks' cells it receives in a window (``cached_bytes``).
"""
import dataclasses

import numpy as np
import pytest

from odin_sched.odin.options import OdinOptions
from odin_sched.odin.planner import Planned, WindowPlanner
from odin_sched.odin.trainer import train_distributed
from odin_sched.scenes.scene_gen import generate_scene
from odin_sched.scenes.scene_io import read_scene, write_scene
from odin_sched.scenes.visibility import Margin, adam_step_bound
from odin_sched.training.config import TrainConfig
from odin_sched.training.step import BatchSettings
from odin_sched.training.train import train
from pregel.comm import Comm


@dataclasses.dataclass
class _Setup:
    settings: BatchSettings
    extent: float


def test_premise_is_the_margin_less_what_the_window_itself_may_add():
    settings = BatchSettings(2, position_lr_max_steps=40)
    planner = WindowPlanner(None, _Setup(settings, 3.0), 20, OdinOptions(window=4), 2, None, 100)
    base, start, stop = 2, 6, 10
    window = dataclasses.make_dataclass("W", ["start", "stop", "margin"])(start, stop,
                                                                          planner.margin(base, stop, 2.0))
    premise = planner.premise(Planned(window, None, base, 2.0, 0.0))
    c = adam_step_bound(*settings.betas)
    lr_base, lr_start = settings.lrs(3.0, base + 1), settings.lrs(3.0, start + 1)
    expected = Margin(2.0 * np.sqrt(3) * c * ((stop - base) * lr_base["means"] - (stop - start) * lr_start["means"]),
                      2.0 * c * ((stop - base) * lr_base["scales"] - (stop - start) * lr_start["scales"]))
    assert premise.means == pytest.approx(expected.means, rel=1e-12)
    assert premise.log_scale == pytest.approx(expected.log_scale, rel=1e-12)
    # no smaller than the margin of the batches before the window, [base, start)
    assert premise.means >= planner.margin(base, start, 2.0).means * (1 - 1e-12)


def test_plans_whose_premise_failed_are_made_again_and_the_run_stays_exact(tmp_path, monkeypatch):
    scene = tmp_path / "city.h5"
    write_scene(scene, generate_scene(400, 12, 32, 24, seed=2, layout="city"))
    common = dict(seed=1, ssim_weight=0.2, eval_every=6, batch_size=2, progress=False)
    train(TrainConfig(str(scene), 6, str(tmp_path / "single.h5"), **common))
    monkeypatch.setattr(WindowPlanner, "premise", lambda self, planned: Margin(-1.0, -1.0))  # always fails
    result = train_distributed(Comm(), TrainConfig(str(scene), 6, str(tmp_path / "odin.h5"), **common),
                               OdinOptions(cells=4, window=2))
    got, expected = read_scene(tmp_path / "odin.h5"), read_scene(tmp_path / "single.h5")
    assert got.attrs["replans"] == 2  # windows 2 and 3 were planned ahead, dropped and planned again
    assert result.visibility_violations == 0
    for name in ("means", "scales", "quats", "opacities", "sh"):
        assert np.array_equal(getattr(got, name), getattr(expected, name)), name
    assert np.array_equal(got.metrics["loss"], expected.metrics["loss"])


def test_cached_bytes_counts_each_remote_version_read_once(tmp_path):
    from mpi4py import MPI

    from odin_sched.odin.planner import PlanConfig, cached_bytes, plan_cells
    from odin_sched.odin.shard import owners_by_count
    from odin_sched.scenes.cells import cell_bounds, kd_cells

    city = generate_scene(600, 10, 32, 24, seed=1, layout="city")
    means, scales = np.asarray(city.means, np.float32), np.asarray(city.scales, np.float32)
    cell_of = kd_cells(means, 8)
    bounds = cell_bounds(means, scales, cell_of, 8)
    owner = owners_by_count(bounds.count, 3)
    batches = (np.arange(12) % len(city.viewmats)).reshape(4, 3)
    window, _ = plan_cells(Comm(MPI.COMM_SELF), bounds, owner, city, batches, 0, 4, Margin(0.1, 0.01),
                           PlanConfig(8, 3))
    steps, rank = window.steps, window.plan.rank
    total = 0
    for r in range(3):
        remote = set()
        for image in range(steps.num_images):  # brute force over the images this rank runs
            if rank[image] != r:
                continue
            for vertex in steps.image_reads[steps.image_reads_indptr[image]:steps.image_reads_indptr[image + 1]]:
                if rank[vertex] != r:
                    remote.add(int(vertex))
        expected = sum(int(bounds.count[steps.version_cell[v - steps.num_images]]) for v in remote) * 14 * 4
        assert cached_bytes(window, r, 14) == expected
        total += expected
    assert total > 0  # some images read other ranks' cells


@pytest.mark.parametrize("batches_ahead", [0, 2])
def test_the_plan_orders_each_rank_s_images_by_batch(batches_ahead):
    """``PlanConfig.batches_ahead`` and ``hold_share`` reach the plan's gate: every image's sequence is its batch (the
    batches it was planned from, counted by hand: 3 images a batch), every cell version is free (-1)."""
    from mpi4py import MPI

    from odin_sched.odin.planner import PlanConfig, plan_cells
    from odin_sched.odin.shard import owners_by_count
    from odin_sched.scenes.cells import cell_bounds, kd_cells

    city = generate_scene(600, 10, 32, 24, seed=1, layout="city")
    means, scales = np.asarray(city.means, np.float32), np.asarray(city.scales, np.float32)
    cell_of = kd_cells(means, 8)
    bounds = cell_bounds(means, scales, cell_of, 8)
    batches = (np.arange(12) % len(city.viewmats)).reshape(4, 3)
    window, _ = plan_cells(Comm(MPI.COMM_SELF), bounds, owners_by_count(bounds.count, 3), city, batches, 0, 4,
                           Margin(0.1, 0.01), PlanConfig(8, 3, batches_ahead=batches_ahead, hold_share=0.5))
    plan, images = window.plan, window.steps.num_images
    assert plan.lookahead == batches_ahead and plan.hold_share == 0.5
    assert plan.sequence[:images].tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3]
    assert (plan.sequence[images:] == -1).all()
