"""The host-sends what-if of the simulator (``CostProfile.host_sends``): a hand-made window's fire times worked
out by hand, with the sender's time on the GPU (today) and on a host thread beside it."""
import dataclasses

import pytest

from odin_sched.sim.config import SimulateConfig
from odin_sched.sim.costmodel import load_profile
from odin_sched.sim.scene import metadata_scene
from odin_sched.sim.simulate import run, simulate
from odin_sched.sim.window_run import WindowRun
from pregel.errors import InputError

from test_sim_joining import COLUMNS, _hand_window


def _run(host_sends: bool):
    """The hand window (``test_sim_joining._hand_window``) on 2 GPUs, every message costing its sender 1 s and
    nothing in transit."""
    profile = dataclasses.replace(load_profile("h200-ib"), overhead=1.0, latency=0.0, node_latency=0.0,
                                  bandwidth=1e30, node_bandwidth=1e30, host_sends=host_sends)
    win, cost = _hand_window()
    run = WindowRun(win, cost, profile, 2, True, COLUMNS)
    run.dataflow()
    return run


def _start(run, rank: int, vertex: int) -> float:
    return min(t0 for kind, t0, _, v in run.spans[rank] if kind == "compute" and v == vertex)


@pytest.mark.parametrize("host_sends", [False, True])
def test_hand_window_fire_times_by_hand(host_sends):
    """Rank 0 first fires the initial versions 6, 9 and 12 (cost 0); 6 and 9 go to rank 1 and leave at 1 s and
    2 s either way (each after its own sender's second). Today rank 0's GPU pays both seconds before its image 0
    (it reads 12, local) begins at 2 s; with host sends it begins at once. Rank 1's images 1 and 2 read 6 and 9:
    image 1 runs from 2 s to 2.01 s and sends its gradients; today rank 1's GPU pays that second and image 2
    begins at 3.01 s, with host sends at 2.01 s."""
    run = _run(host_sends)
    assert _start(run, 0, 0) == pytest.approx(0.0 if host_sends else 2.0, abs=1e-12)
    assert _start(run, 1, 1) == pytest.approx(2.0, abs=1e-12)
    assert _start(run, 1, 2) == pytest.approx(2.01 if host_sends else 3.01, abs=1e-12)
    assert run.messages.tolist() == [4, 4]  # the same messages (counted by hand in test_sim_joining)


def test_host_sends_refused_with_shared_cores(tmp_path):
    profile = dataclasses.replace(load_profile("cpu-here"), host_sends=True)
    with pytest.raises(InputError, match="host_sends"):
        simulate(metadata_scene("city", 3000, 40, 64, 48), profile, "odin", 2, 4, 2, window=2)
    out = tmp_path / "s.h5"
    with pytest.raises(InputError, match=r"^SimulateConfig\.host_sends: .* not with shared_cores$"):
        run(SimulateConfig(out, gpus=(2,), host_sends=True, shared_cores=2))
    assert not out.exists()
