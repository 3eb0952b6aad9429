"""Planning Odin's windows from cell metadata alone.

A window's plan needs, per cell, only its bounds (box of the means, largest scale, count: the metadata
of ``odin_sched.odin.cell_meta``) and its owner: from them ``plan_cells`` predicts which cells every
camera may see within the window's motion margin (``odin_sched.scenes.visibility``), builds the step
graph (``odin_sched.odin.depgraph``, with ``relax_reads`` in odin-fast mode) and its schedule
(``odin_sched.odin.schedule``). Every rank holds the same metadata, so every rank computes the same plan
on its own, on a one-rank communicator: planning sends nothing, and it can run in a thread while the
previous window trains (``WindowPlanner.plan_ahead``).

Overlap. Window w + 1 is planned while w runs, from the metadata of w's start, with a margin covering
the motion of both windows. At w's end the plan's premise so far is checked: every Gaussian moved at
most the margin less what window w + 1 alone may still add (``WindowPlanner.still_valid``). If not,
the plan is dropped and w + 1 is planned again from the metadata of w's end (a re-plan), so a window
never runs on a plan whose prediction may fail. ``plan_window`` plans from the Gaussians themselves (k-d
cells of their means), for the simulator, which plans for many virtual GPUs on one process.

A planned ``Window`` is read by ``image_ranks`` (the rank of each image), ``window_cameras`` (the cameras
a rank renders) and ``cached_bytes`` (what a rank receives of other ranks' cells).
"""
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np

from odin_sched.odin.depgraph import StepGraph, build_step_graph
from odin_sched.odin.options import BATCHES_AHEAD, HOLD_SHARE, STALE_IMPACT
from odin_sched.odin.schedule import Schedule, plan_schedule
from odin_sched.odin.shard import owners_by_count
from odin_sched.odin.staleness import relax_reads
from odin_sched.scenes.cells import CellBounds, cell_members, cut_cells
from odin_sched.scenes.sh import DEFAULT_SH_DEGREE
from odin_sched.scenes.visibility import Margin, predict_visible_cells, window_margin
from odin_sched.training.densify import due_after
from odin_sched.training.step import param_columns
from pregel.dataflow import DataflowPlan
from pregel.edge_order import sorted_unique
from pregel.generate import edges_to_csr
from pregel.graph_io import GraphData

#: a violation doubles the visibility margin of the next window
MARGIN_GROWTH = 2.0
#: predicted cost of a pixel relative to one visible Gaussian (image cost = visible Gaussians + c x pixels)
PIXEL_COST = 0.05


@dataclass
class Window:
    """The plan of one window: batches [start, stop) (0-based), cells, ownership, visibility, steps.

    ``count`` [K] is every cell's Gaussians; a plan made from the Gaussians (``plan_window``) also has
    their cells (``cell_of`` [G] int32, and the CSR ``member_indptr`` [K + 1], ``members`` [G] int64 of
    each cell's Gaussians by ascending id); one made from metadata has None there.
    """

    start: int
    stop: int
    count: np.ndarray         # [K] int64 Gaussians per cell
    owner: np.ndarray         # [K] int64 rank owning each cell
    visible: np.ndarray       # [C, K] bool predicted visibility (the window's cameras; other rows False)
    steps: StepGraph
    plan: DataflowPlan
    margin: Margin
    staleness: np.ndarray     # [R] int64 updates missed by each read of steps.image_reads (0: exact)
    cell_of: np.ndarray | None = None
    member_indptr: np.ndarray | None = None
    members: np.ndarray | None = None

    def cell_rows(self, cell: int) -> np.ndarray:
        """Global ids [g_c] of the Gaussians of ``cell``, ascending (a plan made from the Gaussians)."""
        return self.members[self.member_indptr[cell]:self.member_indptr[cell + 1]]

    @cached_property
    def image_rows(self) -> np.ndarray:
        """[I] int64 number of Gaussians each image step renders (all of the cells it reads)."""
        steps = self.steps
        read_rows = self.count[steps.version_cell[steps.version_index(steps.image_reads)]]
        image_of_read = np.repeat(np.arange(steps.num_images), np.diff(steps.image_reads_indptr))
        return np.bincount(image_of_read, weights=read_rows, minlength=steps.num_images).astype(np.int64)

    @cached_property
    def version_writers(self) -> np.ndarray:
        """[V] int64 number of images whose gradient each cell version sums (0 for initial versions)."""
        steps = self.steps
        return np.bincount(steps.version_index(steps.image_writes), minlength=steps.num_versions)


def cached_bytes(window: Window, rank: int, columns: int) -> int:
    """Bytes of the other ranks' cell versions (parameters [g_c, columns] float32) that ``rank``'s images
    read in ``window``: the cache the rank receives (an upper bound on what it holds at once)."""
    plan, steps = window.plan, window.steps
    src = np.repeat(np.arange(plan.graph.num_nodes, dtype=np.int64), np.diff(plan.graph.indptr))
    dst = np.asarray(plan.graph.indices, np.int64)
    remote = (~steps.is_image(src)) & steps.is_image(dst) & (plan.rank[dst] == rank) & (plan.rank[src] != rank)
    versions = sorted_unique(steps.version_index(src[remote]))
    return int(window.count[steps.version_cell[versions]].sum() * columns * 4)


def image_ranks(window: Window) -> np.ndarray:
    """[I] int64 the rank that renders each image of ``window`` (its plan's assignment)."""
    return window.plan.rank[window.steps.images]


def window_cameras(window: Window, rank: int) -> np.ndarray:
    """Cameras [k] of the images ``rank`` renders in ``window``."""
    return np.unique(window.steps.image_camera[image_ranks(window) == rank])


def publish_first(priority: np.ndarray, steps: StepGraph) -> np.ndarray:
    """Firing priorities [N] from the critical path ``priority`` [N] (>= 0): cell versions before any
    image, by critical path; then images of earlier batches before those of later ones, and within a
    batch by critical path. A version's update is cheap and other ranks' images wait for it, so it is
    published as soon as it is ready. A batch's images read what the batch before wrote, on many ranks
    at once, so a rank that runs a later batch's image while an earlier batch's is ready holds back the
    gradients that other ranks' next images wait for, while its later image's own readers come later
    anyway (issue 20's scene: docs/simulator-measurements.md, "The order: batches first")."""
    out = np.asarray(priority, np.float64).copy()
    span = out.max(initial=0.0) + 1.0
    out[steps.images] += (steps.num_batches - 1 - steps.image_batch) * span
    out[steps.versions] += out.max(initial=0.0) + 1.0
    return out



def batch_sequence(steps: StepGraph) -> np.ndarray:
    """[N] int64 ``DataflowPlan.sequence`` of a window: each image its batch, cell versions free (-1). With
    ``PlanConfig.batches_ahead`` 0 (the default) a rank does not fill a wait with an image of a later batch
    (one that reads other cells, ready early) while its image of an earlier batch, which other ranks' next
    images wait for, is about to be ready: the later image, started first, would hold the earlier one back
    by a whole image (issue 20's scene: docs/simulator-measurements.md, "A rank's images in batch order"
    and "Every earlier batch first"). Images of a batch depend only on earlier batches, so a rank never
    waits for itself."""
    out = np.full(steps.num_vertices, -1, np.int64)
    out[steps.images] = steps.image_batch
    return out


def publish_before_compute(steps: StepGraph, rank: np.ndarray) -> GraphData:
    """The step graph plus same-rank ordering edges: a cell version -> the images on its owner's rank
    in the first two batches that read the version. A rank fires one vertex at a time, so an owner that
    started a long image just before the last gradient of one of its cells arrived would hold that
    cell's update back from every reader for a whole image; with these edges it publishes first. The
    edges stay on one rank (no transfer) and go from phase 2b + 1 to a later batch's images, so the
    graph stays a DAG in phase order; images ignore these inputs (they render what they read).
    rank: [N] int64 rank of every vertex."""
    pair_image = np.repeat(np.arange(steps.num_images), np.diff(steps.image_reads_indptr))
    version = steps.version_index(steps.image_reads)
    first = np.full(steps.num_versions, np.iinfo(np.int64).max)
    np.minimum.at(first, version, steps.image_batch[pair_image])
    read = np.flatnonzero((first < np.iinfo(np.int64).max) & (steps.version_batch >= 0))
    batches = steps.num_batches
    key = rank[steps.images] * batches + steps.image_batch  # images by (rank, batch)
    order = np.argsort(key, kind="stable")
    bounds = np.searchsorted(key[order], np.arange(rank.max(initial=0) * batches + batches + 1))
    src, dst = [], []
    for extra in (0, 1):  # the first reading batch and the next
        b = first[read] + extra
        keep = b < batches
        v = steps.version_vertex(read[keep])
        k = rank[v] * batches + b[keep]
        counts = bounds[k + 1] - bounds[k]
        src.append(np.repeat(v, counts))
        starts = np.repeat(bounds[k] - (np.cumsum(counts) - counts), counts)
        dst.append(order[starts + np.arange(counts.sum())])
    g = steps.graph
    old_src = np.repeat(np.arange(g.num_nodes, dtype=np.int64), np.diff(g.indptr))
    keys = sorted_unique(np.concatenate([old_src * g.num_nodes + g.indices, *(s * g.num_nodes + d for s, d in zip(src, dst))]))
    indptr, indices = edges_to_csr(g.num_nodes, keys // g.num_nodes, keys % g.num_nodes)
    return GraphData(indptr, indices, directed=True)


def without_initial_reads(graph: GraphData, steps: StepGraph) -> GraphData:
    """``graph`` (a window's step graph, with or without ordering edges) minus the out-edges of the
    initial cell versions: every rank holds the window-start model (gathered at the window end
    before), so they carry nothing, and an image that reads only them can start at once instead of
    waiting for one empty message per owner (at 64 GPUs, hundreds of messages per rank at each
    window start)."""
    src = np.repeat(np.arange(graph.num_nodes, dtype=np.int64), np.diff(graph.indptr))
    initial = np.zeros(graph.num_nodes, bool)
    initial[steps.versions] = steps.version_batch < 0
    keep = ~initial[src]
    indptr, indices = edges_to_csr(graph.num_nodes, src[keep], graph.indices[keep])
    return GraphData(indptr, indices, directed=True)


@dataclass
class PlanConfig:
    """How windows are planned: ``num_cells`` cells owned by ``num_ranks`` ranks; reads up to
    ``max_staleness`` updates old (odin-fast) for at most ``stale_impact`` of an image's Gaussians; an
    image's predicted cost ``cost_weights · (1, predicted visible Gaussians, pixels)``; a cell's transfer
    its Gaussians' parameters at SH degree ``sh_degree`` (``param_columns``); an edge between two ranks
    adds ``hop_cost`` (per edge, per byte of its cell; in the cost weights' units) to a path in the
    firing priority (``schedule.Hops``; zeros: hops are free); a rank starts an image only once all its
    images of batches more than ``batches_ahead`` before it have begun (``batch_sequence``), or once it has had
    nothing else to fire for ``hold_share`` times its mean image's seconds (``DataflowPlan.hold_share``)."""

    num_cells: int
    num_ranks: int
    max_staleness: int = 0
    stale_impact: float = STALE_IMPACT
    cost_weights: tuple = (0.0, 1.0, PIXEL_COST)
    sh_degree: int = DEFAULT_SH_DEGREE
    hop_cost: tuple = (0.0, 0.0)
    batches_ahead: int = BATCHES_AHEAD
    hold_share: float = HOLD_SHARE


def plan_cells(comm, bounds: CellBounds, owner: np.ndarray, cameras, batches: np.ndarray, start: int, stop: int,
               margin: Margin, config: PlanConfig, initial_reads: bool = True,
               levels: bool = False) -> tuple[Window, Schedule]:
    """Plan batches [start, stop) of ``batches`` [S, B] from cell metadata alone (collective on ``comm``,
    the same on every rank; the runtime passes a one-rank communicator): ``bounds`` of the K cells,
    their ``owner`` [K] int64 in [0, config.num_ranks), the visibility of the window's cameras (of
    viewmats [C, 4, 4], Ks [C, 3, 3]; the other cameras' rows of ``Window.visible`` are False) within
    ``margin``, the step graph (``relax_reads`` for max_staleness > 0) and
    its schedule. initial_reads: whether a window's initial cell versions send their parameters to their
    readers (the sharded runtime: nobody else holds them); without, an image that reads only initial
    versions starts at once (every rank holding the window-start model). levels: whether the schedule
    computes ``Schedule.level`` (only ``--schedule-out`` writes it; running a window does not need it).
    cameras: a Scene or a SimScene (its viewmats, Ks, width and height); config: see ``PlanConfig``."""
    num_ranks, width, height, cost_weights = config.num_ranks, cameras.width, cameras.height, config.cost_weights
    used = np.unique(batches[start:stop])  # only the window's cameras are predicted
    visible = np.zeros((len(cameras.viewmats), bounds.num_cells), bool)
    visible[used] = predict_visible_cells(bounds, np.asarray(cameras.viewmats)[used], np.asarray(cameras.Ks)[used],
                                          width, height, margin)
    steps = build_step_graph(batches[start:stop], visible)
    steps, staleness = relax_reads(steps, bounds.count, config.max_staleness, config.stale_impact)
    image_cost = (cost_weights[0] + cost_weights[1] * (visible[steps.image_camera].astype(np.float64)
                                                       @ bounds.count.astype(np.float64))
                  + cost_weights[2] * width * height)
    schedule = plan_schedule(comm, steps, image_cost, bounds.count * param_columns(config.sh_degree) * 4, owner,
                             num_ranks=num_ranks, hop_cost=config.hop_cost, levels=levels)
    graph = publish_before_compute(steps, schedule.rank)
    plan = DataflowPlan(graph if initial_reads else without_initial_reads(graph, steps), schedule.rank,
                        publish_first(schedule.priority, steps), schedule.phase, batch_sequence(steps),
                        config.batches_ahead, config.hold_share)
    return Window(start, stop, bounds.count, owner, visible, steps, plan, margin, staleness), schedule


def plan_window(comm, means: np.ndarray, scales: np.ndarray, cameras, batches: np.ndarray, start: int, stop: int,
                margin, config: PlanConfig) -> tuple[Window, Schedule]:
    """Plan batches [start, stop) from the Gaussians (means, log-scales [G, 3]): ``config.num_cells`` k-d
    cells of the means, owned as the runtime deals them (``owners_by_count``), then
    ``plan_cells`` from their bounds, every rank holding the window-start model (no initial reads). The
    simulator (``odin_sched.sim.simulate``) plans for many virtual GPUs with it on one process."""
    cell_of, bounds = cut_cells(means, scales, config.num_cells)
    indptr, members = cell_members(cell_of, bounds.num_cells)
    window, schedule = plan_cells(comm, bounds, owners_by_count(bounds.count, config.num_ranks), cameras, batches,
                                  start, stop, margin, config, initial_reads=False)
    return replace(window, cell_of=cell_of, member_indptr=indptr, members=members), schedule


@dataclass
class Planned:
    """A window's plan and how it was made: from the metadata of batch ``base`` (the plan's margin covers
    the motion of batches [base, window.stop)), its schedule, and the seconds planning took."""

    window: Window
    schedule: Schedule
    base: int
    safety: float
    seconds: float


class WindowPlanner:
    """Planning: where each window ends, and its plan (``plan_cells``) from cell metadata within a
    visibility margin that a violation widens (``safety``), now or ahead in a thread (``plan_ahead``);
    keeps the planning statistics of the run.

    local_comm: a one-rank communicator (planning sends nothing); setup: the ``TrainingSetup``; steps: the
    run's batches; options: ``OdinOptions``; num_ranks: the ranks that own cells and run images;
    densify: the ``DensifyConfig`` or None; eval_every: batches between held-out evaluations.
    """

    def __init__(self, local_comm, setup, steps: int, options, num_ranks: int, densify, eval_every: int):
        self.local_comm, self.setup, self.steps, self.options = local_comm, setup, steps, options
        self.num_ranks, self.densify, self.eval_every = num_ranks, densify, eval_every
        self.safety = 1.0           # the margin's factor: MARGIN_GROWTH after each violation
        self.stale_reads = 0        # reads of an older version than the synchronous order's (odin-fast)
        self.max_staleness_seen = 0
        self.dependency_edges = 0
        self.replans = 0            # plans made ahead and dropped because their premise failed
        self.first = None           # the first window's Planned, for --schedule-out
        self._threads = ThreadPoolExecutor(max_workers=1)

    def window_end(self, start: int) -> int:
        """The first batch boundary after ``start`` where the window must end (0-based, exclusive)."""
        stop = min(start + self.options.window, self.steps)
        for b in range(start + 1, stop + 1):  # a loop over batch boundaries, not over data
            if due_after(self.densify, b, self.steps, self.setup.settings.batch_size) or b % self.eval_every == 0:
                return b
        return stop

    def margin(self, base: int, stop: int, safety: float) -> Margin:
        """The motion margin of batches [base, stop) (learning rates decay: the first is the largest)."""
        settings = self.setup.settings
        lrs = settings.lrs(self.setup.extent, base + 1)
        return window_margin(lrs["means"], lrs["scales"], settings.betas, stop - base, safety)

    def plan(self, base: int, start: int, stop: int, bounds: CellBounds, owner: np.ndarray) -> Planned:
        """The plan of batches [start, stop) from the metadata ``bounds`` of batch ``base`` <= start and the
        cells' ``owner`` [K] (the same on every rank; sends nothing)."""
        t0 = time.perf_counter()
        safety = self.safety
        config = PlanConfig(len(owner), self.num_ranks, self.options.staleness, self.options.stale_impact,
                            sh_degree=self.setup.sh_degree, batches_ahead=self.options.batches_ahead,
                            hold_share=self.options.hold_share)
        window, schedule = plan_cells(self.local_comm, bounds, owner, self.setup.scene, self.setup.batches, start,
                                      stop, self.margin(base, stop, safety), config,
                                      levels=self.options.schedule_out is not None and self.first is None)
        return Planned(window, schedule, base, safety, time.perf_counter() - t0)

    def plan_ahead(self, base: int, start: int, stop: int, bounds: CellBounds, owner: np.ndarray):
        """``plan`` in a thread, while the current window runs (``owner`` [K], as there); returns its future."""
        return self._threads.submit(self.plan, base, start, stop, bounds, owner)

    def premise(self, planned: Planned) -> Margin:
        """How far a Gaussian may have moved since the plan's base when the batches before its window are
        done: its margin less what the window itself may add."""
        window = planned.window
        rest = self.margin(window.start, window.stop, planned.safety)
        return Margin(planned.window.margin.means - rest.means, planned.window.margin.log_scale - rest.log_scale)

    def used(self, planned: Planned) -> None:
        """Count the statistics of a plan that runs."""
        window = planned.window
        self.stale_reads += int(np.count_nonzero(window.staleness))
        self.max_staleness_seen = max(self.max_staleness_seen, int(window.staleness.max(initial=0)))
        self.dependency_edges += window.steps.graph.num_edges
        if self.first is None:
            self.first = planned

    def widen(self) -> None:
        """After a visibility violation: the next windows' margin grows by ``MARGIN_GROWTH``."""
        self.safety *= MARGIN_GROWTH

    def close(self) -> None:
        """Stop the planning thread."""
        self._threads.shutdown(wait=True)
