"""The schedule's vertex programs at P = 1, 2 and 3 against networkx and a plain-loop greedy.

One module-scoped fixture draws small random windows, plans them in this process (P = 1) and
runs tests/mpi_scripts/plan_schedules.py once per P = 2, 3 under mpiexec (every case in one launch).
"""

import os
import shutil
import subprocess
import sys

import networkx as nx
import numpy as np
import pytest

from odin_sched.odin.depgraph import build_step_graph, critical_path
from odin_sched.odin.schedule import greedy_assignment, plan_schedule
from pregel.comm import Comm
from pregel.convert import to_networkx
from pregel.errors import InputError

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "mpi_scripts"))
from plan_schedules import plan_cases  # noqa: E402

SIZES = (1, 2, 3)
SCRIPT = os.path.join(os.path.dirname(__file__), "mpi_scripts", "plan_schedules.py")
MPIEXEC = shutil.which("mpiexec", path=os.path.dirname(sys.executable)) or "mpiexec"
FIELDS = ("level", "priority", "rank", "phase", "priority_hops")


def _cases() -> dict:
    """Random windows (B = 1, 2, 3 and a wide one) with integer costs, so sums are exact."""
    rng = np.random.default_rng(7)
    cases = {}
    for name, (num_batches, batch_size, cameras, cells, density) in {
            "b1": (7, 1, 9, 6, 0.3), "b2": (6, 2, 10, 5, 0.35), "b3": (5, 3, 12, 7, 0.25),
            "wide": (4, 6, 14, 8, 0.3)}.items():
        batches = rng.integers(0, cameras, (num_batches, batch_size))
        visible = rng.random((cameras, cells)) < density
        steps = build_step_graph(batches, visible)
        fields = {"batches": batches, "visible": visible,
                  "image_cost": rng.integers(1, 6, steps.num_images).astype(float),
                  "version_cost": rng.integers(0, 3, steps.num_vertices - steps.num_images).astype(float),
                  "cell_bytes": rng.integers(1, 10, cells).astype(float),
                  "hop_cost": np.array([3.0, 2.0])}  # per edge between ranks, per byte of its cell
        for size in SIZES:
            fields[f"owner_{size}"] = rng.integers(0, size, cells)
        cases.update({f"{name}/{key}": value for key, value in fields.items()})
    return cases


@pytest.fixture(scope="module")
def plans(tmp_path_factory):
    folder = tmp_path_factory.mktemp("schedule")
    cases = _cases()
    np.savez(folder / "cases.npz", **cases)
    env = dict(os.environ, OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1")
    for size in SIZES[1:]:
        subprocess.run([MPIEXEC, "-n", str(size), sys.executable, "-m", "mpi4py", SCRIPT, str(folder)],
                       check=True, timeout=300, env=env)
    per_rank = {1: [plan_cases(Comm(), cases)]}
    for size in SIZES[1:]:
        per_rank[size] = [dict(np.load(folder / f"schedule_{size}_{rank}.npz")) for rank in range(size)]
    names = sorted({key.split("/")[0] for key in cases})
    return cases, names, per_rank


def _window(cases, name):
    """(step graph, networkx graph, vertex cost [N]) of a case."""
    steps = build_step_graph(cases[f"{name}/batches"], cases[f"{name}/visible"])
    cost = np.concatenate([cases[f"{name}/image_cost"], cases[f"{name}/version_cost"]])
    return steps, to_networkx(steps.graph), cost


def _each(plans, name, field):
    _, _, per_rank = plans
    for size in SIZES:
        yield size, per_rank[size][0][f"{name}/{field}"]


def test_every_rank_holds_the_same_schedule(plans):
    _, names, per_rank = plans
    for size in SIZES:
        for name in names:
            for field in FIELDS:
                first = per_rank[size][0][f"{name}/{field}"]
                for rank in range(1, size):
                    assert np.array_equal(per_rank[size][rank][f"{name}/{field}"], first), (size, name, field)


def test_levels_are_longest_paths_from_sources(plans):
    cases, names, _ = plans
    for name in names:
        _, graph, _ = _window(cases, name)
        expected = np.array([nx.dag_longest_path_length(graph.subgraph(nx.ancestors(graph, v) | {v}))
                             for v in graph])
        for size, level in _each(plans, name, "level"):
            assert level.dtype == np.int64 and np.array_equal(level, expected), (name, size)


def _cost_on_out_edges(graph, cost):
    """``graph`` with each vertex's cost on its out-edges and an edge to a new sink (-1)."""
    weighted = nx.DiGraph()
    weighted.add_weighted_edges_from((u, v, cost[u]) for u, v in graph.edges)
    weighted.add_weighted_edges_from((v, -1, cost[v]) for v in graph)
    return weighted


def test_priority_is_the_heaviest_path_to_a_sink(plans):
    cases, names, _ = plans
    for name in names:
        steps, graph, cost = _window(cases, name)
        weighted = _cost_on_out_edges(graph, cost)
        expected = np.array([nx.dag_longest_path_length(
            weighted.subgraph(nx.descendants(weighted, v) | {v})) for v in graph], dtype=float)
        for size, priority in _each(plans, name, "priority"):
            assert np.array_equal(priority, expected), (name, size)
        assert critical_path(steps, cost) == nx.dag_longest_path_length(weighted) == expected.max()


def test_priority_with_hops_is_the_heaviest_path_with_each_edge_between_ranks_priced(plans):
    """networkx's longest path with every edge u -> v between two ranks (the planned ``rank``) weighing
    ``hop_cost[0] + hop_cost[1] x`` the bytes of its version end's cell on top of ``cost[u]``."""
    cases, names, _ = plans
    for name in names:
        steps, graph, cost = _window(cases, name)
        latency, per_byte = cases[f"{name}/hop_cost"]
        cell_bytes = cases[f"{name}/cell_bytes"]
        for size, priority in _each(plans, name, "priority_hops"):
            rank = dict(_each(plans, name, "rank"))[size]
            weighted = _cost_on_out_edges(graph, cost)
            for u, v in graph.edges:
                if rank[u] != rank[v]:
                    version = v if v >= steps.num_images else u  # the version end
                    cell = steps.version_cell[version - steps.num_images]
                    weighted[u][v]["weight"] += latency + per_byte * cell_bytes[cell]
            expected = np.array([nx.dag_longest_path_length(
                weighted.subgraph(nx.descendants(weighted, v) | {v})) for v in graph], dtype=float)
            assert np.array_equal(priority, expected), (name, size)
            if size > 1:
                assert np.any(priority > dict(_each(plans, name, "priority"))[size]), (name, size)


def test_priority_with_hops_by_hand():
    """Cameras 0 (cells 0, 1) and 1 (cell 1), batches [[0], [1]], cell 0 (9 bytes) on rank 0, cell 1 (5
    bytes) on rank 1; image 0 goes to rank 0 (more of its bytes), image 1 to rank 1. Vertices: images 0
    (cost 2), 1 (cost 4); versions 2 = cell 0 initial, 3 = cell 0 after batch 0, 4 = cell 1 initial, 5 =
    cell 1 after batch 0, 6 = cell 1 after batch 1 (cost 1 each, initial 0). Edges between ranks: 0 -> 5
    and 4 -> 0, each 10 + 1 x 5 bytes = 15 with the hops priced. Bottom levels: 6: 1; 1: 4 + 1 = 5; 5:
    1 + 5 = 6; 3: 1; 0: 2 + max(1, 15 + 6) = 23; 2: 23; 4: 15 + 23 = 38. Free hops: 0: 2 + 6 = 8."""
    steps = build_step_graph(np.array([[0], [1]]), np.array([[True, True], [False, True]]))
    version_cost = np.where(steps.version_batch < 0, 0.0, 1.0)
    for hop_cost, expected in (((10.0, 1.0), [23, 5, 23, 1, 38, 6, 1]), ((0.0, 0.0), [8, 5, 8, 1, 8, 6, 1])):
        schedule = plan_schedule(Comm(), steps, np.array([2.0, 4.0]), np.array([9.0, 5.0]), np.array([0, 1]),
                                 version_cost, num_ranks=2, hop_cost=hop_cost)
        assert np.array_equal(schedule.rank, [0, 1, 0, 0, 1, 1, 1])
        assert np.array_equal(schedule.priority, np.array(expected, float)), hop_cost
        # levels by hand: 2, 4 sources (0); 0 reads 2 and 4 (1); 3, 5 written by 0 (2); 1 reads 5 (3); 6 (4)
        assert np.array_equal(schedule.level, [1, 3, 0, 2, 0, 2, 4])
        without = plan_schedule(Comm(), steps, np.array([2.0, 4.0]), np.array([9.0, 5.0]), np.array([0, 1]),
                                version_cost, num_ranks=2, hop_cost=hop_cost, levels=False)
        assert without.level is None  # the rest of the plan is the same
        assert np.array_equal(without.rank, schedule.rank) and np.array_equal(without.priority, schedule.priority)


def test_phase_orders_every_edge(plans):
    cases, names, _ = plans
    for name in names:
        steps, graph, _ = _window(cases, name)
        for size, phase in _each(plans, name, "phase"):
            assert all(phase[u] < phase[v] for u, v in graph.edges), (name, size)
            assert np.array_equal(phase[:steps.num_images], 2 * (np.arange(steps.num_images) // steps.batch_size))


def _greedy_by_hand(camera, visible, batch_size, cost, cell_bytes, owner, size):
    """The assignment rule in plain loops: affinity from the visibility, then the greedy per batch."""
    ranks = {}
    for batch in range(len(camera) // batch_size):
        images = [batch * batch_size + p for p in range(batch_size)]
        total = sum(cost[i] for i in images)
        loads = [0.0] * size
        for i in sorted(images, key=lambda i: (-cost[i], i)):
            affinity = [0.0] * size
            for cell in range(visible.shape[1]):
                if visible[camera[i], cell]:
                    affinity[owner[cell]] += cell_bytes[cell]
            bound = max(total / size, min(loads) + cost[i])
            allowed = [r for r in range(size) if loads[r] + cost[i] <= bound]
            best = max(allowed, key=lambda r: (affinity[r], -loads[r], -r))
            loads[best] += cost[i]
            ranks[i] = best
    return np.array([ranks[i] for i in range(len(camera))])


def test_assignment_follows_the_greedy_rule_and_is_balanced(plans):
    cases, names, _ = plans
    for name in names:
        steps, _, _ = _window(cases, name)
        image_cost = cases[f"{name}/image_cost"]
        for size, rank in _each(plans, name, "rank"):
            owner = cases[f"{name}/owner_{size}"]
            images = rank[:steps.num_images]
            expected = _greedy_by_hand(cases[f"{name}/batches"].ravel(), cases[f"{name}/visible"],
                                       steps.batch_size, image_cost, cases[f"{name}/cell_bytes"], owner, size)
            assert np.array_equal(images, expected), (name, size)
            assert np.array_equal(rank[steps.num_images:], owner[steps.version_cell]), (name, size)
            per_batch = image_cost.reshape(steps.num_batches, steps.batch_size)
            loads = np.zeros((steps.num_batches, size))
            np.add.at(loads, (np.arange(steps.num_images) // steps.batch_size, images), image_cost)
            assert np.all(loads.max(axis=1) <= per_batch.sum(axis=1) / size + per_batch.max(axis=1))


def test_greedy_balances_equal_costs_whatever_the_affinity():
    """B equal images, all preferring rank 0: the bound forces B / P per rank."""
    affinity = np.zeros((3, 6, 3))
    affinity[..., 0] = 5.0
    ranks = greedy_assignment(np.ones((3, 6)), affinity)
    assert np.array_equal(np.sort(ranks, axis=1), np.tile([0, 0, 1, 1, 2, 2], (3, 1)))


def test_bad_inputs_are_rejected():
    steps = build_step_graph(np.array([[0], [1]]), np.array([[True, False], [True, True]]))
    good = dict(image_cost=np.ones(2), cell_bytes=np.ones(2), cell_owner=np.zeros(2, int))
    for key, bad, message in (("image_cost", np.ones(3), "image_cost must have shape"),
                              ("cell_bytes", np.array([1.0, np.nan]), "cell_bytes must be finite"),
                              ("cell_owner", np.array([0, 1]), r"ranks outside \[0, 1\)")):
        with pytest.raises(InputError, match=message):
            plan_schedule(Comm(), steps, **{**good, key: bad})
