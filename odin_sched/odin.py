"""Barrier-free distributed training of Gaussian splatting (Odin), on the engine's dataflow mode.

Training is cut into *windows* of at most ``window`` batches (also ending where densification or
evaluation is due). At a window's start every rank holds the whole model; every rank then plans the
window the same way:

1. the Gaussians are grouped into spatial cells (``odin_sched.cells``), and contiguous ranges of cells
   are given to the ranks (balanced by Gaussian count): a cell's parameters and Adam state are
   updated only by its owner;
2. the cells each camera can see during the window are predicted conservatively
   (``odin_sched.visibility``);
3. the dependency graph of the window's steps is built (``odin_sched.depgraph``): image steps and
   cell versions, an image reading the versions of the cells it sees and sending its gradient to the
   cells' next versions;
4. levels, critical-path priorities and the rank of every step are computed by vertex programs run by
   the engine (``odin_sched.schedule``).

The window then runs as a dataflow program (``TrainingSteps``) on ``pregel.dataflow``: an image step
fires on its rank once the versions of all its cells have arrived, renders its image with only those
cells' Gaussians and sends each cell its share of the gradient; a cell version fires on the cell's
owner once every image of its batch that sees the cell has reported, sums their gradients in batch
order, takes the visible-Adam step and sends the new parameters straight to the ranks of the next
batch's images that read the cell. Cells the window has not touched yet are final already (every rank
has them), so only truly conflicting cells are ever waited for. At the window's end every owner's
cells are gathered onto every rank, the visibility prediction is verified, and densification and
evaluation run as in the single-process trainer.

Because every number is computed with the same per-Gaussian operations in the same order as the
single-process trainer (``odin_sched.step``) and a cell's latest version lives in one place, the
result equals the single-process run with the same batch size bit for bit, whatever the number of
ranks — provided the visibility prediction held, which is checked and reported
(``visibility_violations``). ``mode="barrier"`` runs the same program in the engine's bulk-synchronous
mode (a collective exchange and a global barrier per phase), the synchronous baseline of Grendel-GS.

With ``device='cuda'`` each rank's copy of the model, its cells' Adam state, the renders, losses,
backward passes and Adam steps are on the rank's GPU; the blocks sent between ranks and the
window-end gather cross through host memory in ``HostStaging``, which counts the bytes copied.
"""
import time
from dataclasses import dataclass, field, fields
from functools import cached_property

import numpy as np
import torch

from odin_sched.cells import cell_bounds, cell_members, kd_cells
from odin_sched.densify import GradAccumulator, densify_round, due_after
from odin_sched.depgraph import StepGraph, build_step_graph
from odin_sched.optim import VisibleAdam, default_lrs
from odin_sched.schedule import Schedule, plan_schedule
from odin_sched.staging import HostStaging
from odin_sched.staleness import STALE_IMPACT, relax_reads
from odin_sched.step import (PARAM_COLUMNS, POSITION_LR_MAX_STEPS, batch_gradient, image_gradients, pack_params,
                             unpack_params)
from odin_sched.train import (NO_CUDA_CHECKPOINTS, TrainResult, TrainingSetup, batch_loss, camera, evaluate,
                              params_of, prepare, to_device, training_device, write_outputs)
from odin_sched.train_checkpoint import TrainState
from odin_sched.visibility import motion_within_margin, predict_visible_cells, window_margin
from pregel.dataflow import DataflowPlan, DataflowProgram, run_dataflow, write_chrome_trace
from pregel.errors import InputError
from pregel.generate import edges_to_csr
from pregel.graph_io import GraphData
from pregel.progress import Progress

MODES = ("odin", "barrier", "odin-fast")
#: columns of an image's message to a cell: the 14 parameter gradients, visible (0/1), screen norm,
#: screen radius (pixels)
GRAD_COLUMNS = PARAM_COLUMNS + 3
#: a violation doubles the visibility margin of the next window
MARGIN_GROWTH = 2.0
#: predicted cost of a pixel relative to one visible Gaussian (image cost = visible Gaussians + c x pixels)
PIXEL_COST = 0.05


@dataclass
class OdinOptions:
    """The distributed trainer's settings (see ``pregel train --help``)."""

    mode: str = "odin"
    cells: int | None = None   # default: CELLS_PER_RANK x ranks
    window: int = 10           # batches per planning window
    timeline: str | None = None
    schedule_out: str | None = None
    max_staleness: int = 1     # odin-fast: updates of a low-impact cell an image may miss
    stale_impact: float = STALE_IMPACT  # odin-fast: the largest share of an image's Gaussians read stale

    @property
    def staleness(self) -> int:
        """The staleness bound in force: ``max_staleness`` in odin-fast mode, else 0 (exact)."""
        return self.max_staleness if self.mode == "odin-fast" else 0

    CELLS_PER_RANK = 16

    def resolved_cells(self, size: int) -> int:
        """The number of cells asked for (a window uses at most one per Gaussian)."""
        return self.cells if self.cells is not None else self.CELLS_PER_RANK * size


def check_options(options: OdinOptions, size: int, num_gaussians: int, batch_size: int) -> str | None:
    """A one-line problem with the distributed options, or None."""
    if options.mode not in MODES:
        return f"--mode must be one of {', '.join(MODES)}, got {options.mode!r}"
    if options.max_staleness < 0:
        return f"--max-staleness must be at least 0, got {options.max_staleness}"
    if not 0.0 <= options.stale_impact <= 1.0:
        return f"--stale-impact must be in [0, 1], got {options.stale_impact}"
    if options.window < 1:
        return f"--window must be at least 1, got {options.window}"
    cells = options.resolved_cells(size)
    if cells < 1:
        return f"--cells must be at least 1, got {cells}"
    if cells < size:
        return f"--cells {cells} is fewer than the {size} ranks: every rank must own at least one cell"
    if options.cells is not None and cells > num_gaussians:
        return f"--cells {cells} is more than the {num_gaussians} initial Gaussians"
    return None


@dataclass
class Window:
    """The plan of one window: batches [start, stop) (0-based), cells, ownership, visibility, steps."""

    start: int
    stop: int
    cell_of: np.ndarray       # [G] int32 cell of each Gaussian
    member_indptr: np.ndarray  # [K + 1] CSR of each cell's Gaussians (ascending id)
    members: np.ndarray       # [G] int64
    owner: np.ndarray         # [K] int64 rank owning each cell
    visible: np.ndarray       # [C, K] bool predicted visibility
    steps: StepGraph
    plan: DataflowPlan
    margin: object            # odin_sched.visibility.Margin
    staleness: np.ndarray     # [R] int64 updates missed by each read of steps.image_reads (0: exact)

    def cell_rows(self, cell: int) -> np.ndarray:
        """Global ids [g_c] of the Gaussians of ``cell``, ascending."""
        return self.members[self.member_indptr[cell]:self.member_indptr[cell + 1]]

    @cached_property
    def image_rows(self) -> np.ndarray:
        """[I] int64 number of Gaussians each image step renders (all of the cells it reads)."""
        steps = self.steps
        read_rows = np.diff(self.member_indptr)[steps.version_cell[steps.image_reads - steps.num_images]]
        image_of_read = np.repeat(np.arange(steps.num_images), np.diff(steps.image_reads_indptr))
        return np.bincount(image_of_read, weights=read_rows, minlength=steps.num_images).astype(np.int64)

    @cached_property
    def version_writers(self) -> np.ndarray:
        """[V] int64 number of images whose gradient each cell version sums (0 for initial versions)."""
        steps = self.steps
        return np.bincount(steps.image_writes - steps.num_images, minlength=steps.num_vertices - steps.num_images)


@dataclass
class RankMetrics:
    """Time and traffic of one rank over the whole run."""

    compute_seconds: float = 0.0
    comm_seconds: float = 0.0
    wait_seconds: float = 0.0
    plan_seconds: float = 0.0
    processor_seconds: float = 0.0  # processor time (process_time) the rank used while training
    images: int = 0
    messages_sent: int = 0
    bytes_sent: int = 0
    spans: list = field(default_factory=list)

    def as_row(self) -> np.ndarray:
        """The counters [fields] in ``RANK_FIELDS`` order."""
        return np.array([getattr(self, name) for name in RANK_FIELDS], np.float64)


#: per-rank metrics written to /metrics/per_rank (the counters of ``RankMetrics``)
RANK_FIELDS = tuple(f.name for f in fields(RankMetrics) if f.name != "spans")


def owners_by_count(counts: np.ndarray, size: int) -> np.ndarray:
    """Owner rank [K] of each cell: contiguous ranges of cells (spatial neighbours in k-d order) with about
    equal Gaussian counts, every rank at least one cell. counts: [K] Gaussians per cell."""
    k = len(counts)
    cum = np.cumsum(counts) - 0.5 * counts  # each cell's midpoint in the cumulative count
    owner = np.minimum((cum * size / max(cum[-1] + 0.5 * counts[-1], 1)).astype(np.int64), size - 1)
    # every rank owns at least one cell: clamp so rank r starts no later than cell k - size + r
    return np.clip(owner, np.arange(k) - (k - size), np.arange(k))


class StepMessages(DataflowProgram):
    """What the vertices of a window's step graph send (the part of ``TrainingSteps`` the simulator shares).

    An image sends each cell it sees [g_c, GRAD_COLUMNS] floats; a cell version broadcasts its
    parameters [g_c, PARAM_COLUMNS] (nothing for an initial version: every rank holds it).
    steps: the window's StepGraph; cell_sizes: [K] Gaussians per cell.
    """

    def __init__(self, steps: StepGraph, cell_sizes: np.ndarray):
        self.steps, self.cell_sizes = steps, cell_sizes

    def broadcasts(self, vertices: np.ndarray) -> np.ndarray:
        return vertices >= self.steps.num_images

    def payload_size(self, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
        images = self.steps.num_images
        from_image = src < images
        version = np.where(from_image, dst, src) - images
        cells = self.steps.version_cell[version]
        rows = self.cell_sizes[cells]
        initial = ~from_image & (self.steps.version_batch[version] < 0)
        params = np.where(initial, 0, rows * PARAM_COLUMNS)
        return np.where(from_image, rows * GRAD_COLUMNS, params).astype(np.int64)


class TrainingSteps(StepMessages):
    """The training step as a dataflow program over a window's step graph (one instance per rank).

    Image vertex i: inputs are the cell versions it reads ([g_c, 14] parameters, or nothing for a cell
    still at its window-start state); it renders, and sends each cell it sees a [g_c, 16] block
    (gradients, visible flag, screen-space gradient norm, screen radius). Cell-version vertex (c, b): inputs are the
    blocks of batch b's images that see c (and, in odin-fast mode, the previous version of c, which
    only orders the updates); it takes the visible-Adam step of batch b on the cell and broadcasts the
    new parameters [g_c, 14] to the ranks of the images that read this version.
    """

    def __init__(self, trainer: "DistributedTrainer", window: Window):
        super().__init__(window.steps, np.diff(window.member_indptr))
        self.trainer, self.window = trainer, window
        self.start_params = params_of(trainer.opt)  # the window-start state (identical on every rank)
        self.image_losses = {}
        self.updated = {}  # cell version -> Gaussians its Adam step moved (for the timeline)

    def fire(self, ctx, vertex: int, inputs: dict):
        if vertex < self.steps.num_images:
            return self._image(vertex, inputs)
        return self._version(vertex - self.steps.num_images, inputs)

    # --- image step
    def _image(self, image: int, inputs: dict) -> dict:
        steps, window, trainer = self.steps, self.window, self.trainer
        versions = steps.image_reads[steps.image_reads_indptr[image]:steps.image_reads_indptr[image + 1]] - steps.num_images
        cells = steps.version_cell[versions]
        rows = np.concatenate([window.cell_rows(c) for c in cells])
        blocks = []
        for version, cell in zip(versions, cells):
            payload = inputs.get(version + steps.num_images)  # none from an initial version
            if payload is not None and payload.size:
                blocks.append(trainer.staging.to_device(payload, PARAM_COLUMNS))
            else:
                blocks.append(pack_params(self.start_params, trainer.index(window.cell_rows(cell))))
        order = np.argsort(rows, kind="stable")  # render in global id order, as the single process does
        params = unpack_params(torch.cat(blocks)[trainer.index(order)])
        cam = int(steps.image_camera[image])
        scene = trainer.setup.scene
        result = image_gradients(trainer.render, params, *camera(scene, cam, trainer.device), scene.width,
                                 scene.height, trainer.setup.targets[cam], trainer.ssim_weight,
                                 trainer.densify is not None)
        self.image_losses[image] = result.loss
        none = torch.zeros(len(rows), device=trainer.device)
        packed = trainer.staging.to_host(torch.cat(
            [pack_params(result.grads), result.visible[:, None].to(torch.float32),
             (result.screen_norm if result.screen_norm is not None else none)[:, None],
             (result.radii.to(torch.float32) if result.radii is not None else none)[:, None]], dim=1))
        sorted_rows = rows[order]
        writes = steps.image_writes[steps.image_writes_indptr[image]:steps.image_writes_indptr[image + 1]]
        out = {}
        for target, cell in zip(writes, steps.version_cell[writes - steps.num_images]):  # ascending by cell
            positions = np.searchsorted(sorted_rows, window.cell_rows(cell))
            out[int(target)] = np.ascontiguousarray(packed[positions]).reshape(-1)
        return out

    # --- cell version: the visible-Adam step of one batch on one cell
    def _version(self, version: int, inputs: dict) -> np.ndarray:
        steps, trainer = self.steps, self.trainer
        cell, batch = int(steps.version_cell[version]), int(steps.version_batch[version])
        rows = self.window.cell_rows(cell)
        if batch < 0:
            return np.empty(0, np.float32)
        ids = trainer.index(rows)
        total = torch.zeros(len(rows), PARAM_COLUMNS, device=trainer.device)
        seen = torch.zeros(len(rows), dtype=torch.bool, device=trainer.device)
        for image in sorted(k for k in inputs if k < steps.num_images):  # batch order (position in batch)
            block = trainer.staging.to_device(inputs[image], GRAD_COLUMNS)
            total += block[:, :PARAM_COLUMNS]
            visible = block[:, PARAM_COLUMNS] > 0
            seen |= visible
            if trainer.densify is not None:
                trainer.accum.add_rows(ids, block[:, PARAM_COLUMNS + 1], visible, block[:, PARAM_COLUMNS + 2])
        global_batch = self.window.start + batch
        trainer.opt.lrs = trainer.setup.settings.lrs(trainer.setup.extent, global_batch + 1)
        grads = batch_gradient(unpack_params(total), trainer.setup.settings.batch_size)
        idx = torch.nonzero(seen).squeeze(1)
        self.updated[version] = int(idx.numel())
        trainer.opt.step_rows(ids[idx], {name: g[idx] for name, g in grads.items()})
        return trainer.staging.to_host(pack_params(trainer.opt.params, ids)).reshape(-1)


def publish_first(priority: np.ndarray, num_images: int) -> np.ndarray:
    """Firing priorities [N]: cell versions before any image, then by critical path. A version's update
    is cheap and other ranks' images wait for it, so it is published as soon as it is ready."""
    out = np.asarray(priority, np.float64).copy()
    out[num_images:] += out.max(initial=0.0) + 1.0
    return out


def publish_before_compute(steps: StepGraph, rank: np.ndarray) -> GraphData:
    """The step graph plus same-rank ordering edges: a cell version -> the images on its owner's rank
    in the first two batches that read the version. A rank fires one vertex at a time, so an owner that
    started a long image just before the last gradient of one of its cells arrived would hold that
    cell's update back from every reader for a whole image; with these edges it publishes first. The
    edges stay on one rank (no transfer) and go from phase 2b + 1 to a later batch's images, so the
    graph stays a DAG in phase order; images ignore these inputs (they render what they read).
    rank: [N] int64 rank of every vertex."""
    images = steps.num_images
    pair_image = np.repeat(np.arange(images), np.diff(steps.image_reads_indptr))
    version = steps.image_reads - images
    num_versions = steps.num_vertices - images
    first = np.full(num_versions, np.iinfo(np.int64).max)
    np.minimum.at(first, version, steps.image_batch[pair_image])
    read = np.flatnonzero((first < np.iinfo(np.int64).max) & (steps.version_batch >= 0))
    batches = steps.num_batches
    key = rank[:images] * batches + steps.image_batch  # images by (rank, batch)
    order = np.argsort(key, kind="stable")
    bounds = np.searchsorted(key[order], np.arange(rank.max(initial=0) * batches + batches + 1))
    src, dst = [], []
    for extra in (0, 1):  # the first reading batch and the next
        b = first[read] + extra
        keep = b < batches
        v, k = read[keep], rank[images + read[keep]] * batches + b[keep]
        counts = bounds[k + 1] - bounds[k]
        src.append(np.repeat(images + v, counts))
        starts = np.repeat(bounds[k] - (np.cumsum(counts) - counts), counts)
        dst.append(order[starts + np.arange(counts.sum())])
    g = steps.graph
    old_src = np.repeat(np.arange(g.num_nodes, dtype=np.int64), np.diff(g.indptr))
    keys = np.unique(np.concatenate([old_src * g.num_nodes + g.indices, *(s * g.num_nodes + d for s, d in zip(src, dst))]))
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
    initial[steps.num_images:] = steps.version_batch < 0
    keep = ~initial[src]
    indptr, indices = edges_to_csr(graph.num_nodes, src[keep], graph.indices[keep])
    return GraphData(indptr, indices, directed=True)


def plan_window(comm, means: np.ndarray, scales: np.ndarray, viewmats: np.ndarray, Ks: np.ndarray, width: int,
                height: int, batches: np.ndarray, start: int, stop: int, margin, num_cells: int, num_ranks: int,
                max_staleness: int = 0, cost_weights: tuple = (0.0, 1.0, PIXEL_COST),
                stale_impact: float = STALE_IMPACT) -> tuple[Window, Schedule]:
    """Plan batches [start, stop) of ``batches`` [S, B] (collective on ``comm``, the same on every rank):
    cells of the Gaussians (means, log-scales [G, 3]), ownership by ``num_ranks`` ranks, visibility of
    every camera (viewmats [C, 4, 4], Ks [C, 3, 3]) within ``margin``, the step graph (with
    ``relax_reads`` for max_staleness > 0) and its schedule; an image's predicted cost is
    ``cost_weights · (1, predicted visible Gaussians, pixels)``. The runtime plans each window with it and
    the simulator (``odin_sched.simulate``) plans for many virtual GPUs with it on one process."""
    cells = min(num_cells, len(means))
    cell_of = kd_cells(means, cells)
    bounds = cell_bounds(means, scales, cell_of, cells)
    indptr, members = cell_members(cell_of, cells)
    visible = predict_visible_cells(bounds, viewmats, Ks, width, height, margin)
    steps = build_step_graph(batches[start:stop], visible)
    steps, staleness = relax_reads(steps, bounds.count, max_staleness, stale_impact)
    owner = owners_by_count(bounds.count, num_ranks)
    image_cost = (cost_weights[0] + cost_weights[1] * (visible[steps.image_camera].astype(np.float64)
                                                       @ bounds.count.astype(np.float64))
                  + cost_weights[2] * width * height)
    schedule = plan_schedule(comm, steps, image_cost, bounds.count * PARAM_COLUMNS * 4, owner,
                             num_ranks=num_ranks)
    plan = DataflowPlan(without_initial_reads(publish_before_compute(steps, schedule.rank), steps), schedule.rank,
                        publish_first(schedule.priority, steps.num_images), schedule.phase)
    return Window(start, stop, cell_of, indptr, members, owner, visible, steps, plan, margin, staleness), schedule


class DistributedTrainer:
    """Trains on every rank of ``comm``; see the module docstring."""

    def __init__(self, comm, setup: TrainingSetup, steps: int, options: OdinOptions, ssim_weight: float,
                 densify, seed: int, eval_every: int, progress, checkpoint=None, render=None,
                 staging: HostStaging | None = None):
        """``setup`` on the trainer's device (``odin_sched.train.to_device``), ``render`` the rasterizer
        for it (default: ``kernels.splat.render``, the CPU's), ``staging`` its ``HostStaging`` (default:
        the CPU's)."""
        from kernels.splat import render as cpu_render

        self.comm, self.setup, self.steps, self.options = comm, setup, steps, options
        self.checkpoint = checkpoint  # an odin_sched.train_checkpoint.TrainCheckpointer or None
        self.ssim_weight, self.densify, self.eval_every, self.progress = ssim_weight, densify, eval_every, progress
        self.render = render or cpu_render
        self.staging = staging or HostStaging("cpu", staged=False)
        self.device = self.staging.device
        self.opt = VisibleAdam(setup.initial, default_lrs(setup.extent), betas=setup.settings.betas,
                               eps=setup.settings.eps)
        self.accum = GradAccumulator(self.opt.num_gaussians, self.device)
        self.densify_gen = torch.Generator().manual_seed(seed + 1)
        self.num_cells = options.resolved_cells(comm.size)
        self.metrics = RankMetrics()
        self.violations = 0
        self.stale_reads = 0
        self.max_staleness_seen = 0
        self.safety = 1.0
        self.dependency_edges = 0
        self.first_window = None
        self.started = None
        self.labels = {}        # timeline step id -> label
        self.versions_seen = 0  # cell versions of the windows before this one (for timeline ids)

    def index(self, rows: np.ndarray) -> torch.Tensor:
        """Gaussian ids (or positions) [k] int64 as an index tensor on the trainer's device."""
        return torch.from_numpy(rows).to(self.device)

    # --- planning
    def window_end(self, start: int) -> int:
        """The first batch boundary after ``start`` where the window must end (0-based, exclusive)."""
        stop = min(start + self.options.window, self.steps)
        for b in range(start + 1, stop + 1):  # a loop over batch boundaries, not over data
            if due_after(self.densify, b, self.steps, self.setup.settings.batch_size) or b % self.eval_every == 0:
                return b
        return stop

    def plan(self, start: int, stop: int) -> Window:
        setup, opt = self.setup, self.opt
        lrs = setup.settings.lrs(setup.extent, start + 1)  # the largest in the window (decaying)
        margin = window_margin(lrs["means"], lrs["scales"], setup.settings.betas, stop - start, self.safety)
        scene = setup.scene
        window, schedule = plan_window(self.comm, opt.params["means"].detach().cpu().numpy(),
                                       opt.params["scales"].detach().cpu().numpy(), scene.viewmats, scene.Ks,
                                       scene.width, scene.height, setup.batches, start, stop, margin,
                                       self.num_cells, self.comm.size, self.options.staleness,
                                       stale_impact=self.options.stale_impact)
        self.stale_reads += int(np.count_nonzero(window.staleness))
        self.max_staleness_seen = max(self.max_staleness_seen, int(window.staleness.max(initial=0)))
        if self.first_window is None:
            self.first_window = (window, schedule)
        return window

    # --- the run
    def run(self) -> TrainResult:
        comm, setup = self.comm, self.setup
        losses = np.empty(self.steps)
        psnr_steps, psnr_values = [], []
        comm.barrier()
        started = self.started = time.perf_counter()
        processor_started = time.process_time()
        resumed = self._state(0, losses, psnr_steps, psnr_values, 0.0)
        if self.checkpoint is not None:
            self.checkpoint.restore(resumed)
            self.accum, self.safety, self.violations = resumed.accum, resumed.safety, resumed.violations
        start = resumed.step
        while start < self.steps:
            stop = self.window_end(start)
            t0 = time.perf_counter()
            window = self.plan(start, stop)
            self.metrics.plan_seconds += time.perf_counter() - t0
            self._span("compute", t0, time.perf_counter(), started, f"plan steps {start + 1}-{stop}")
            self.dependency_edges += window.steps.graph.num_edges
            snapshot = {k: self.opt.params[k].detach().clone() for k in ("means", "scales")}
            program = TrainingSteps(self, window)
            called = time.perf_counter()
            mode = "bsp" if self.options.mode == "barrier" else "dataflow"
            result = run_dataflow(comm, window.plan, program, mode=mode, trace=self.options.timeline is not None)
            self._record(result, called, time.perf_counter(), started, window, program.updated)
            self.versions_seen += window.steps.num_vertices - window.steps.num_images
            losses[start:stop] = self._gather_state(window, program)
            self._verify(snapshot, window)
            if self.densify is not None:
                self.accum = densify_round(self.opt, self.accum, stop, self.steps, setup.settings.batch_size,
                                           setup.extent, self.densify, self.densify_gen)
            if stop % self.eval_every == 0 or stop == self.steps:
                psnr_steps.append(stop)
                value = evaluate(self.render, self.opt.params, setup.scene, setup.test_ids, setup.targets) \
                    if comm.rank == 0 else None
                psnr_values.append(comm.bcast(value))
                self.progress.write(f"step {stop}: held-out PSNR {psnr_values[-1]:.2f} dB, "
                                    f"{self.opt.num_gaussians} Gaussians")
            self.progress.update(stop, f"loss {losses[stop - 1]:.4f}")
            if self.checkpoint is not None:
                self.checkpoint.save(start, self._state(stop, losses, psnr_steps, psnr_values,
                                                        resumed.wall_time_s + time.perf_counter() - started))
            start = stop
        self.metrics.processor_seconds += time.process_time() - processor_started
        wall = resumed.wall_time_s + time.perf_counter() - started
        return TrainResult(self.steps, self.opt.num_gaussians, wall, np.array(psnr_steps, np.int64),
                           np.array(psnr_values), losses)

    def _state(self, step: int, losses: np.ndarray, psnr_steps: list, psnr_values: list, wall: float) -> TrainState:
        """The training state after ``step`` steps, for checkpointing (global at a window's end)."""
        return TrainState(step, self.opt, self.accum, self.densify_gen, losses, psnr_steps, psnr_values, wall,
                          self.safety, self.violations)

    def _record(self, result, called: float, returned: float, started: float, window: Window,
                updated: dict) -> None:
        """Add one window's run to the metrics. The run's clock starts after its opening barrier, whose
        time (``returned - called - elapsed``) is waiting too. updated: {version: Gaussians stepped}."""
        m = self.metrics
        m.compute_seconds += result.compute_seconds
        m.comm_seconds += result.comm_seconds
        m.wait_seconds += result.wait_seconds + max(0.0, returned - called - result.elapsed_seconds)
        m.images += int(np.count_nonzero(window.plan.rank[:window.steps.num_images] == self.comm.rank))
        m.messages_sent += result.messages_sent
        m.bytes_sent += result.bytes_sent
        if result.spans is not None:
            offset = returned - result.elapsed_seconds - started
            for kind, a, b, v in result.spans:
                step_id = self._step_id(window, v, updated)
                m.spans.append((kind, a + offset, b + offset, step_id))

    def _span(self, kind: str, t0: float, t1: float, started: float, label: str) -> None:
        """A timeline span outside the dataflow runs (planning, window boundaries), when tracing."""
        if self.options.timeline is not None:
            step_id = -2 - len(self.labels)
            self.labels[step_id] = label
            self.metrics.spans.append((kind, t0 - started, t1 - started, step_id))

    def _step_id(self, window: Window, vertex: int, updated: dict) -> int:
        """A run-wide id of a window's vertex for the timeline (-1 for none), labelled in ``self.labels``:
        images by their global index, cell versions after all images."""
        if vertex < 0:
            return -1
        steps = window.steps
        if vertex < steps.num_images:
            image = window.start * steps.batch_size + int(vertex)
            if image not in self.labels:
                self.labels[image] = (f"image {image} (step {image // steps.batch_size + 1}, camera "
                                      f"{int(steps.image_camera[vertex])}, renders "
                                      f"{int(window.image_rows[vertex])} Gaussians of "
                                      f"{int(steps.image_reads_indptr[vertex + 1] - steps.image_reads_indptr[vertex])} "
                                      f"cells)")
            return image
        version = int(vertex) - steps.num_images
        step_id = self.steps * steps.batch_size + self.versions_seen + version
        batch = int(steps.version_batch[version])
        self.labels.setdefault(step_id, f"cell {int(steps.version_cell[version])} "
                                        + (f"after step {window.start + batch + 1} (sums "
                                           f"{int(window.version_writers[version])} images, steps "
                                           f"{updated.get(version, 0)} Gaussians)" if batch >= 0 else
                                           f"at step {window.start + 1}"))
        return step_id

    def _gather_state(self, window: Window, program: TrainingSteps) -> np.ndarray:
        """Window end: every owner's cells onto every rank (a barrier first, timed as wait, then one
        Allgatherv, timed as communication). Returns the window's batch losses [stop - start]."""
        comm, opt = self.comm, self.opt
        t0 = time.perf_counter()
        comm.barrier()
        t1 = time.perf_counter()
        mine = self.index(np.flatnonzero(window.owner[window.cell_of] == comm.rank))
        floats = torch.cat([pack_params(state, mine) for state in (opt.params, opt.exp_avg, opt.exp_avg_sq)]
                           + [self.accum.total[mine][:, None], self.accum.max_radii[mine][:, None]], dim=1)
        ints = torch.stack([mine, opt.step_count[mine], self.accum.count[mine]], dim=1)
        staging = self.staging
        floats = staging.to_device(comm.allgather_rows(staging.to_host(floats)), floats.shape[1])
        ints = staging.to_device(comm.allgather_rows(staging.to_host(ints)), ints.shape[1])
        ids = ints[:, 0]
        with torch.no_grad():
            for i, state in enumerate((opt.params, opt.exp_avg, opt.exp_avg_sq)):
                part = floats[:, i * PARAM_COLUMNS:(i + 1) * PARAM_COLUMNS]
                for name, value in unpack_params(part).items():
                    state[name][ids] = value
        opt.step_count[ids] = ints[:, 1]
        self.accum.total[ids] = floats[:, 3 * PARAM_COLUMNS]
        self.accum.max_radii[ids] = floats[:, 3 * PARAM_COLUMNS + 1]
        self.accum.count[ids] = ints[:, 2]
        losses = comm.allgather_rows(np.array(sorted(program.image_losses.items()), np.float64).reshape(-1, 2))
        by_image = dict(zip(losses[:, 0].astype(np.int64), losses[:, 1]))
        b = window.steps.batch_size
        batch = [batch_loss([by_image[i] for i in range(j * b, (j + 1) * b)])
                 for j in range(window.stop - window.start)]
        t2 = time.perf_counter()
        self.metrics.wait_seconds += t1 - t0
        self.metrics.comm_seconds += t2 - t1
        self._span("barrier", t0, t1, self.started, f"end of window {window.start + 1}-{window.stop}")
        self._span("send", t1, t2, self.started, f"gather the model after step {window.stop}")
        return np.array(batch)

    def _verify(self, snapshot: dict, window: Window) -> None:
        """Count Gaussians that moved or grew past the window's margin (the prediction's premise)."""
        now = params_of(self.opt)
        ok = motion_within_margin(*(state[name].cpu().numpy() for state in (snapshot, now)
                                    for name in ("means", "scales")), window.margin)
        bad = int(np.count_nonzero(~ok))
        if bad:
            self.violations += bad
            self.safety *= MARGIN_GROWTH
            self.progress.write(f"warning: {bad} Gaussians left the visibility margin in batches "
                                f"{window.start + 1}-{window.stop}; the next window's margin is {self.safety:g}x")


def train_distributed(comm, scene_path, steps: int, out_path, options: OdinOptions, *, ply_path=None,
                      png_path=None, seed: int = 0, ssim_weight: float = 0.2, densify=None, eval_every: int = 100,
                      batch_size: int = 1, progress: bool = True, init_ply=None,
                      image_order: str | None = None, checkpoint=None, device: str = "cpu",
                      position_lr_max_steps: int = POSITION_LR_MAX_STEPS) -> TrainResult:
    """Train on every rank of ``comm`` (collective) and write the outputs from rank 0.

    The arguments are those of ``odin_sched.train.train`` plus ``options``; with ``device='cuda'``
    every rank trains on its GPU (``training_device``) and its payloads cross ranks through the host
    (``HostStaging``). Returns the TrainResult (the same on every rank). Bad options or input raise the
    same InputError on every rank.
    """
    import os

    if device == "cuda" and checkpoint is not None:
        raise InputError(NO_CUDA_CHECKPOINTS)
    dev, render = training_device(device, comm)
    png_path = png_path or os.path.splitext(os.fspath(out_path))[0] + ".png"
    setup, problem = None, None
    try:
        setup = prepare(scene_path, steps, batch_size, seed, ssim_weight, eval_every,
                        (out_path, ply_path, png_path, options.timeline, options.schedule_out), init_ply,
                        image_order, position_lr_max_steps)
        problem = check_options(options, comm.size, setup.initial["means"].shape[0], batch_size)
    except InputError as err:
        problem = str(err)
    comm.agree(None if problem is None else InputError(problem))
    if batch_size < comm.size and comm.rank == 0:
        print(f"note: --batch-size {batch_size} < {comm.size} ranks: at most {batch_size} ranks can work on a "
              f"batch at once")
    bar = Progress(steps, enabled=progress and comm.rank == 0, unit="step")
    staging = HostStaging(dev, staged=device == "cuda")
    trainer = DistributedTrainer(comm, to_device(setup, dev), steps, options, ssim_weight, densify, seed, eval_every,
                                 bar, checkpoint, render, staging)
    result = trainer.run()
    bar.close()
    table = comm.gather_rows(trainer.metrics.as_row()[None, :])
    spans = comm.allgather(trainer.metrics.spans) if options.timeline is not None else None
    labels = comm.allgather(trainer.labels) if options.timeline is not None else None
    # the payloads always go through host buffers (the transport sends NumPy arrays): not CUDA-aware
    staged = {"cuda_aware_mpi": False, "bytes_staged": int(sum(comm.allgather(staging.bytes_staged)))} \
        if device == "cuda" else {}
    if comm.rank == 0:
        totals = dict(zip(RANK_FIELDS, table.sum(axis=0)))
        attrs = {"mode": options.mode, "ranks": comm.size, "batch_size": batch_size,
                 "steps_per_second": steps / result.wall_time_s,
                 "compute_seconds": totals["compute_seconds"], "comm_seconds": totals["comm_seconds"],
                 "wait_seconds": totals["wait_seconds"], "visibility_violations": trainer.violations,
                 "max_staleness": options.staleness, "stale_reads": trainer.stale_reads,
                 "max_staleness_seen": trainer.max_staleness_seen, "stale_impact": options.stale_impact,
                 "cells": trainer.num_cells, "window": options.window,
                 "dependency_edges": trainer.dependency_edges,
                 "per_rank_fields": list(RANK_FIELDS), "seed": seed, "ssim_weight": ssim_weight,
                 "densify": densify is not None, "source_scene": os.path.abspath(scene_path), "device": device,
                 **staged}
        write_outputs(trainer.render, setup, params_of(trainer.opt), result, out_path, ply_path, png_path, attrs,
                      metrics={"per_rank": table})
        if options.timeline is not None:
            write_chrome_trace(options.timeline, spans, {k: v for part in labels for k, v in part.items()})
        if options.schedule_out is not None:
            from odin_sched.depgraph import write_schedule

            window, schedule = trainer.first_window
            write_schedule(options.schedule_out, window.steps, schedule)
    result.per_rank = comm.bcast(table)
    result.visibility_violations = trainer.violations
    comm.barrier()
    return result
