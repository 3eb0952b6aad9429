"""The joining what-if of the simulator (odin_sched/sim/joining.py): classes of equal in-neighbours against
Python sets, and a hand-made window's messages counted by hand for each design."""
from types import SimpleNamespace

import numpy as np
import pytest

from odin_sched.odin.depgraph import build_step_graph
from odin_sched.sim.costmodel import load_profile
from odin_sched.sim.joining import DynamicJoin, MergedVersions, same_inputs
from odin_sched.sim.scene import metadata_scene
from odin_sched.sim.simulate import simulate
from odin_sched.sim.window_run import WindowRun
from pregel.dataflow import DataflowPlan
from pregel.graph_io import GraphData

COLUMNS = 14


@pytest.mark.parametrize("seed", range(4))
def test_same_inputs_equal_python_sets(seed):
    rng = np.random.default_rng(seed)
    n = 60
    # each vertex from 12 on reads one of a few sets of sources 0-11 (many alike), or a random set, or none
    pool = [rng.choice(12, rng.integers(1, 4), replace=False) for _ in range(6)]
    sets = [pool[rng.integers(6)] if rng.random() < 0.7 else rng.integers(0, 12, rng.integers(0, 4))
            for _ in range(12, n)]
    src = np.concatenate([np.asarray(x, np.int64) for x in sets] + [rng.integers(0, 12, 5)])
    dst = np.concatenate([np.full(len(x), 12 + i) for i, x in enumerate(sets)] + [np.full(5, 12)])  # repeats count once
    order = np.lexsort((dst, src))
    indptr = np.searchsorted(src[order], np.arange(n + 1))
    graph = GraphData(indptr.astype(np.int64), dst[order].astype(np.int64))
    owner = rng.integers(0, 3, n)
    vertices = np.flatnonzero(rng.random(n) < 0.8)
    got = same_inputs(graph, vertices, owner)
    ins = {v: frozenset(src[dst == v].tolist()) for v in range(n)}
    groups = {}
    for v in vertices.tolist():
        if ins[v]:
            groups.setdefault((int(owner[v]), ins[v]), []).append(v)
    expected = [sorted(g) for g in groups.values() if len(g) > 1]
    assert sorted(expected) == sorted(np.flatnonzero(got == c).tolist() for c in range(got.max() + 1))
    assert (got[[v for g in groups.values() if len(g) == 1 for v in g]] == -1).all()
    assert len(expected) > 0  # the draw has classes to find


def _hand_window():
    """Cameras 1 and 2 see cells 0 and 1, camera 0 cell 2; batches (0, 1, 2) twice. Vertices: images 0-5,
    versions (c, -1), (c, 0), (c, 1) of cell 0 (6-8), 1 (9-11), 2 (12-14). Rank 0 owns every cell and runs
    images 0 and 3 (camera 0); rank 1 runs the others. Image 0 is long, so batch 0's gradients of cells 0 and 1
    from rank 1 arrive during its forward pass: versions 7 and 10 are served at its serving point together."""
    visible = np.array([[0, 0, 1], [1, 1, 0], [1, 1, 0]], bool)
    steps = build_step_graph(np.array([[0, 1, 2], [0, 1, 2]]), visible)
    rank = np.array([0, 1, 1, 0, 1, 1] + [0] * 9)
    plan = DataflowPlan(steps.graph, rank, np.zeros(15), steps.phase())
    win = SimpleNamespace(steps=steps, plan=plan, count=np.array([10, 20, 30]))
    cost = np.array([1.0, 0.01, 0.01, 0.01, 0.01, 0.01] + [0.0, 1e-3, 1e-3] * 3)
    return win, cost


def _messages(joining):
    win, cost = _hand_window()
    run = WindowRun(win, cost, load_profile("h200-ib"), 2, False, COLUMNS)
    if joining is not None:
        run.join_with(joining(win, run.routes), joining.flush)
    run.dataflow()  # raises if a rank never fires all its vertices
    return run.messages.tolist()


def test_hand_window_messages_counted_by_hand():
    # today: rank 0 sends versions 6, 9 (initial) and 7, 10 to rank 1; rank 1 one gradient message per image
    assert _messages(None) == [4, 4]
    # 'serving': 7 and 10, served at image 0's serving point, go as one
    assert _messages(DynamicJoin("serving")) == [3, 4]
    # 'run': so do 6 and 9, fired one after the other before image 0; an image's gradients go before the next
    # image or a wait, and rank 1's images each send to rank 0 alone
    assert _messages(DynamicJoin("run")) == [2, 4]
    # merged: 7 and 10 (inputs: images 1 and 2) are one vertex, as are 8 and 11 (no readers); initial versions
    # have no inputs and stay apart
    assert _messages(MergedVersions()) == [3, 4]


def test_merged_versions_stats_by_hand():
    win, _ = _hand_window()
    run = WindowRun(win, np.zeros(15), load_profile("h200-ib"), 2, False, COLUMNS)
    # the simulator's initial versions carry nothing (every rank holds the window-start parameters); versions
    # 7 and 10 send their cells (10 and 20 Gaussians) to rank 1, merged as one message of both
    words = float((10 + 20) * COLUMNS)
    hook = MergedVersions()
    key, class_words = hook(win, run.routes)
    assert hook.stats == [{"messages": 4, "merged_messages": 3, "words": words, "merged_words": words}]
    assert sorted(class_words.tolist()) == [0.0, words]  # classes {7, 10} and {8, 11} (no readers)
    r = run.routes
    source_key = dict(zip(r.group_src[r.remote].tolist(), key[r.remote].tolist()))  # one message each
    assert source_key[7] == source_key[10] >= 0
    assert all(k == -1 for u, k in source_key.items() if u not in (7, 10))  # 6, 9 and the images' alone
    # with the initial versions merged per owner (6, 9 and 12: no inputs), 6 and 9 go to rank 1 as one
    hook = MergedVersions(initial=True)
    hook(win, run.routes)
    assert hook.stats[0]["merged_messages"] == 2


def test_no_key_joins_nothing_and_joining_keeps_the_work():
    """Keys of -1 send every message alone, at once: the run is the runtime's; joined, the same vertices
    fire at the same cost, with fewer messages."""
    scene = metadata_scene("city", 3000, 40, 64, 48)
    profile = load_profile("h200-ib", scene.total_gaussians)

    class Alone(DynamicJoin):
        def __call__(self, win, routes):
            return np.full(len(routes.group_src), -1, np.int64), None

    today = simulate(scene, profile, "odin", 8, 4, 8, window=2)
    alone = simulate(scene, profile, "odin", 8, 4, 8, window=2, joining=Alone("run"))
    joined = simulate(scene, profile, "odin", 8, 4, 8, window=2, joining=DynamicJoin("run"))
    assert alone.seconds == today.seconds and alone.messages_sent == today.messages_sent > 0
    assert joined.messages_sent < today.messages_sent
    assert joined.compute.sum() == pytest.approx(today.compute.sum())
