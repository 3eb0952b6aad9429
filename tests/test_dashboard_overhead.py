"""The within-run A/B hook of benchmarks/dashboard_overhead.py: the block schedule, the marks' bookkeeping
(against hand-worked times from a fake clock), and both trainers switching their dashboard status off and
on with the blocks (the steps whose status is handed over, seen by a spy on the product's own hooks).
No timing is asserted: the overhead itself is measured by the benchmark."""
import importlib.util
import os
import threading
from types import SimpleNamespace

import numpy as np
import pytest

from odin_sched.odin.options import OdinOptions
from odin_sched.odin.trainer import DistributedTrainer, train_distributed
from odin_sched.scenes.scene_gen import generate_scene
from odin_sched.scenes.scene_io import write_scene
from odin_sched.training import train as single
from odin_sched.training.config import TrainConfig
from odin_sched.training.status import TrainStatus
from pregel.comm import Comm

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("dashboard_overhead",
                                                  os.path.join(REPO, "benchmarks", "dashboard_overhead.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_schedule_is_seeded_balanced_and_one_block_of_each_pair_on(bench):
    switch = bench.BlockSwitch(block=4, warmup=2, pairs=6, seed=1)
    assert switch.steps == 2 + 2 * 4 * 6
    assert switch.on_for(1) and switch.on_for(2)  # the warm-up is on
    states = np.array([switch.on_for(s) for s in range(3, switch.steps + 1)]).reshape(6, 2, 4)
    assert (states == states[:, :, :1]).all()  # a block is in one state
    assert (states[:, 0, 0] != states[:, 1, 0]).all()  # one block of each pair on, the other off
    assert states[:, 0, 0].sum() == 3  # as many pairs on first as off first
    again = bench.BlockSwitch(block=4, warmup=2, pairs=6, seed=1)
    assert [again.on_for(s) for s in range(1, 51)] == [switch.on_for(s) for s in range(1, 51)]
    orders = {tuple(bench.BlockSwitch(4, 2, 6, seed).first_on) for seed in range(8)}
    assert len(orders) > 1  # the seed draws the order


def test_marks_make_blocks_flip_the_flag_and_gate_and_pause_the_status_clock(bench):
    times = iter(np.arange(0.0, 100.0, 0.5) ** 1.5)  # increasing, uneven stretches
    switch = bench.BlockSwitch(block=2, warmup=1, pairs=2, seed=0, clock=lambda: next(times))
    switch.flag, switch.gate = bytearray(b"\1"), threading.Event()
    switch.gate.set()
    switch.status = SimpleNamespace(last_write=0.0)
    seen, stamps = [], []
    for step in range(1, switch.steps + 1):  # as the one-process trainer: a mark after every step
        on = switch.mark(step, step + 1)
        stamps.append(switch.marks[-1][2])
        seen.append((on, switch.flag[0], switch.gate.is_set()))
    assert all(on == bool(flag) == gate for on, flag, gate in seen)
    expected_on = [switch.on_for(s + 1) for s in range(1, switch.steps)]
    assert [on for on, _, _ in seen[:-1]] == expected_on
    blocks = switch.blocks()
    assert [b["block"] for b in blocks] == [0, 1, 2, 3]
    assert [(b["first"], b["last"], b["steps"]) for b in blocks] == [(2, 3, 2), (4, 5, 2), (6, 7, 2), (8, 9, 2)]
    for b in blocks:  # a block's time runs from the mark after its first step's predecessor to its last step's
        assert b["seconds"] == pytest.approx(stamps[b["last"] - 1] - stamps[b["first"] - 2])
        assert b["on"] == switch.on_for(b["first"])
    assert not all(b["on"] for b in blocks)
    # the status clock stood still while off (the run's end turns it on again)
    assert switch.status.last_write == pytest.approx(sum(b["seconds"] for b in blocks if not b["on"]))


def test_pairs_across_an_sh_degree_change_are_dropped_and_overlap(bench):
    row = {"blocks": [{"on": True, "steps": 100, "seconds": 1.1, "first": 851, "last": 950},
                      {"on": False, "steps": 100, "seconds": 1.0, "first": 951, "last": 1050},  # degree 0 -> 1
                      {"on": False, "steps": 100, "seconds": 2.0, "first": 1051, "last": 1150},
                      {"on": True, "steps": 100, "seconds": 2.1, "first": 1151, "last": 1250}]}
    rates, dropped = bench.block_pairs(row)
    assert dropped == 1 and rates.tolist() == [[0.021, 0.02]]
    assert bench.overlap([(0.0, 1.0), (2.0, 3.0)], [(0.5, 2.5)]) == pytest.approx(1.0)
    rng = np.random.default_rng(5)  # against every span and stretch intersected one by one
    stretches = np.sort(rng.uniform(0, 100, 40)).reshape(-1, 2)
    spans = np.sort(rng.uniform(-5, 105, 30)).reshape(-1, 2)
    brute = sum(max(0.0, min(b, d) - max(a, c)) for a, b in spans for c, d in stretches)
    assert bench.overlap(spans.tolist(), stretches.tolist()) == pytest.approx(brute)


@pytest.fixture(scope="module")
def scene_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("ab") / "scene.h5"
    write_scene(path, generate_scene(60, 6, 16, 12, seed=3))
    return path


def _spy(monkeypatch, cls, name, calls, step_of):
    method = getattr(cls, name)

    def spy(*args, **kwargs):
        calls.append(step_of(*args, **kwargs))
        return method(*args, **kwargs)

    monkeypatch.setattr(cls, name, spy)


@pytest.mark.parametrize("trainer", ["single", "odin"])
def test_trainers_hand_over_their_status_only_in_on_blocks(bench, trainer, scene_file, tmp_path, monkeypatch):
    switch = bench.BlockSwitch(block=2, warmup=2, pairs=3, seed=2)
    config = TrainConfig(scene_file, switch.steps, tmp_path / "t.h5", eval_every=4, progress=False, status=True)
    handed = []
    _spy(monkeypatch, TrainStatus, "update", handed, lambda self, step, *a, **k: (step, k.get("force", False)))
    if trainer == "single":
        monkeypatch.setattr(single, "TrainStatus", bench.switched_status(switch))
        monkeypatch.setattr(single, "evaluate", single.evaluate)  # restored after the test
        bench.timed_evaluations(switch, single, "evaluate")
        single.train(config)
    else:
        for name in ("_report_due", "run", "_evaluate"):  # restored after the test
            monkeypatch.setattr(DistributedTrainer, name, getattr(DistributedTrainer, name))
        bench.switch_odin(switch)
        bench.timed_evaluations(switch, DistributedTrainer, "_evaluate")
        train_distributed(Comm(), config, OdinOptions(mode="odin", window=2))
    steps = [step for step, _ in handed]
    assert steps and all(switch.on_for(step) for step in steps)  # nothing handed over in an off block
    forced = {step for step, force in handed if force}
    evaluations = {s for s in set(range(4, switch.steps + 1, 4)) | {switch.steps} if switch.on_for(s)}
    if trainer == "single":  # Odin forces every report, also those its 2 s clock makes
        assert forced == evaluations  # each on block's evaluation, in its middle
    else:
        assert forced >= evaluations
    blocks = switch.blocks()
    assert len(blocks) == 6 and all(b["steps"] == 2 for b in blocks)
    with_evaluation = [b["block"] for b in blocks if b["evaluation_s"] > 0]
    assert with_evaluation == [0, 2, 4, 5]  # blocks (2, 4], (6, 8], (10, 12] and (12, 14]: steps 4, 8, 12, 14
    marked = [done for done, _, _, _ in switch.marks]
    assert marked == sorted(marked) and marked[-1] == switch.steps
    if trainer == "odin":
        assert marked[:-1] == list(range(0, switch.steps, 2))  # every window's start, then the end
    else:
        assert marked == list(range(1, switch.steps + 1))


@pytest.mark.parametrize("n", [20, 37, 200])
def test_hodges_lehmann_interval_inverts_scipys_wilcoxon_test(bench, n):
    from scipy.stats import wilcoxon

    d = np.random.default_rng(n).standard_t(3, n) * 0.05 + 0.01
    estimate, low, high = bench.hodges_lehmann_ci(d)

    def p(shift):  # the signed-rank test of d - shift (normal approximation, as the interval's)
        return wilcoxon(d - shift, method="approx", correction=False).pvalue

    assert p(estimate) > 0.9
    for bound, inward in ((low, 1), (high, -1)):  # the interval is the shifts the test does not reject at 5 %
        assert p(bound + inward * 1e-9) >= 0.05 - 1e-12 and p(bound - inward * 1e-9) < 0.05
