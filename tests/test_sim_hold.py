"""The hold that gives up (``DataflowPlan.hold_share``) in the simulator's virtual time, on a hand-made window
whose fire times are worked by hand."""
import dataclasses
from types import SimpleNamespace

import numpy as np
import pytest

from odin_sched.odin.depgraph import build_step_graph
from odin_sched.odin.planner import batch_sequence
from odin_sched.sim.costmodel import load_profile
from odin_sched.sim.window_run import WindowRun
from pregel.dataflow import DataflowPlan


@pytest.mark.parametrize("share,starts,let_go", [
    (np.inf, [1.0, 0.0, 2.1, 2.2], 0),
    (1.0, [1.0, 0.0, 0.201, 0.401], 2),
    (20.0, [1.0, 0.0, 2.1, 2.2], 0),
])
def test_a_held_image_starts_after_its_share_of_the_mean_image(share, starts, let_go):
    """Camera 0 sees cell 0 (owned by rank 0), camera 1 cell 1 (rank 1); batches (0, 1) and (1, 1); rank 1 runs
    the four images (0.1 s each), versions cost 1 ms, a message 1 s of its sender's time and nothing in transit.
    Rank 1 fires image 1 (batch 0, local cell) at 0, then version (1, 0) until 0.101; image 0 (batch 0) waits
    for cell 0's initial version, which rank 0 sends at 0 and which leaves at 1.0, and images 2 and 3 (batch 1)
    are held back. Held until their turn: image 0 runs 1.0-1.1, its gradient to rank 0 costs rank 1 a second,
    images 2 and 3 start at 2.1 and 2.2. With S = 1 (mean image 0.1 s): image 2 goes at 0.101 + 0.1, image 3
    0.1 after image 2 ends (0.401); image 0 still at 1.0. With S = 20 the wait (2 s) outlasts the message."""
    steps = build_step_graph(np.array([[0, 1], [1, 1]]), np.array([[1, 0], [0, 1]], bool))
    rank = np.concatenate([np.ones(steps.num_images, np.int64), np.where(steps.version_cell == 0, 0, 1)])
    plan = DataflowPlan(steps.graph, rank, np.zeros(steps.num_vertices), steps.phase(), batch_sequence(steps), 0,
                        share)
    cost = np.concatenate([np.full(steps.num_images, 0.1), np.where(steps.version_batch < 0, 0.0, 1e-3)])
    profile = dataclasses.replace(load_profile("h200-ib"), overhead=1.0, latency=0.0, node_latency=0.0,
                                  bandwidth=1e30, node_bandwidth=1e30)
    run = WindowRun(SimpleNamespace(steps=steps, plan=plan, count=np.array([10, 20])), cost, profile, 2, True, 14)
    run.dataflow()
    got = [min(t0 for kind, t0, _, u in run.spans[1] if kind == "compute" and u == v) for v in range(4)]
    assert got == pytest.approx(starts, abs=1e-12)
    assert run.firings[1].counts["let_go"] == let_go
