"""The simulator (odin_sched.sim.simulate) runs the runtime's scheduling code; the cost-model fit; odin-fast.

Oracles: the real ``pregel train`` under mpiexec (its timeline gives each rank's steps in order), known
coefficients for the fit, and a plain loop over (image, cell) pairs for the stale reads.
"""
import dataclasses
import json
import os
import shutil
import subprocess
import sys

import h5py
import numpy as np
import pytest

from odin_sched.sim.costmodel import H200_IB, H200_KERNELS, fit_costs, load_profile
from odin_sched.odin.depgraph import build_step_graph
from odin_sched.scenes.scene_gen import generate_scene
from odin_sched.scenes.scene_io import write_scene
from odin_sched.odin.shard import owners_by_count
from odin_sched.sim.scene import cells, metadata_scene, scene_of_setup
from odin_sched.sim.simulate import MODES, scaling, simulate
from odin_sched.odin.staleness import relax_reads
from odin_sched.training.train import TrainConfig, prepare

MPIEXEC = shutil.which("mpiexec", path=os.path.dirname(sys.executable)) or "mpiexec"
STEPS, B = 6, 4


@pytest.fixture(scope="module")
def scene_file(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("sim") / "city.h5")
    write_scene(path, generate_scene(600, 24, 32, 24, seed=3, layout="city"))
    return path


def _train(scene, out, mode, extra=()):
    env = dict(os.environ, OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1")
    subprocess.run([MPIEXEC, "-n", "2", sys.executable, "-m", "pregel.cli", "train", "--scene", scene, "--steps",
                    str(STEPS), "--batch-size", str(B), "--mode", mode, "--eval-every", str(STEPS), "--out", out,
                    *extra], check=True, env=env, timeout=300, capture_output=True)


def _image_order(trace):
    """Per rank, the image steps in the order they were computed (from a Chrome trace)."""
    with open(trace) as f:
        events = [e for e in json.load(f)["traceEvents"] if e.get("cat") == "compute"
                  and str(e.get("args", {}).get("label", "")).startswith("image ")]
    ranks = {}
    for e in sorted(events, key=lambda e: e["ts"]):
        ranks.setdefault(e["tid"], {}).setdefault(e["args"]["vertex"])  # an image's two spans: once
    return {rank: list(order) for rank, order in ranks.items()}


@pytest.mark.parametrize("mode", ["barrier", "odin"])
def test_simulated_schedule_equals_runtime(scene_file, tmp_path, mode):
    trace = str(tmp_path / "t.json")
    _train(scene_file, str(tmp_path / "t.h5"), mode, ["--timeline", trace])
    real = _image_order(trace)
    sim = simulate(scene_of_setup(prepare(TrainConfig(scene_file, STEPS, batch_size=B, eval_every=STEPS))), H200_IB, mode, 2, STEPS, B,
                   trace=True)
    simulated = {r: list(dict.fromkeys(v for kind, _, _, v in spans if kind == "compute" and v < STEPS * B))
                 for r, spans in enumerate(sim.spans)}
    for rank in (0, 1):
        if mode == "barrier":  # the phase order is fixed: the same sequence
            assert simulated[rank] == real[rank]
        else:  # the same assignment (the order within a rank follows the arrival times)
            assert sorted(simulated[rank]) == sorted(real[rank])


def test_one_gpu_same_speed_in_every_mode():
    scene = metadata_scene("city", 3000, 40, 64, 48)
    profile = dataclasses.replace(load_profile("cpu-here"), count_planning=False)  # planning wall time varies
    speeds = [simulate(scene, profile, mode, 1, 8, 2).steps_per_second for mode in MODES]
    assert np.allclose(speeds, speeds[0], rtol=1e-9, atol=0)
    assert all(simulate(scene, profile, m, 1, 8, 2).wait.sum() == 0 for m in MODES)


def test_fit_recovers_known_coefficients():
    rng = np.random.default_rng(0)
    features = np.column_stack([rng.uniform(1e3, 1e5, 200), rng.choice([3072, 12288, 49152], 200),
                                rng.uniform(1e3, 1e6, 200)])
    truth = np.array([2e-3, 3e-8, 1e-7, 5e-9])
    seconds = truth[0] + features @ truth[1:]
    assert np.allclose(fit_costs(features, seconds), truth, rtol=1e-6)
    noisy = seconds * (1 + 0.01 * rng.standard_normal(200))
    assert np.allclose(fit_costs(features, noisy), truth, rtol=0.2)


def test_stale_reads_against_a_loop():
    rng = np.random.default_rng(1)
    visible = rng.random((30, 12)) < 0.4
    counts = rng.integers(5, 200, 12)
    steps = build_step_graph(rng.integers(0, 30, (10, 3)), visible)
    for k in (1, 2, 3):
        relaxed, skip = relax_reads(steps, counts, k, impact=0.15)
        assert skip.max() <= k and (skip > 0).any()
        for i in range(steps.num_images):
            a, b = steps.image_reads_indptr[i], steps.image_reads_indptr[i + 1]
            cells = steps.version_cell[steps.image_reads[a:b] - steps.num_images]
            total = counts[cells].sum()
            older = {}  # read j -> updates of its cell before it in the window
            for j, c in zip(range(a, b), cells):
                first = np.flatnonzero(steps.version_cell == c)[0]  # the window's initial version of c
                if steps.image_reads[j] - steps.num_images > first:
                    older[j] = steps.image_reads[j] - steps.num_images - first
            budget, allowed = 0.0, set()  # smallest cells first while their shares sum to <= 0.15
            for j in sorted(older, key=lambda j: (counts[cells[j - a]] / total, j)):
                budget += counts[cells[j - a]] / total
                if budget <= 0.15:
                    allowed.add(j)
            for j, c in zip(range(a, b), cells):
                assert skip[j] == (min(k, older[j]) if j in allowed else 0)
                read = relaxed.image_reads[j] - steps.num_images
                first = np.flatnonzero(steps.version_cell == c)[0]
                assert steps.version_cell[read] == c and read >= first  # never before the window start
        src = np.repeat(np.arange(relaxed.num_vertices), np.diff(relaxed.graph.indptr))
        phase = relaxed.phase()
        assert (phase[src] < phase[relaxed.graph.indices]).all()  # still a DAG in phase order


def test_odin_fast_bounded_and_synchronised_at_densification(scene_file, tmp_path):
    out = str(tmp_path / "fast.h5")
    _train(scene_file, out, "odin-fast", ["--max-staleness", "2", "--densify", "--densify-from", "2",
                                          "--densify-interval", "3", "--densify-until", "5", "--window", "20"])
    with h5py.File(out) as f:
        assert f.attrs["max_staleness_seen"] <= 2 and f.attrs["max_staleness"] == 2
        assert f.attrs["visibility_violations"] == 0
        assert f.attrs["mode"] == "odin-fast"


def test_cli_writes_datasets_and_plot(tmp_path, capsys):
    from PIL import Image

    from pregel.cli import main

    out = str(tmp_path / "sim.h5")
    assert main(["simulate", "--layout", "objects", "--gaussians", "2000", "--cameras", "24", "--width", "64",
                 "--height", "48", "--steps", "4", "--gpus", "1,2", "--profile", "h200-ib", "--out", out]) == 0
    assert "odin/barrier" in capsys.readouterr().out
    with h5py.File(out) as f:
        assert list(f["gpus"][()]) == [1, 2]
        for mode in MODES:
            assert f[f"steps_per_second/{mode}"].shape == (2,) and f[f"wait_fraction/{mode}"].shape == (2,)
        speed = {m: f[f"steps_per_second/{m}"][()] for m in MODES}
        assert np.allclose(f["speedup_vs_barrier"][()], speed["odin"] / speed["barrier"])
        assert f["hidden_fraction"].shape == (2,) and f["parallelism"].shape == (2,)
        assert f.attrs["profile_name"] == "h200-ib" and f.attrs["profile_bandwidth"] == 25e9
    png = str(tmp_path / "scaling.png")
    assert main(["plot", out, "--out", png]) == 0
    assert Image.open(png).size == (1000, 380)
    assert main(["simulate", "--gpus", "1", "--window", "5,x", "--out", str(tmp_path / "bad.h5")]) == 2
    assert "--window must be a comma-separated list of integers, got '5,x'" in capsys.readouterr().err
    assert main(["simulate", "--gpus", "0", "--out", str(tmp_path / "bad.h5")]) == 2
    assert "--gpus must be at least 1" in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "bad.h5")


def test_several_windows_report_each_mode_at_its_fastest(tmp_path):
    from pregel.cli import main

    scene = metadata_scene("city", 3000, 40, 64, 48)
    profile = load_profile("h200-ib", 3000)  # as `pregel simulate` loads it for this scene
    best = scaling(scene, profile, [2], 6, windows=(1, 3))
    for mode in MODES:
        runs = {w: simulate(scene, profile, mode, 2, 6, 2, window=w) for w in (1, 3)}
        fastest = max(runs, key=lambda w: runs[w].steps_per_second)
        assert best[mode][0].window == fastest
        assert best[mode][0].steps_per_second == runs[fastest].steps_per_second
    out = str(tmp_path / "sim.h5")
    assert main(["simulate", "--gaussians", "3000", "--cameras", "40", "--width", "64", "--height", "48",
                 "--steps", "6", "--gpus", "2", "--window", "1,3", "--out", out]) == 0
    with h5py.File(out) as f:
        for mode in MODES:
            assert f[f"window/{mode}"][()].tolist() == [best[mode][0].window]
            assert np.isclose(f[f"steps_per_second/{mode}"][0], best[mode][0].steps_per_second)


def test_simulate_shows_its_progress_by_run_and_window_unless_quiet(tmp_path, capsys, monkeypatch):
    from pregel.cli import main
    from pregel.progress import Progress

    monkeypatch.setattr(Progress, "LINE_SECONDS", 0.0)  # off a terminal: a line at every update
    flags = ["simulate", "--gaussians", "3000", "--cameras", "40", "--width", "64", "--height", "48", "--steps", "6",
             "--gpus", "2", "--window", "1,3"]
    assert main([*flags, "--out", str(tmp_path / "a.h5")]) == 0
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("run ")]
    # odin, barrier and odin-fast with windows of 1 and 3 batches, grendel once: 7 runs; 6 steps make 6 windows
    # of one batch or 2 of three
    assert lines[-1].startswith("run 7/7: odin-fast at 2 GPUs, window length 3, ")
    assert [line.split(",")[0] for line in lines if "window length 1: window" in line and line.startswith("run 0/")] == \
        ["run 0/7: odin at 2 GPUs"] * 6
    assert "window length 1: window 6/6" in "".join(lines) and "window length 3: window 2/2" in "".join(lines)
    assert "window length 3: window 3/" not in "".join(lines)
    assert main([*flags, "--quiet", "--out", str(tmp_path / "b.h5")]) == 0
    assert not [line for line in capsys.readouterr().err.splitlines() if line.startswith("run ")]


def _finish_times(profile, jobs, ranks=3):
    """Finish times of ``jobs`` [(start s, [(kind, seconds), ...])] on ``Processors(profile)`` for
    ``ranks`` ranks (job i is rank i), each a sequence of steps: 'compute' holds a processor for the
    seconds, 'wait' waits for an event that happens the given seconds after the wait begins."""
    import simpy

    from odin_sched.sim.processors import Processors

    env = simpy.Environment()
    cpu = Processors(env, profile, ranks)
    finish = [None] * len(jobs)

    def job(i, start, steps):
        yield env.timeout(start)
        for kind, seconds in steps:
            if kind == "compute":
                yield from cpu.hold(i, seconds)
            else:
                yield from cpu.wait(i, env.timeout(seconds))
        cpu.release(i)
        finish[i] = env.now

    for i, spec in enumerate(jobs):
        env.process(job(i, *spec))
    env.run()
    return np.array(finish)


def test_shared_processors_run_ranks_in_turn_in_time_slices():
    ms = 1e-3
    shared = dataclasses.replace(H200_IB, cores=2, time_slice=4 * ms)
    # worked by hand: A and B run 0-4 ms; C takes over A's processor and A B's at 4 ms; A ends at 8 ms,
    # then B and C run 8-12 ms
    three = [(0.0, [("compute", 8 * ms)])] * 3
    assert np.allclose(_finish_times(shared, three), [8 * ms, 12 * ms, 12 * ms])
    assert np.allclose(_finish_times(H200_IB, three), 8 * ms)  # a processor each: no sharing
    assert np.allclose(_finish_times(dataclasses.replace(shared, cores=3), three), 8 * ms)


def test_a_rank_keeps_its_processor_between_computations_until_its_slice_is_used_up():
    ms = 1e-3
    one = dataclasses.replace(H200_IB, cores=1, time_slice=4 * ms)
    # worked by hand: A computes 1 ms three times from 0; B asks for 1 ms at 0.5 ms. A keeps the
    # processor until 3 ms (its slice is not used up), then B runs 3-4 ms
    jobs = [(0.0, [("compute", ms)] * 3), (0.5 * ms, [("compute", ms)])]
    assert np.allclose(_finish_times(one, jobs), [3 * ms, 4 * ms])
    # with 2 ms slices A's slice is used up after two computations: B, who has had less processor
    # time, runs 2-3 ms, then A 3-4 ms
    short = dataclasses.replace(one, time_slice=2 * ms)
    assert np.allclose(_finish_times(short, jobs), [4 * ms, 3 * ms])


def test_a_rank_that_gets_a_shared_processor_back_loses_the_switch_time():
    ms = 1e-3
    one = dataclasses.replace(H200_IB, cores=1, time_slice=4 * ms, switch_seconds=0.1 * ms)
    # worked by hand: A gets the processor at 0 and computes 2 + 0.1 ms; then B 2.1-4.2 ms
    jobs = [(0.0, [("compute", 2 * ms)]), (0.0, [("compute", 2 * ms)])]
    assert np.allclose(_finish_times(one, jobs), [2.1 * ms, 4.2 * ms])
    # a processor per rank (as many cores as ranks): nothing is switched
    assert np.allclose(_finish_times(dataclasses.replace(one, cores=3), jobs), [2 * ms, 2 * ms])


def test_a_waiting_rank_notices_at_its_next_look_and_looks_preempt_ranks_that_had_more():
    ms = 1e-3
    one = dataclasses.replace(H200_IB, cores=1, time_slice=4 * ms, poll_seconds=0.1 * ms, poll_sleep=0.4 * ms)
    # the first look finds nothing; then sleep 0-0.4, look 0.4-0.5, sleep 0.5-0.9, look 0.9-1.0 ms: the
    # event at 0.8 ms is noticed at the end of that look
    assert np.allclose(_finish_times(one, [(0.0, [("wait", 0.8 * ms)])]), [1.0 * ms])
    # a computation of 2 ms from 0 gives the processor to the look at 0.9 ms of a rank that began
    # waiting at 0.5 ms (for an event at 0.8 ms) and has had none so far: 0.1 ms later it is done
    jobs = [(0.0, [("compute", 2 * ms)]), (0.5 * ms, [("wait", 0.3 * ms)])]
    assert np.allclose(_finish_times(one, jobs), [2.1 * ms, 1.0 * ms])
    # but not to a rank that has had more: B computes 0-1 ms, then waits for an event at 1.2 ms; A
    # computes 2 ms from 1 ms. B's look at 1.4 ms finds A has had 0.4 ms against B's 1 ms, so it waits
    # for A's processor (A's slice lasts to the end of its work): B looks 3.0-3.1 ms
    jobs = [(1 * ms, [("compute", 2 * ms)]), (0.0, [("compute", 1 * ms), ("wait", 0.2 * ms)])]
    assert np.allclose(_finish_times(one, jobs), [3.0 * ms, 3.1 * ms])
    # as many processors as ranks: waiting inside MPI, a rank takes no one's time and notices at once
    jobs = [(0.0, [("compute", 2 * ms)]), (0.5 * ms, [("wait", 0.3 * ms)])]
    for spare in (dataclasses.replace(one, cores=3), dataclasses.replace(one, cores=0)):
        assert np.allclose(_finish_times(spare, jobs), [2 * ms, 0.8 * ms])


def test_planning_on_ranks_that_outnumber_the_cores_takes_plan_shared_even_shares():
    scene = metadata_scene("city", 3000, 40, 64, 48)
    base = dataclasses.replace(load_profile("cpu-here"), cores=2, plan_seconds=0.01, plan_shared=1.0)
    slow = dataclasses.replace(base, plan_shared=2.5)
    # 3 ranks on 2 cores, 2 windows: each window's planning, 0.01 s x 3/2, takes 2.5 times as long
    def seconds(profile, ranks):
        return simulate(scene, profile, "odin", ranks, 6, 2 * ranks, window=3).seconds

    assert np.isclose(seconds(slow, 3) - seconds(base, 3), 2 * 0.01 * 1.5 * (2.5 - 1))
    # a core per rank: an even share is the whole core, and plan_shared does not apply
    assert seconds(slow, 2) == seconds(base, 2)


@pytest.mark.parametrize("profile_name", ["h200-ib", "cpu-here"])
def test_no_mode_beats_its_ceiling(profile_name):
    scene = metadata_scene("city", 3000, 40, 64, 48)
    profile = dataclasses.replace(load_profile(profile_name), count_planning=False)
    for gpus in (2, 3):
        for mode in MODES:
            run = simulate(scene, profile, mode, gpus, 8, 2 * gpus)
            assert 0 < run.steps_per_second <= run.ceiling_steps_per_second * (1 + 1e-9)


def test_shared_cores_slow_ranks_that_outnumber_them():
    scene = metadata_scene("city", 3000, 40, 64, 48)
    alone = dataclasses.replace(load_profile("cpu-here"), count_planning=False, cores=0)
    for mode in ("odin", "barrier"):
        spare = simulate(scene, dataclasses.replace(alone, cores=3), mode, 3, 6, 6)
        assert np.isclose(spare.seconds, simulate(scene, alone, mode, 3, 6, 6).seconds, rtol=1e-12, atol=0)  # slices add up
        shared = simulate(scene, dataclasses.replace(alone, cores=1), mode, 3, 6, 6)
        # one processor: the ranks' work runs one after another
        assert shared.seconds >= 0.95 * spare.compute.sum() > 1.5 * spare.seconds


def _small_window():
    """A planned window (6 batches of 4 images, 12 cells, 2 ranks) of a small city, and its scene."""
    from odin_sched.training.image_order import spread_batches
    from odin_sched.odin.planner import PlanConfig, plan_window
    from odin_sched.sim.simulate import local_comm
    from odin_sched.training.step import BatchSettings
    from odin_sched.training.train import scene_extent, visible_cells_of_cameras
    from odin_sched.scenes.visibility import window_margin

    scene = metadata_scene("city", 3000, 40, 64, 48)
    settings, extent = BatchSettings(4), scene_extent(scene.viewmats)
    sees = visible_cells_of_cameras(scene.means, scene.scales, scene.viewmats, scene.Ks, 64, 48, settings, extent)
    batches = spread_batches(scene.train_ids, 6, 4, 0, sees)
    lrs = settings.lrs(extent, 1)
    margin = window_margin(lrs["means"], lrs["scales"], settings.betas, 6)
    win, _ = plan_window(local_comm(), scene.means, scene.scales, scene, batches, 0, 6, margin,
                         PlanConfig(12, 2, 0, cost_weights=(0.0, 1.0, 0.0)))
    return win, scene


def test_image_costs_carry_resampled_fit_errors():
    from odin_sched.sim.window_run import vertex_costs

    win, scene = _small_window()
    exact = dataclasses.replace(load_profile("cpu-here"), image_noise=())
    noisy = dataclasses.replace(exact, image_noise=(-0.5, 0.5))
    images = win.steps.num_images
    base = vertex_costs(win, scene.views, exact, np.random.default_rng(0))
    drawn = vertex_costs(win, scene.views, noisy, np.random.default_rng(0))
    factor = drawn[:images] / base[:images]
    assert np.isin(np.round(factor, 12), [0.5, 1.5]).all() and len(np.unique(np.round(factor, 12))) == 2
    assert np.array_equal(drawn[images:], base[images:])  # cell updates keep their fitted cost
    assert np.array_equal(drawn, vertex_costs(win, scene.views, noisy, np.random.default_rng(0)))


def test_cell_updates_cost_less_when_their_batch_saw_none_of_their_gaussians():
    from kernels.splat.projection import project
    from odin_sched.sim.window_run import vertex_costs

    win, scene = _small_window()
    profile = dataclasses.replace(load_profile("cpu-here"), image_noise=(), version=(1.0, 0.01), version_unseen=0.25)
    steps = win.steps
    cost = vertex_costs(win, scene.views, profile, np.random.default_rng(0))[steps.num_images:]
    on_screen = {}
    kinds = set()
    for v in range(len(steps.version_cell)):  # loop oracle: project each writer's camera again
        cell, batch = int(steps.version_cell[v]), int(steps.version_batch[v])
        if batch < 0:
            assert cost[v] == 0.0
            continue
        writers = np.flatnonzero(steps.image_writes == steps.num_images + v)
        writers = np.searchsorted(steps.image_writes_indptr, writers, side="right") - 1
        seen = False
        for cam in steps.image_camera[writers]:
            if cam not in on_screen:
                radius = project(*(np.ascontiguousarray(a, np.float32) for a in (scene.means, scene.scales, scene.quats)),
                                 scene.viewmats[cam], scene.Ks[cam], scene.width, scene.height)[3]
                on_screen[cam] = radius > 0
            seen |= bool(on_screen[cam][win.cell_rows(cell)].any())
        expected = 1.0 + 0.01 * len(win.cell_rows(cell)) if seen else 0.25
        assert np.isclose(cost[v], expected)
        kinds.add(seen)
    assert kinds == {True, False}  # the window has both kinds


def test_image_rows_count_the_gaussians_of_the_cells_read():
    win, _ = _small_window()
    steps = win.steps
    for image in range(steps.num_images):
        reads = steps.image_reads[steps.image_reads_indptr[image]:steps.image_reads_indptr[image + 1]]
        cells = steps.version_cell[reads - steps.num_images]
        assert win.image_rows[image] == sum(len(win.cell_rows(c)) for c in cells)
    assert win.image_rows.sum() > 0


def test_messages_and_gathers_weigh_the_sh_coefficients():
    """A Gaussian's parameters are 59 floats at SH degree 3 (3 + 3 + 4 + 1 + 16 x 3), 14 at degree 0: the
    step graph's messages, the window-end gather and the simulated communication follow."""
    from odin_sched.odin.program import StepMessages
    from odin_sched.sim.window_end import gather_bytes
    from odin_sched.training.step import param_columns

    assert (param_columns(3), param_columns(1), param_columns(0)) == (59, 23, 14)
    assert (gather_bytes(3), gather_bytes(0)) == (4 * (3 * 59 + 2) + 24, 4 * (3 * 14 + 2) + 24)
    win, scene = _small_window()
    steps, sizes = win.steps, np.diff(win.member_indptr)
    image_to_version = int(steps.image_writes[0])
    read = next(r for r in steps.image_reads if steps.version_batch[r - steps.num_images] >= 0)
    position = np.flatnonzero(steps.image_reads == read)[0]
    reader = int(np.searchsorted(steps.image_reads_indptr, position, "right") - 1)  # an image reading it
    for degree, columns in ((3, 59), (0, 14)):
        messages = StepMessages(steps, sizes, param_columns(degree))
        rows = sizes[steps.version_cell[image_to_version - steps.num_images]]
        assert messages.payload_size(np.array([0]), np.array([image_to_version]))[0] == rows * (columns + 3)
        rows = sizes[steps.version_cell[read - steps.num_images]]
        assert messages.payload_size(np.array([read]), np.array([reader]))[0] == rows * columns
    # the current runtime gathers the model at window ends (the sharded profiles move metadata only)
    comm = {d: simulate(scene, H200_KERNELS, "odin", 2, 6, 4, sh_degree=d).comm.sum() for d in (0, 3)}
    assert comm[3] > comm[0] > 0


def test_window_memory_against_a_loop():
    """Owned state plus read-only copies of the remote cells a rank's images read (this window and the
    one before), against a plain loop over the images' reads."""
    from odin_sched.sim.window_end import state_bytes, window_memory
    from odin_sched.training.step import param_columns

    win, _ = _small_window()
    steps, sizes = win.steps, np.diff(win.member_indptr)
    earlier = np.array([[0, np.flatnonzero(win.owner == 1)[0]]])  # rank 0 read one of rank 1's cells before
    held, reads = window_memory(win, 2, 3, earlier)
    expected = np.zeros(2)
    cached = [set(), set()]
    for i in range(steps.num_images):
        rank = int(win.plan.rank[i])
        for r in steps.image_reads[steps.image_reads_indptr[i]:steps.image_reads_indptr[i + 1]]:
            cell = int(steps.version_cell[r - steps.num_images])
            if win.owner[cell] != rank:
                cached[rank].add(cell)
    cached[0].add(int(earlier[0, 1]))
    for rank in (0, 1):
        owned = sizes[win.owner == rank].sum()
        expected[rank] = owned * state_bytes(3) + sum(sizes[c] for c in cached[rank]) * 4 * param_columns(3)
    assert np.array_equal(held, expected)
    assert state_bytes(3) == 740 + 236
    assert all(win.plan.rank[i] in (0, 1) for i in range(steps.num_images)) and len(reads) > 0


def test_sharded_profiles_plan_at_the_measured_size_nearest_the_scene():
    from odin_sched.sim.costmodel import PROFILE_DIR

    with open(os.path.join(PROFILE_DIR, "plan-times.json")) as f:
        measured = {e["gaussians"]: [tuple(x) for x in e["plan_by_gpus"]] for e in json.load(f)["measurements"]}
    assert 100_000 in measured and 1_000_000 in measured  # the aerial city and issue 20's city
    for size, times in measured.items():
        for near in (size * 0.8, size * 1.2):
            assert list(load_profile("a100-nvlink", near).plan_by_gpus) == times
    assert list(load_profile("h200-ib", 40_000_000).plan_by_gpus) == measured[max(measured)]
    assert list(load_profile("h200-ib", 10).plan_by_gpus) == measured[min(measured)]
    assert load_profile("h200-kernels", 1_000_000).plan_by_gpus == ()  # not sharded: plans on the critical path


def test_sharded_window_ends_move_metadata_and_hide_planning():
    from odin_sched.sim.window_end import METADATA_CELL_BYTES, METADATA_IMAGE_BYTES, gather_bytes

    scene = metadata_scene("city", 3000, 40, 64, 48)
    base = dataclasses.replace(H200_IB, plan_by_gpus=())
    run = simulate(scene, base, "odin", 2, 4, 4, window=2)
    gathering = simulate(scene, dataclasses.replace(base, sharded=False), "odin", 2, 4, 4, window=2)
    # two windows, each ending with an allgather of 32 cells' and 8 images' metadata instead of the model
    metadata = base.allgather_seconds(METADATA_CELL_BYTES * 32 + METADATA_IMAGE_BYTES * 8, 2)
    model = base.allgather_seconds(gather_bytes(3) * 3000, 2)
    assert gathering.comm.sum() - run.comm.sum() == pytest.approx(2 * 2 * (model - metadata))
    # the first window is planned before training starts; the second's planning is hidden behind the
    # first window's run when shorter than it, and waits for what it takes beyond it when longer
    short = simulate(scene, dataclasses.replace(base, plan_by_gpus=((2, 1e-6),)), "odin", 2, 4, 4, window=2)
    assert short.seconds == run.seconds
    long = simulate(scene, dataclasses.replace(base, plan_by_gpus=((2, 10.0),)), "odin", 2, 4, 4, window=2)
    first = (run.seconds - 0.0) / 2  # both windows do the same kind of work: about half the run each
    assert long.seconds == pytest.approx(run.seconds + 10.0 - first, rel=0.05)


def test_traced_messages_arrive_after_their_sender_and_before_their_reader():
    """The first window's traced arrivals: one per (reading rank, sending vertex) pair of the plan's
    edges across ranks (counted here from the graph), none before the sender's compute ended plus the
    link's latency, and every vertex starts only after its remote inputs arrived."""
    scene = metadata_scene("city", 3000, 40, 64, 48)
    run = simulate(scene, H200_IB, "odin", 4, 4, 4, window=4, trace=True)
    plan, steps = run.traced.plan, run.traced.steps
    src = np.repeat(np.arange(plan.graph.num_nodes), np.diff(plan.graph.indptr))
    dst = np.asarray(plan.graph.indices)
    remote = plan.rank[src] != plan.rank[dst]
    expected = {(int(plan.rank[v]), int(u)) for u, v in zip(src[remote], dst[remote])}
    got = [(int(r), int(u)) for r, u, _ in run.arrivals]
    assert len(got) == len(set(got)) and set(got) == expected and len(expected) > 0
    start, end = {}, {}
    for spans in run.spans:
        for kind, t0, t1, v in spans:
            if kind == "compute":  # an image computes in two spans, around its serving point
                start.setdefault(v, t0)
                end[v] = t1
    arrived = {(int(r), int(u)): t for r, u, t in run.arrivals}
    for u, v in zip(src[remote], dst[remote]):
        t = arrived[int(plan.rank[v]), int(u)]
        assert t >= end[u] + H200_IB.node_latency - 1e-12
        assert start[v] >= t - 1e-12
    assert set(range(steps.num_images)) <= set(start)  # every image computed (spans of positive length)


def test_a_vertex_starts_only_after_its_inputs_on_its_own_rank_ended():
    """The runtime routes a fire's outputs after the fire, so a reader on the same rank (an image's own
    cell's version, or a version's next image there) cannot start before its input's fire has ended, not
    even at a serving point inside that fire: every edge of the plan within one rank, from the traced
    spans (an image computes in two spans; its end is its second's). Both kinds of such edges occur."""
    scene = metadata_scene("city", 3000, 40, 64, 48)
    run = simulate(scene, H200_IB, "odin", 3, 8, 3, window=8, trace=True)
    plan, images = run.traced.plan, run.traced.steps.num_images
    start, end = {}, {}
    for spans in run.spans:
        for kind, t0, t1, v in spans:
            if kind == "compute":
                start.setdefault(v, t0)
                end[v] = t1
    src = np.repeat(np.arange(plan.graph.num_nodes), np.diff(plan.graph.indptr))
    dst = np.asarray(plan.graph.indices)
    local = (plan.rank[src] == plan.rank[dst]) & np.isin(src, list(end)) & np.isin(dst, list(start))
    assert (src[local] < images).any() and (src[local] >= images).any()
    late = [(u, v) for u, v in zip(src[local].tolist(), dst[local].tolist()) if start[v] < end[u] - 1e-12]
    assert late == []


def test_a_vertex_sends_each_message_once_its_own_sender_time_is_paid():
    """The runtime sends a fire's messages one by one, most urgent reader first (``Firing.route`` yields
    each as soon as it is joined), so the first message leaves after one message's sender time, not after
    all of them. The first message of the window (its links idle) arrives, by hand, at its image's end +
    ``overhead`` + the link's latency + its bytes over the link's bandwidth."""
    from odin_sched.odin.program import StepMessages
    from pregel.dataflow import Routes

    scene = metadata_scene("city", 3000, 40, 64, 48)
    run = simulate(scene, H200_IB, "odin", 8, 4, 8, window=4, trace=True)
    win = run.traced
    routes = Routes(win.plan, StepMessages(win.steps, win.count, 59), 8)
    sends = sorted((t0, v, t1) for spans in run.spans for kind, t0, t1, v in spans if kind == "send")
    (t0, u, _), (second, _, _) = sends[0], sends[1]
    assert t0 < second  # one sender first
    groups = [g for g in routes.send_order[routes.vertex_groups[u]:routes.vertex_groups[u + 1]].tolist()
              if routes.remote[g]]
    assert len(groups) > 1  # else every order is the same
    first = groups[0]
    src, dst = int(routes.group_source_rank[first]), int(routes.group_rank[first])
    latency, bandwidth = H200_IB.link(src, dst)
    arrived = {(int(r), int(v)): t for r, v, t in run.arrivals}
    expected = t0 + H200_IB.overhead + float(latency) + 4.0 * int(routes.group_size[first]) / float(bandwidth)
    assert arrived[dst, u] == pytest.approx(expected, rel=1e-12, abs=1e-15)


def _plan(scene, bounds, owner, gpus, batch_size, start, stop, initial_reads):
    """The window [start, stop) of ``scene`` (steps of ``batch_size``, 8 in all) planned as ``simulate``
    plans it on ``h200-ib`` (``initial_reads``: as the runtime does, its images reading the window-start
    versions)."""
    from odin_sched.odin.planner import PlanConfig, plan_cells
    from odin_sched.scenes.visibility import window_margin
    from odin_sched.sim.simulate import local_comm
    from odin_sched.training.image_order import spread_batches
    from odin_sched.training.step import BatchSettings
    from odin_sched.training.train import scene_extent

    settings, extent = BatchSettings(batch_size), scene_extent(scene.viewmats)
    batches = spread_batches(scene.train_ids, 8, batch_size, 0, scene.cache[("sees", batch_size)])
    per_visible = scene.features[:, 2].sum() / max(scene.features[:, 0].sum(), 1.0)
    weights = (H200_IB.image[0], H200_IB.image[1] + H200_IB.image[3] * per_visible, H200_IB.image[2])
    lrs = settings.lrs(extent, start + 1)
    margin = window_margin(lrs["means"], lrs["scales"], settings.betas, stop - start)
    win, _ = plan_cells(local_comm(), bounds, owner, scene, batches, start, stop, margin,
                        PlanConfig(bounds.num_cells, gpus, 0, cost_weights=weights, sh_degree=3),
                        initial_reads=initial_reads)
    return win


def test_migration_bytes_and_seconds_counted_by_hand():
    """Four cells of 10, 20, 30, 40 Gaussians on two ranks of one node; cell 0 moves 0 -> 1 and cell 3
    1 -> 0: 50 Gaussians of 52 words (SH degree 0 with statistics: 8 integer words, 3 x 14, 2), one
    message each way; each rank's busiest link carries cell 3's 40 x 208 bytes, plus one latency."""
    from odin_sched.odin.migration import row_words
    from odin_sched.sim.window_end import migration_cost

    row_bytes = 4 * row_words(14, True)
    assert row_bytes == 208
    counts, owner, new = np.array([10, 20, 30, 40]), np.array([0, 0, 1, 1]), np.array([1, 0, 1, 0])
    seconds, nbytes = migration_cost(H200_IB, counts, owner, new, row_bytes, 2)
    assert nbytes == 50 * 208
    assert seconds == pytest.approx(40 * 208 / H200_IB.node_bandwidth + H200_IB.node_latency, rel=1e-12)
    assert migration_cost(H200_IB, counts, owner, owner, row_bytes, 2) == (0.0, 0.0)


def test_densified_counts_by_hand():
    from odin_sched.sim.window_end import densified_counts

    counts, seen = np.array([100, 100, 200]), np.array([0, 10, 0])
    grown = np.array([100, 100 * np.exp(0.5), 200])  # growth 0.05 per image that sees the cell
    assert np.array_equal(densified_counts(counts, seen, 0.05, 400), np.rint(grown * 400 / grown.sum()))
    assert np.array_equal(densified_counts(counts, seen, 0.0, 400), counts)


def test_simulated_cells_migrate_by_the_runtime_rule():
    """With cells growing fast, the simulator moves cells at window ends by ``rebalance`` (the runtime's
    rule with its default tolerance): replaying its windows' counts through ``rebalance`` gives the same
    moves, each charged at the bytes ``migrate`` sends; without growth nothing moves."""
    from odin_sched.odin.migration import rebalance, row_words
    from odin_sched.odin.options import OdinOptions
    from odin_sched.sim.window_end import densified_counts, migration_cost

    scene = metadata_scene("city", 3000, 40, 64, 48)
    profile = dataclasses.replace(H200_IB, plan_by_gpus=())
    run = simulate(scene, profile, "odin", 4, 8, 4, window=2, densify_growth=0.5)
    still = simulate(scene, profile, "odin", 4, 8, 4, window=2, densify_growth=0.0)
    assert run.migrated_cells > 0 and still.migrated_cells == 0 and still.migration_bytes == 0
    # the replay: the runtime's rule on counts densified by what each planned window's images saw
    _, bounds = cells(scene, OdinOptions.CELLS_PER_RANK * 4)
    owner, total, moved, nbytes = owners_by_count(bounds.count, 4), int(bounds.count.sum()), 0, 0.0
    for start in range(0, 8, 2):
        win = _plan(scene, bounds, owner, 4, 4, start, start + 2, False)
        new = rebalance(bounds.count, owner, 4, 1.25)
        moved += int(np.count_nonzero(new != owner))
        nbytes += migration_cost(profile, bounds.count, owner, new, 4 * row_words(59, True), 4)[1]
        owner = new
        seen = np.bincount(win.steps.version_cell[win.steps.version_index(win.steps.image_writes)],
                           minlength=len(owner))
        bounds = dataclasses.replace(bounds, count=densified_counts(bounds.count, seen, 0.5, total))
    assert (run.migrated_cells, run.migration_bytes) == (moved, nbytes)


def test_a_migration_keeps_the_plan_made_ahead():
    """Planning that fits inside a window's run waits for nothing, with cells migrating too: the moves
    are decided from the metadata the plan made ahead was made from (as the runtime's ``_moved``), so no
    window is planned again: with 1 ms of planning a window (a window's run takes over 10 ms here) the
    run's clock and waits are those of the run with planning free, exactly (a dropped plan would wait
    its whole 1 ms)."""
    scene = metadata_scene("city", 3000, 40, 64, 48)
    free = dataclasses.replace(H200_IB, plan_by_gpus=())
    run = simulate(scene, free, "odin", 4, 8, 4, window=2, densify_growth=0.5)
    assert run.migrated_cells > 0
    short = simulate(scene, dataclasses.replace(free, plan_by_gpus=((4, 1e-3),)), "odin", 4, 8, 4, window=2,
                     densify_growth=0.5)
    assert short.seconds == run.seconds and short.wait.sum() == run.wait.sum()


def test_no_version_of_a_cell_an_image_reads_can_be_served_while_it_runs():
    """``StepMessages.servable``'s argument, against networkx on a planned window (odin mode): every
    version of every cell an image reads is an ancestor of the image or a descendant of it, so none is
    ready while the image runs."""
    import networkx as nx

    scene = metadata_scene("city", 3000, 40, 64, 48)
    simulate(scene, H200_IB, "odin", 3, 6, 3, window=6)  # made the batches' visibility
    bounds = cells(scene, 48)[1]
    win = _plan(scene, bounds, owners_by_count(bounds.count, 3), 3, 3, 0, 6, True)  # as the runtime plans
    steps, plan = win.steps, win.plan
    graph = nx.DiGraph()
    graph.add_nodes_from(range(plan.graph.num_nodes))
    graph.add_edges_from(zip(np.repeat(np.arange(plan.graph.num_nodes), np.diff(plan.graph.indptr)).tolist(),
                             np.asarray(plan.graph.indices).tolist()))
    versions_of = {}
    for v in range(steps.num_versions):
        versions_of.setdefault(int(steps.version_cell[v]), []).append(int(steps.version_vertex(v)))
    checked = 0
    for image in range(steps.num_images):
        related = nx.ancestors(graph, image) | nx.descendants(graph, image)
        reads = steps.image_reads[steps.image_reads_indptr[image]:steps.image_reads_indptr[image + 1]]
        for cell in steps.version_cell[steps.version_index(reads)].tolist():
            assert set(versions_of[cell]) <= related, (image, cell)
            checked += 1
    assert checked > 0


def test_owners_serve_cell_versions_between_an_images_forward_and_backward():
    """In the simulated runs every image computes in two spans, the first ``forward_share`` of its cost;
    a rank's cell versions fired between them are the ones served, and they happen (some version runs
    inside an image); without the split (forward share 1, the serving point at the image's end) the
    runs wait more."""
    scene = metadata_scene("city", 3000, 40, 64, 48)
    run = simulate(scene, H200_IB, "odin", 3, 8, 3, window=8, trace=True)  # 3 GPUs: some waiting (4: ~none)
    images = run.traced.steps.num_images
    served = 0
    for spans in run.spans:
        computes = [(v, t0, t1) for kind, t0, t1, v in spans if kind == "compute"]
        parts = {}
        for v, t0, t1 in computes:
            parts.setdefault(v, []).append(t1 - t0)
        assert all(len(parts[v]) == 2 for v in parts if v < images)
        assert all(len(parts[v]) == 1 for v in parts if v >= images)
        for v in (v for v in parts if v < images):
            forward, backward = parts[v]
            assert forward / (forward + backward) == pytest.approx(H200_IB.forward_share, rel=1e-6)
        for (a, _, _), (b, _, _), (c, _, _) in zip(computes, computes[1:], computes[2:]):
            served += int(a < images and b >= images and c == a)
    assert served > 0
    late = simulate(scene, dataclasses.replace(H200_IB, forward_share=1.0), "odin", 3, 8, 3, window=8)
    assert late.wait.sum() > run.wait.sum()
