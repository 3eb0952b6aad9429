"""The step dependency graph against brute-force pair checks and networkx."""

import h5py
import networkx as nx
import numpy as np
import pytest

from odin_sched.odin.depgraph import (build_step_graph, critical_path, parallelism, reversed_graph,
                                     write_schedule)
from odin_sched.odin.schedule import Schedule
from pregel.convert import to_networkx
from pregel.errors import InputError
from pregel.graph_io import read_graph
from pregel.inspect_graph import summarize

WINDOWS = [(seed, batch_size) for seed in range(6) for batch_size in (1, 2, 3)]


def _window(seed, batch_size, num_batches=6):
    """A random window: batches [S, B] over C cameras, visible [C, K] of varying density."""
    rng = np.random.default_rng(seed)
    cameras, cells = rng.integers(4, 12), rng.integers(1, 7)
    visible = rng.random((cameras, cells)) < rng.uniform(0.1, 0.6)
    return rng.integers(0, cameras, (num_batches, batch_size)), visible


def _conflicts(batches, visible):
    """[I, I] bool: j depends on i, by brute force: the transitive closure of "i's batch is earlier
    than j's and they share a cell", over every pair of images."""
    camera = batches.ravel()
    batch = np.arange(len(camera)) // batches.shape[1]
    num = len(camera)
    depends = np.zeros((num, num), bool)
    for i in range(num):
        for j in range(num):
            depends[i, j] = batch[i] < batch[j] and bool((visible[camera[i]] & visible[camera[j]]).any())
    for k in range(num):  # Warshall
        depends |= depends[:, [k]] & depends[[k], :]
    return depends


@pytest.mark.parametrize("seed, batch_size", WINDOWS)
def test_paths_between_images_are_exactly_the_conflicts(seed, batch_size):
    batches, visible = _window(seed, batch_size)
    steps = build_step_graph(batches, visible)
    graph = to_networkx(steps.graph)
    assert nx.is_directed_acyclic_graph(graph)
    assert steps.graph.num_edges == 2 * int(visible[batches.ravel()].sum())
    num = steps.num_images
    reach = np.zeros((num, num), bool)
    for i in range(num):
        later = [v for v in nx.descendants(graph, i) if v < num]
        reach[i, later] = True
    assert np.array_equal(reach, _conflicts(batches, visible))


@pytest.mark.parametrize("seed, batch_size", WINDOWS)
def test_versions_reads_and_writes(seed, batch_size):
    batches, visible = _window(seed, batch_size)
    steps = build_step_graph(batches, visible)
    camera, num_batches = batches.ravel(), len(batches)
    batch = np.arange(len(camera)) // batch_size
    touches = [[bool(visible[batches[b], c].any()) for c in range(visible.shape[1])] for b in range(num_batches)]
    expected = {(c, b) for b in range(num_batches) for c in range(visible.shape[1]) if touches[b][c]}
    expected |= {(c, -1) for c, _ in expected}
    versions = list(zip(steps.version_cell.tolist(), steps.version_batch.tolist()))
    assert len(versions) == len(expected) and set(versions) == expected
    assert steps.num_vertices == steps.num_images + len(expected)
    graph = to_networkx(steps.graph)
    for i in range(steps.num_images):
        cells = np.flatnonzero(visible[camera[i]]).tolist()
        reads = steps.image_reads[steps.image_reads_indptr[i]:steps.image_reads_indptr[i + 1]]
        writes = steps.image_writes[steps.image_writes_indptr[i]:steps.image_writes_indptr[i + 1]]
        last = [max([b for b in range(batch[i]) if touches[b][c]], default=-1) for c in cells]
        assert [versions[v - steps.num_images] for v in reads] == list(zip(cells, last))
        assert [versions[v - steps.num_images] for v in writes] == [(c, batch[i]) for c in cells]
        assert set(graph.predecessors(i)) == set(reads.tolist())
        assert set(graph.successors(i)) == set(writes.tolist())
        assert np.array_equal(steps.version_of(cells, last), reads)
    assert steps.image_camera.tolist() == camera.tolist()
    assert steps.image_batch.tolist() == batch.tolist()
    assert steps.image_position.tolist() == (np.arange(len(camera)) % batch_size).tolist()
    assert steps.is_image(np.arange(steps.num_vertices)).sum() == steps.num_images
    untouched = [(c, b) for b in range(num_batches) for c in range(visible.shape[1]) if not touches[b][c]]
    if untouched:
        assert np.all(steps.version_of(*np.array(untouched).T) == -1)


def test_reversed_graph_reverses_every_edge():
    steps = build_step_graph(*_window(3, 2))
    forward, backward = to_networkx(steps.graph), to_networkx(reversed_graph(steps.graph))
    assert set(backward.edges) == {(v, u) for u, v in forward.edges}


@pytest.mark.parametrize("seed, batch_size", WINDOWS[::4])
def test_critical_path_matches_networkx(seed, batch_size):
    steps = build_step_graph(*_window(seed, batch_size))
    cost = np.random.default_rng(seed).uniform(0, 2, steps.num_vertices)
    graph = to_networkx(steps.graph)
    weighted = nx.DiGraph()
    weighted.add_weighted_edges_from((u, v, cost[u]) for u, v in graph.edges)
    weighted.add_weighted_edges_from((v, "sink", cost[v]) for v in graph)
    assert critical_path(steps, cost) == pytest.approx(nx.dag_longest_path_length(weighted), rel=1e-12)
    assert parallelism(steps, cost) == pytest.approx(cost.sum() / nx.dag_longest_path_length(weighted))


@pytest.mark.parametrize("batch_size", [1, 2, 4])
def test_parallelism_of_a_chain_and_of_disjoint_cells(batch_size):
    images = 12
    chain = build_step_graph(np.arange(images).reshape(-1, batch_size), np.ones((images, 3), bool))
    on_images = np.where(chain.is_image(np.arange(chain.num_vertices)), 1.0, 0.0)
    # every image sees every cell: only the images of one batch run side by side
    assert parallelism(chain, on_images) == pytest.approx(batch_size)
    disjoint = build_step_graph(np.arange(images).reshape(-1, batch_size), np.eye(images, dtype=bool))
    costs = np.where(disjoint.is_image(np.arange(disjoint.num_vertices)), 1.0, 0.0)
    assert parallelism(disjoint, costs) == pytest.approx(images)
    # with a unit cost on every version too, each chain is initial version, image, version
    assert parallelism(disjoint, np.ones(disjoint.num_vertices)) == pytest.approx(images)


def test_write_schedule_is_a_graph_file_with_the_plan(tmp_path):
    batches, visible = _window(4, 3)
    steps = build_step_graph(batches, visible)
    n, num = steps.num_vertices, steps.num_images
    rng = np.random.default_rng(0)
    schedule = Schedule(rng.integers(0, 9, n), rng.random(n), rng.integers(0, 3, n), steps.phase())
    path = tmp_path / "plan.h5"
    write_schedule(path, steps, schedule)
    stored = read_graph(path)
    assert np.array_equal(stored.indptr, steps.graph.indptr)
    assert np.array_equal(stored.indices, steps.graph.indices) and stored.directed
    assert summarize(path).header.num_edges == steps.graph.num_edges
    with h5py.File(path) as f:
        assert np.array_equal(f["steps/camera"][:], batches.ravel())
        assert np.array_equal(f["steps/position"][:], np.arange(num) % 3)
        assert np.array_equal(f["steps/batch"][:], np.arange(num) // 3)
        for field in ("rank", "level", "priority"):
            assert np.array_equal(f[f"steps/{field}"][:], getattr(schedule, field)[:num])
        for field in ("rank", "level"):
            assert np.array_equal(f[f"versions/{field}"][:], getattr(schedule, field)[num:])
        assert np.array_equal(f["versions/cell"][:], steps.version_cell)
        assert np.array_equal(f["versions/batch"][:], steps.version_batch)
    with pytest.raises(InputError, match="does not exist"):
        write_schedule(tmp_path / "missing" / "plan.h5", steps, schedule)
    with pytest.raises(ValueError, match="level has 3 rows"):
        write_schedule(path, steps, Schedule(schedule.level[:3], schedule.priority, schedule.rank,
                                             schedule.phase))
    unwritable = Schedule(schedule.level, np.array([object()] * n), schedule.rank, schedule.phase)
    with pytest.raises(TypeError):  # a failed write leaves the earlier file alone, no temporary
        write_schedule(path, steps, unwritable)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan.h5"]
    with h5py.File(path) as f:
        assert np.array_equal(f["steps/level"][:], schedule.level[:num])


def test_bad_inputs_are_rejected():
    visible = np.ones((3, 2), bool)
    with pytest.raises(InputError, match="camera ids outside"):
        build_step_graph(np.array([[0, 3]]), visible)
    with pytest.raises(InputError, match="bool"):
        build_step_graph(np.array([[0, 1]]), visible.astype(int))
    with pytest.raises(InputError, match=r"\[S, B\]"):
        build_step_graph(np.array([0, 1]), visible)
    with pytest.raises(InputError, match="non-negative"):
        parallelism(build_step_graph(np.array([[0]]), visible), -np.ones(5))
