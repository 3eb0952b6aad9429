"""The bound that keeps a window's assignment (``odin_sched.sim.bounds``), against hand-worked values,
networkx's longest path and the simulated runs it bounds."""
import dataclasses

import networkx as nx
import numpy as np
import pytest

from odin_sched.odin.program import StepMessages
from odin_sched.sim.bounds import (assigned_bound, busiest_rank, hidden_at, longest_path, seconds_for_hidden,
                                  transfer_path, with_planning)
from odin_sched.sim.costmodel import H200_IB
from odin_sched.sim.grendel import hidden_vs_grendel
from odin_sched.sim.scene import metadata_scene
from odin_sched.sim.simulate import simulate
from pregel.dataflow import Routes

COLUMNS = 59  # float32 parameters per Gaussian at SH degree 3, as simulate sends them


def _networkx_longest(cost, src, dst, weight) -> float:
    """The heaviest path (vertex costs and edge weights) by networkx: every edge u -> v weighs cost[u] +
    weight, and every vertex reaches an extra sink by an edge of its own cost."""
    graph = nx.DiGraph()
    sink = len(cost)
    for v, c in enumerate(cost):
        graph.add_edge(v, sink, weight=float(c))
    for u, v, w in zip(src, dst, weight):
        graph.add_edge(int(u), int(v), weight=float(cost[u] + w))
    return nx.dag_longest_path_length(graph, weight="weight")


def test_longest_path_by_hand():
    # 0 (phase 0) -> 2 (phase 1) -> 3 (phase 2); 1 (phase 0) -> 3; 4 alone (phase 1)
    # paths: 0-2-3: 1 + 0.5 + 2 + 0 + 3 = 6.5; 1-3: 4 + 1 + 3 = 8; 4: 7.5
    cost = np.array([1.0, 4.0, 2.0, 3.0, 7.5])
    src, dst, weight = np.array([0, 2, 1]), np.array([2, 3, 3]), np.array([0.5, 0.0, 1.0])
    phase = np.array([0, 0, 1, 2, 1])
    assert longest_path(cost, src, dst, weight, phase) == 8.0
    assert longest_path(cost, src, dst, weight + np.array([0, 0.6, 0]), phase) == 8.0  # 0-2-3: 7.1
    assert longest_path(cost, src, dst, weight + np.array([0, 1.6, 0]), phase) == pytest.approx(8.1)  # 0-2-3
    assert longest_path(cost, src, dst, np.array([3.0, 0.0, 1.0]), phase) == 9.0  # 0-2-3 now: 1 + 3 + 2 + 3
    assert longest_path(np.zeros(0), src[:0], dst[:0], weight[:0], phase[:0]) == 0.0
    with pytest.raises(ValueError, match="later phase"):
        longest_path(cost, np.array([2]), np.array([4]), np.array([0.0]), phase)


@pytest.mark.parametrize("seed", range(5))
def test_longest_path_equals_networkx(seed):
    rng = np.random.default_rng(seed)
    n = 60
    phase = rng.integers(0, 8, n)
    u, v = rng.integers(0, n, (2, 300))
    keep = phase[u] < phase[v]
    src, dst = u[keep], v[keep]
    pairs = np.unique(src * n + dst)  # networkx keeps one edge per pair
    src, dst = pairs // n, pairs % n
    cost, weight = rng.random(n), rng.random(len(src)) * (rng.random(len(src)) < 0.5)
    assert longest_path(cost, src, dst, weight, phase) == pytest.approx(_networkx_longest(cost, src, dst, weight),
                                                                        rel=1e-12)


def _first_window(gpus: int):
    """The first planned window of odin on a small city (``simulate``'s plan, traced), its messages' routes
    and random vertex costs."""
    scene = metadata_scene("city", 3000, 40, 64, 48)
    run = simulate(scene, dataclasses.replace(H200_IB, plan_by_gpus=()), "odin", gpus, 6, gpus, window=3,
                   trace=True)
    win = run.traced
    routes = Routes(win.plan, StepMessages(win.steps, win.count, COLUMNS), gpus)
    cost = np.random.default_rng(gpus).random(win.steps.num_vertices) * 1e-3
    return win, routes, cost


@pytest.mark.parametrize("gpus", [3, 12])  # 12: two nodes of h200-ib (8 GPUs each), both links in use
def test_assigned_bound_equals_its_definition_by_networkx(gpus):
    """The bound, rebuilt edge by edge: the step graph's dependencies (not the plan's ordering edges; none
    from initial versions, which the simulator's plan drops), each edge between two ranks weighing the
    sender's time for one message (sent first, it waits for no other of its source's), the link's latency and the
    bytes of the message (``StepMessages.payload_size``: a version's parameters once, an image's gradients
    summed over the cells of that rank) over its bandwidth; and the busiest rank's work with its sends."""
    win, routes, cost = _first_window(gpus)
    steps, rank, profile = win.steps, win.plan.rank, H200_IB
    program = StepMessages(steps, win.count, COLUMNS)
    g = steps.graph
    edges = [(u, int(v)) for u in range(g.num_nodes) for v in g.indices[g.indptr[u]:g.indptr[u + 1]]
             if steps.is_image(u) or steps.version_batch[u - steps.num_images] >= 0]
    floats = {}  # (source, destination rank) -> float32 values of its message
    for u, v in edges:
        if rank[u] != rank[v]:
            size = int(program.payload_size(np.array([u]), np.array([v]))[0])
            key = (u, int(rank[v]))
            floats[key] = size if not steps.is_image(u) else floats.get(key, 0) + size
    weight = []
    for u, v in edges:
        if rank[u] == rank[v]:
            weight.append(0.0)
            continue
        node = rank[u] // profile.gpus_per_node == rank[v] // profile.gpus_per_node
        latency, bandwidth = ((profile.node_latency, profile.node_bandwidth) if node
                              else (profile.latency, profile.bandwidth))
        weight.append(profile.overhead + latency + 4.0 * floats[(u, int(rank[v]))] / bandwidth)
    work, sends = np.zeros(gpus), np.zeros(gpus)
    for v in range(g.num_nodes):
        work[rank[v]] += cost[v]
    for u, _ in floats:
        sends[rank[u]] += profile.overhead
    busy = work + sends
    src, dst = np.array(edges).T
    path = _networkx_longest(cost, src, dst, np.array(weight))
    assert transfer_path(steps, win.plan, routes, cost, profile, gpus) == pytest.approx(path, rel=1e-12)
    assert busiest_rank(win.plan, routes, cost, profile, gpus) == pytest.approx(busy.max(), rel=1e-12)
    # a host thread paying the sender's time beside the GPU: the busier of the two per rank
    host = dataclasses.replace(profile, host_sends=True)
    assert busiest_rank(win.plan, routes, cost, host, gpus) == pytest.approx(np.maximum(work, sends).max(), rel=1e-12)
    assert assigned_bound(steps, win.plan, routes, cost, profile, gpus) == max(
        busiest_rank(win.plan, routes, cost, profile, gpus), transfer_path(steps, win.plan, routes, cost, profile, gpus))
    assert path > _networkx_longest(cost, src, dst, np.zeros(len(src)))  # the messages lengthen it
    if gpus > 8:
        assert len({bool(rank[u] // 8 == rank[v] // 8) for u, v in edges if rank[u] != rank[v]}) == 2


@pytest.mark.parametrize("host_sends", [False, True])
@pytest.mark.parametrize("mode", ["odin", "barrier"])
@pytest.mark.parametrize("gpus", [4, 12])
def test_simulated_runs_respect_the_bounds(mode, gpus, host_sends):
    """Every simulated run of the windows takes at least the assignment's bound, which is at least the
    ceiling's (the busiest rank works at least the mean; charging edges lengthens no path less); also with
    the sender's time on a host thread beside the GPU."""
    scene = metadata_scene("city", 3000, 40, 64, 48)
    profile = dataclasses.replace(H200_IB, plan_by_gpus=(), host_sends=host_sends)
    run = simulate(scene, profile, mode, gpus, 8, gpus, window=4)
    assert run.seconds >= run.assigned_bound_seconds >= run.bound_seconds > 0
    assert run.steps_per_second <= run.assigned_ceiling_steps_per_second <= run.ceiling_steps_per_second


def test_hidden_target_by_hand():
    # 4 GPUs for 1 s: 3 GPU-s computing, 0.2 waiting on planning, so 0.8 communicating or waiting;
    # barrier exposes 2: 1 - 0.8 / 2 = 0.6
    assert hidden_at(1.0, 4, 3.0, 0.2, 2.0) == pytest.approx(0.6)
    assert seconds_for_hidden(0.6, 4, 3.0, 2.0) == pytest.approx(0.95)  # (3 + 0.4 x 2) / 4
    assert hidden_at(seconds_for_hidden(0.9, 8, 5.0, 3.0), 8, 5.0, 0.0, 3.0) == pytest.approx(0.9)
    # windows of (1.0 - 0.2) / 4 = 0.2 s: planning 0.3 s outlasts each by 0.1, waited before windows 2-4
    assert with_planning(1.0, 4, 0.3, 0.2) == pytest.approx(1.3)
    assert with_planning(1.0, 4, 0.1, 0.2) == 1.0  # hidden behind every window


@pytest.mark.parametrize("gpus", [3, 12])
def test_hidden_at_a_run_equals_its_exposed_fraction(gpus):
    """A simulated odin run's own seconds give the exposed hidden fraction counted from its communication
    and waiting (every GPU-second of a run is computing, communicating or waiting)."""
    scene = metadata_scene("city", 3000, 40, 64, 48)
    free = dataclasses.replace(H200_IB, plan_by_gpus=())
    odin, barrier = (simulate(scene, free, mode, gpus, 8, gpus, window=4) for mode in ("odin", "barrier"))
    exposed = barrier.comm.sum() + barrier.wait.sum()
    assert hidden_at(odin.seconds, gpus, odin.compute.sum(), 0.0, exposed) == pytest.approx(
        hidden_vs_grendel(odin.comm, odin.wait, barrier.comm, barrier.wait), abs=1e-9)
