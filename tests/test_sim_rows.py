"""The row-message what-if of the simulator (odin_sched/sim/rows.py): row counts against per-Gaussian,
per-camera loops, the exact projection's visible Gaussians always among the rows, and a window's message
bytes worked by hand."""
import math
from types import SimpleNamespace

import numpy as np
import pytest

from kernels.splat.scalar_math import project_gaussian
from odin_sched.odin.depgraph import build_step_graph
from odin_sched.odin.program import GRAD_EXTRA, StepMessages
from odin_sched.scenes.cells import CellBounds, cell_members
from odin_sched.scenes.visibility import Margin, predict_visible_cells_numpy
from odin_sched.sim.rows import ID_WORDS, PairRows, RowCosts, RowMessages, gaussian_bounds, pair_rows, union_counts
from odin_sched.sim.scene import cells, metadata_scene
from odin_sched.sim.simulate import simulate
from odin_sched.sim.costmodel import load_profile
from pregel.dataflow import DataflowPlan, Routes

COLUMNS = 59


def _tiny_scene(seed=0):
    """A generated city of 600 Gaussians and 12 cameras (Gaussians from a few pixels to a large share
    of the image)."""
    return metadata_scene("city", 600, 12, 32, 24, seed)


@pytest.mark.parametrize("margin", [Margin(0.0, 0.0), Margin(0.3, 0.2)])
def test_pair_rows_equal_a_loop_over_gaussians_and_cameras(margin):
    scene = _tiny_scene()
    cell_of, _ = cells(scene, 8)
    indptr, members = cell_members(cell_of, 8)
    rng = np.random.default_rng(1)
    cams, cell_ids = rng.integers(0, 12, 40), rng.integers(0, 8, 40)
    rows = pair_rows(gaussian_bounds(scene.means, scene.scales), indptr, members, cams, cell_ids, scene, margin)
    expected = {}
    for cam, cell in set(zip(cams.tolist(), cell_ids.tolist())):
        kept = []
        for g in np.flatnonzero(cell_of == cell):  # one Gaussian, one camera at a time
            box = CellBounds(scene.means[g:g + 1].astype(np.float64), scene.means[g:g + 1].astype(np.float64),
                             np.array([math.exp(float(scene.scales[g].max()))]), np.ones(1, np.int64))
            if predict_visible_cells_numpy(box, scene.viewmats[cam:cam + 1], scene.Ks[cam:cam + 1], scene.width,
                                           scene.height, margin)[0, 0]:
                kept.append(int(g))
        expected[cam * 8 + cell] = kept
    assert rows.key.tolist() == sorted(expected)
    for p, key in enumerate(rows.key.tolist()):
        assert rows.ids[rows.indptr[p]:rows.indptr[p + 1]].tolist() == expected[key]
        assert rows.members[p] == np.count_nonzero(cell_of == key % 8)
    assert 0 < len(rows.ids) < rows.members.sum()  # some rows are left out, some kept


def test_every_gaussian_the_rasterizer_keeps_is_among_the_rows():
    """The exact projection (radius > 0), per Gaussian and camera, after moving each mean by at most the
    margin and growing its scales by at most the margin's log-scale: always among the rows."""
    scene = _tiny_scene(2)
    margin = Margin(0.2, 0.1)
    cell_of, _ = cells(scene, 4)
    indptr, members = cell_members(cell_of, 4)
    cams = np.repeat(np.arange(12), 4)
    cell_ids = np.tile(np.arange(4), 12)
    rows = pair_rows(gaussian_bounds(scene.means, scene.scales), indptr, members, cams, cell_ids, scene, margin)
    rng = np.random.default_rng(3)
    step = rng.normal(size=scene.means.shape)
    step *= margin.means * rng.uniform(0, 1, (len(step), 1)) / np.linalg.norm(step, axis=1, keepdims=True)
    moved = scene.means + step
    grown = scene.scales + margin.log_scale * rng.uniform(0, 1, scene.scales.shape)
    seen = 0
    for cam in range(12):
        view = tuple(float(x) for x in scene.viewmats[cam, :3].reshape(-1))
        K = scene.Ks[cam].astype(np.float64)
        intr = (K[0, 0], K[1, 1], K[0, 2], K[1, 2])
        for g in range(len(scene.means)):
            radius = project_gaussian(tuple(moved[g]), tuple(grown[g].astype(np.float64)),
                                      tuple(scene.quats[g].astype(np.float64)), view, intr,
                                      scene.width, scene.height)[-1]
            if radius > 0:
                seen += 1
                p = np.searchsorted(rows.key, cam * 4 + cell_of[g])
                assert g in rows.ids[rows.indptr[p]:rows.indptr[p + 1]]
    assert seen > 100


def _hand_window(count):
    """One cell of four Gaussians at x = -3, 3, 9, 15 (z = 10, tiny), cameras at x = 0, 6, 12 looking
    along +z (focal 64, 64 x 64 pixels: each sees x within 5 of its own): camera 0 sees Gaussians
    {0, 1}, camera 1 {1, 2}, camera 2 {2, 3}. Two batches of the three cameras; camera 0's images on
    rank 0 (the owner, with the versions), cameras 1 and 2's on rank 1. ``count``: the cell's Gaussians
    in the window (a stand-in's: 4 x the Gaussians each stands for)."""
    means = np.array([[-3, 0, 10], [3, 0, 10], [9, 0, 10], [15, 0, 10]], np.float32)
    viewmats = np.tile(np.eye(4, dtype=np.float32), (3, 1, 1))
    viewmats[:, 0, 3] = -np.array([0, 6, 12])
    K = np.array([[64, 0, 32], [0, 64, 32], [0, 0, 1]], np.float32)
    scene = SimpleNamespace(means=means, scales=np.full((4, 3), -6, np.float32), viewmats=viewmats,
                            Ks=np.tile(K, (3, 1, 1)), width=64, height=64)
    steps = build_step_graph(np.array([[0, 1, 2], [0, 1, 2]]), np.ones((3, 1), bool))
    # vertices: images 0-5 (batch 0: cameras 0, 1, 2; batch 1 the same), versions (0, -1), (0, 0), (0, 1)
    rank = np.array([0, 1, 1, 0, 1, 1, 0, 0, 0])
    plan = DataflowPlan(steps.graph, rank, np.zeros(9), steps.phase())
    routes = Routes(plan, StepMessages(steps, np.array([count]), COLUMNS, initial_sends=True), 2)
    win = SimpleNamespace(steps=steps, plan=plan, count=np.array([count]), owner=np.array([0]),
                          cell_of=np.zeros(4, np.int32), margin=Margin(0.0, 0.0))
    return scene, win, routes


@pytest.mark.parametrize("stands_for", [1, 8])
def test_message_words_worked_by_hand(stands_for):
    scene, win, routes = _hand_window(4 * stands_for)
    hook = RowMessages(scene, COLUMNS)
    words, extra = hook(win, routes)
    remote = {(int(routes.group_src[g]), int(routes.group_rank[g])): int(words[g])
              for g in np.flatnonzero(routes.remote)}
    f = stands_for
    assert remote == {
        (6, 1): 3 * f * (COLUMNS + ID_WORDS),  # version (0, -1) to rank 1: cameras 1 and 2, rows {1, 2, 3}
        (7, 1): 3 * f * (COLUMNS + ID_WORDS),  # version (0, 0), the same readers
        (1, 0): 2 * f * (COLUMNS + GRAD_EXTRA), (2, 0): 2 * f * (COLUMNS + GRAD_EXTRA),  # gradients of {1, 2}, {2, 3}
        (4, 0): 2 * f * (COLUMNS + GRAD_EXTRA), (5, 0): 2 * f * (COLUMNS + GRAD_EXTRA)}
    assert 4 * routes.group_size[routes.remote].sum() == 4 * f * (2 * 4 * COLUMNS + 4 * 4 * (COLUMNS + GRAD_EXTRA))
    assert hook.sent == {"whole": 4.0 * f * (2 * 4 * COLUMNS + 4 * 4 * (COLUMNS + GRAD_EXTRA)),
                         "rows": 4.0 * f * (2 * 3 * (COLUMNS + ID_WORDS) + 4 * 2 * (COLUMNS + GRAD_EXTRA))}
    assert hook.read_share == [6 / 12]  # pairs (camera, cell): 2 of 4 rows each
    assert not extra.any()  # no costs given


def test_row_costs_charged_by_hand():
    scene, win, routes = _hand_window(4)
    words, extra = RowMessages(scene, COLUMNS, RowCosts(test=1.0, gather=10.0, scatter=100.0))(win, routes)
    p, g = 3 * (COLUMNS + ID_WORDS), 2 * (COLUMNS + GRAD_EXTRA)
    # version (0, -1): the owner tests 4 Gaussians for cameras 1 and 2 (remote readers), gathers its message
    assert extra[6] == 2 * 4 * 1.0 + 10 * p
    assert extra[7] == 10 * p + 100 * 2 * g  # gathers its message, scatters batch 0's two gradients
    assert extra[8] == 100 * 2 * g
    assert extra[0] == extra[3] == 0  # camera 0's images: on the owner's rank
    assert extra[1] == extra[4] == 100 * p + 10 * g  # the group's first reader scatters; each image gathers
    assert extra[2] == extra[5] == 10 * g


def test_rows_against_a_loop_over_a_planned_window_and_never_more_than_whole_cells():
    """A simulated window of a small city at 3 GPUs: every message's rows equal a loop over its edges
    (union of the readers' rows by Python sets), and no message grows."""
    scene = metadata_scene("city", 3000, 40, 64, 48)
    profile = load_profile("h200-ib", scene.total_gaussians)
    seen = []

    class Checked(RowMessages):
        def __call__(self, win, routes):
            words, extra = super().__call__(win, routes)
            indptr, members = cell_members(win.cell_of, len(win.count))
            steps = win.steps

            def rows_of(c, n):  # n of the cell's generated Gaussians, scaled to its (densified) count
                return math.ceil(n * win.count[c] / (indptr[c + 1] - indptr[c]))

            for g in np.flatnonzero(routes.remote):
                edges = range(routes.group_ptr[g], routes.group_ptr[g + 1])
                u = int(routes.group_src[g])
                if steps.is_image(u):
                    cam = steps.image_camera[u]
                    total = 0
                    for e in edges:
                        c = steps.version_cell[steps.version_index(routes.dst[e])]
                        total += rows_of(c, len(_in_view(self, cam, members[indptr[c]:indptr[c + 1]], win.margin)))
                    assert words[g] == total * (COLUMNS + GRAD_EXTRA)
                else:
                    c = steps.version_cell[steps.version_index(u)]
                    union = set()
                    for e in edges:
                        union |= _in_view(self, steps.image_camera[routes.dst[e]], members[indptr[c]:indptr[c + 1]],
                                          win.margin)
                    assert words[g] == rows_of(c, len(union)) * (COLUMNS + ID_WORDS)
                assert words[g] <= routes.group_size[g] * (COLUMNS + ID_WORDS) / COLUMNS
            seen.append(int(routes.remote.sum()))
            return words, extra

    whole = simulate(scene, profile, "odin", 3, 4, 3, window=2)
    rows = simulate(scene, profile, "odin", 3, 4, 3, window=2, message_sizes=Checked(scene, COLUMNS))
    assert len(seen) == 2 and min(seen) > 0
    assert rows.steps == whole.steps and rows.compute.sum() == pytest.approx(whole.compute.sum())


def _in_view(hook, cam, ids, margin):
    """The Gaussians of ``ids`` that camera ``cam`` may see within ``margin``, one at a time (Python set)."""
    kept = set()
    for g in ids.tolist():
        box = CellBounds(hook.points.lo[g:g + 1], hook.points.hi[g:g + 1], hook.points.max_sigma[g:g + 1],
                         np.ones(1, np.int64))
        if predict_visible_cells_numpy(box, hook.scene.viewmats[cam:cam + 1], hook.scene.Ks[cam:cam + 1],
                                       hook.scene.width, hook.scene.height, margin)[0, 0]:
            kept.add(g)
    return kept


@pytest.mark.parametrize("chunk", [1, 5, 1 << 24])
def test_union_counts_in_chunks_equal_python_sets(chunk):
    rng = np.random.default_rng(4)
    counts = rng.integers(0, 6, 30)
    rows = PairRows(np.arange(30), np.concatenate([[0], np.cumsum(counts)]),
                    np.concatenate([np.sort(rng.choice(12, c, replace=False)) for c in counts]).astype(np.int32),
                    np.full(30, 12))
    group = np.sort(np.concatenate([rng.integers(0, 6, 47), [6, 7, 8]]))  # groups 6-8: one edge each
    pair = rng.integers(0, 30, 50)
    expected = np.zeros(10, np.int64)
    for g in range(10):
        union = set()
        for p in pair[group == g]:
            union |= set(rows.ids[rows.indptr[p]:rows.indptr[p + 1]].tolist())
        expected[g] = len(union)
    assert union_counts(group, pair, rows, 10, chunk).tolist() == expected.tolist()
    assert expected.max() > 5


def test_row_costs_at_sending_charged_by_hand():
    """Rows chosen at sending: every version tests its cell's 4 Gaussians for each image on another rank
    that reads it (cameras 1 and 2), instead of once per window on the initial version."""
    scene, win, routes = _hand_window(4)
    words, extra = RowMessages(scene, COLUMNS, RowCosts(test=1.0, gather=10.0, scatter=100.0),
                               margin=Margin(0.0, 0.0))(win, routes)
    p, g = 3 * (COLUMNS + ID_WORDS), 2 * (COLUMNS + GRAD_EXTRA)
    assert extra[6] == 2 * 4 * 1.0 + 10 * p  # read by images 1 and 2 (rank 1)
    assert extra[7] == 2 * 4 * 1.0 + 10 * p + 100 * 2 * g  # read by images 4 and 5
    assert extra[8] == 100 * 2 * g  # read by no image
