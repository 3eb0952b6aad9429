"""Barrier-free distributed training of Gaussian splatting (Odin), on the engine's dataflow mode.

Training is cut into *windows* of at most ``window`` batches (also ending where densification or
evaluation is due). At a window's start every rank holds the whole model; every rank then plans the
window the same way:

1. the Gaussians are grouped into spatial cells (``odin_sched.scenes.cells``), and contiguous ranges of cells
   are given to the ranks (balanced by Gaussian count): a cell's parameters and Adam state are
   updated only by its owner;
2. the cells each camera can see during the window are predicted conservatively
   (``odin_sched.scenes.visibility``);
3. the dependency graph of the window's steps is built (``odin_sched.odin.depgraph``): image steps and
   cell versions, an image reading the versions of the cells it sees and sending its gradient to the
   cells' next versions;
4. levels, critical-path priorities and the rank of every step are computed by vertex programs run by
   the engine (``odin_sched.odin.schedule``).

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
single-process trainer (``odin_sched.training.step``) and a cell's latest version lives in one place, the
result equals the single-process run with the same batch size bit for bit, whatever the number of
ranks — provided the visibility prediction held, which is checked and reported
(``visibility_violations``). ``mode="barrier"`` runs the same program in the engine's bulk-synchronous
mode (a collective exchange and a global barrier per phase), the synchronous baseline of Grendel-GS.

With ``device='cuda'`` each rank's copy of the model, its cells' Adam state, the renders, losses,
backward passes and Adam steps are on the rank's GPU; the blocks sent between ranks and the
window-end gather cross through host memory in ``HostStaging``, which counts the bytes copied.

Where each part lives, one class per job: ``WindowPlanner`` (with ``plan_window``) plans the windows;
``TrainingSteps`` is a window's program, with its inputs made explicit (``ImageInputs``,
``CellInputs``; ``StepMessages`` is the part the simulator shares); ``odin_sched.odin.window_end`` is
the window-end gather and visibility check; ``RankRecord`` keeps a rank's metrics and timeline labels;
``DistributedTrainer.run`` reads as a window's phases: plan, run the program, gather, check visibility,
densify and evaluate.
"""
import time
from dataclasses import dataclass, field, fields
from functools import cached_property

import numpy as np
import torch

from kernels.splat import render as cpu_render
from odin_sched.odin.modes import MODES
from odin_sched.odin.depgraph import StepGraph, build_step_graph, write_schedule
from odin_sched.odin.schedule import Schedule, plan_schedule
from odin_sched.odin.staging import HostStaging
from odin_sched.odin.staleness import STALE_IMPACT, relax_reads
from odin_sched.odin.window_end import escaped, gather_state, motion_snapshot
from odin_sched.scenes.cells import cell_bounds, cell_members, kd_cells
from odin_sched.scenes.visibility import predict_visible_cells, window_margin
from odin_sched.training.checkpoint import TrainState
from odin_sched.training.densify import GradAccumulator, densify_round, due_after
from odin_sched.training.optim import VisibleAdam
from odin_sched.training.step import batch_gradient, image_gradients, pack_params, param_columns, unpack_params
from odin_sched.training.config import TrainConfig
from odin_sched.scenes.scene_io import Scene
from odin_sched.scenes.sh import DEFAULT_SH_DEGREE
from odin_sched.training.train import (TrainResult, TrainingSetup, camera, comparison_writer, evaluate, new_optimizer,
                                       params_of, set_up, write_outputs)
from odin_sched.training.status import SPAN_KINDS, TrainStatus, window_spans
from pregel.dataflow import DataflowPlan, DataflowProgram, run_dataflow, write_chrome_trace
from pregel.generate import edges_to_csr
from pregel.graph_io import GraphData
from pregel.progress import Progress

#: a violation doubles the visibility margin of the next window
MARGIN_GROWTH = 2.0
#: predicted cost of a pixel relative to one visible Gaussian (image cost = visible Gaussians + c x pixels)
PIXEL_COST = 0.05


@dataclass
class OdinOptions:
    """The distributed trainer's settings, besides the ``TrainConfig`` it shares with the single-process
    trainer (``pregel train``'s flags of the same names set them)."""

    mode: str = "odin"         # one of MODES (``odin_sched.odin.modes``)
    cells: int | None = None   # default: CELLS_PER_RANK x ranks
    window: int = 10           # batches per planning window
    timeline: str | None = None       # write a Chrome trace of the run here
    schedule_out: str | None = None   # write the first window's step graph and schedule here
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


def check_options(options: OdinOptions, size: int, num_gaussians: int) -> str | None:
    """A one-line problem with the distributed options, or None."""
    if options.mode not in MODES:
        return f"OdinOptions.mode must be one of {', '.join(MODES)}, got {options.mode!r}"
    if options.max_staleness < 0:
        return f"OdinOptions.max_staleness must be at least 0, got {options.max_staleness}"
    if not 0.0 <= options.stale_impact <= 1.0:
        return f"OdinOptions.stale_impact must be in [0, 1], got {options.stale_impact}"
    if options.window < 1:
        return f"OdinOptions.window must be at least 1, got {options.window}"
    cells = options.resolved_cells(size)
    if cells < 1:
        return f"OdinOptions.cells must be at least 1, got {cells}"
    if cells < size:
        return f"OdinOptions.cells {cells} is fewer than the {size} ranks: every rank must own at least one cell"
    if options.cells is not None and cells > num_gaussians:
        return f"OdinOptions.cells {cells} is more than the {num_gaussians} initial Gaussians"
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
    margin: object            # odin_sched.scenes.visibility.Margin
    staleness: np.ndarray     # [R] int64 updates missed by each read of steps.image_reads (0: exact)

    def cell_rows(self, cell: int) -> np.ndarray:
        """Global ids [g_c] of the Gaussians of ``cell``, ascending."""
        return self.members[self.member_indptr[cell]:self.member_indptr[cell + 1]]

    @cached_property
    def image_rows(self) -> np.ndarray:
        """[I] int64 number of Gaussians each image step renders (all of the cells it reads)."""
        steps = self.steps
        read_rows = np.diff(self.member_indptr)[steps.version_cell[steps.version_index(steps.image_reads)]]
        image_of_read = np.repeat(np.arange(steps.num_images), np.diff(steps.image_reads_indptr))
        return np.bincount(image_of_read, weights=read_rows, minlength=steps.num_images).astype(np.int64)

    @cached_property
    def version_writers(self) -> np.ndarray:
        """[V] int64 number of images whose gradient each cell version sums (0 for initial versions)."""
        steps = self.steps
        return np.bincount(steps.version_index(steps.image_writes), minlength=steps.num_versions)


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


class RankRecord:
    """One rank's ``metrics`` and timeline ``labels`` (timeline step id -> label) over a run.

    rank: this rank; total_images: images of the whole run (steps x B; cell versions get timeline ids
    after them); tracing: whether spans are kept. Times are relative to ``start()``.
    """

    def __init__(self, rank: int, total_images: int, tracing: bool):
        self.rank, self.total_images, self.tracing = rank, total_images, tracing
        self.metrics = RankMetrics()
        self.labels = {}
        self.versions_seen = 0  # cell versions of the windows before this one (for timeline ids)
        self.started = None

    def start(self) -> float:
        """Mark the run's start (time 0 of the timeline); returns it (``time.perf_counter``)."""
        self.started = time.perf_counter()
        return self.started

    def planned(self, t0: float, t1: float, window) -> None:
        """The planning of ``window`` took [t0, t1]."""
        self.metrics.plan_seconds += t1 - t0
        self.span("compute", t0, t1, f"plan steps {window.start + 1}-{window.stop}")

    def window_run(self, result, called: float, returned: float, window, updated: dict) -> None:
        """Add one window's dataflow run to the metrics. The run's clock starts after its opening
        barrier, whose time (``returned - called - elapsed``) is waiting too. updated: {version:
        Gaussians stepped}."""
        m = self.metrics
        m.compute_seconds += result.compute_seconds
        m.comm_seconds += result.comm_seconds
        m.wait_seconds += result.wait_seconds + max(0.0, returned - called - result.elapsed_seconds)
        m.images += int(np.count_nonzero(window.plan.rank[window.steps.images] == self.rank))
        m.messages_sent += result.messages_sent
        m.bytes_sent += result.bytes_sent
        if self.tracing and result.spans is not None:
            offset = returned - result.elapsed_seconds - self.started
            for kind, a, b, v in result.spans:
                m.spans.append((kind, a + offset, b + offset, self._step_id(window, v, updated)))
        self.versions_seen += window.steps.num_versions

    def gathered(self, t0: float, t1: float, t2: float, window) -> None:
        """The window-end gather: a barrier [t0, t1] (waiting), the allgather [t1, t2] (communication)."""
        self.metrics.wait_seconds += t1 - t0
        self.metrics.comm_seconds += t2 - t1
        self.span("barrier", t0, t1, f"end of window {window.start + 1}-{window.stop}")
        self.span("send", t1, t2, f"gather the model after step {window.stop}")

    def span(self, kind: str, t0: float, t1: float, label: str) -> None:
        """A timeline span outside the dataflow runs (planning, window boundaries), when tracing."""
        if self.tracing:
            step_id = -2 - len(self.labels)
            self.labels[step_id] = label
            self.metrics.spans.append((kind, t0 - self.started, t1 - self.started, step_id))

    def _step_id(self, window, vertex: int, updated: dict) -> int:
        """A run-wide id of a window's vertex for the timeline (-1 for none), labelled in ``self.labels``:
        images by their global index, cell versions after all images."""
        if vertex < 0:
            return -1
        steps = window.steps
        if steps.is_image(vertex):
            image = window.start * steps.batch_size + int(vertex)
            if image not in self.labels:
                self.labels[image] = (f"image {image} (step {image // steps.batch_size + 1}, camera "
                                      f"{int(steps.image_camera[vertex])}, renders "
                                      f"{int(window.image_rows[vertex])} Gaussians of "
                                      f"{int(steps.image_reads_indptr[vertex + 1] - steps.image_reads_indptr[vertex])} "
                                      f"cells)")
            return image
        version = int(steps.version_index(vertex))
        step_id = self.total_images + self.versions_seen + version
        batch = int(steps.version_batch[version])
        self.labels.setdefault(step_id, f"cell {int(steps.version_cell[version])} "
                                        + (f"after step {window.start + batch + 1} (sums "
                                           f"{int(window.version_writers[version])} images, steps "
                                           f"{updated.get(version, 0)} Gaussians)" if batch >= 0 else
                                           f"at step {window.start + 1}"))
        return step_id


def format_per_rank(result) -> str:
    """The per-rank time and traffic table of a distributed run's ``TrainResult``, and its speed."""
    header = "rank " + " ".join(f"{name:>15}" for name in RANK_FIELDS)
    rows = [f"{r:>4} " + " ".join(f"{v:>15.3f}" if "seconds" in name else f"{int(v):>15,}"
                                  for name, v in zip(RANK_FIELDS, row))
            for r, row in enumerate(result.per_rank)]
    return "\n".join([header, *rows, f"{result.steps / result.wall_time_s:.2f} steps/s, "
                                      f"{result.visibility_violations} visibility violations"])


def owners_by_count(counts: np.ndarray, size: int) -> np.ndarray:
    """Owner rank [K] of each cell: contiguous ranges of cells (spatial neighbours in k-d order) with about
    equal Gaussian counts, every rank at least one cell. counts: [K] Gaussians per cell."""
    k = len(counts)
    cum = np.cumsum(counts) - 0.5 * counts  # each cell's midpoint in the cumulative count
    owner = np.minimum((cum * size / max(cum[-1] + 0.5 * counts[-1], 1)).astype(np.int64), size - 1)
    # every rank owns at least one cell: clamp so rank r starts no later than cell k - size + r
    return np.clip(owner, np.arange(k) - (k - size), np.arange(k))


#: columns of an image's message to a cell after the parameter gradients: visible (0/1), screen norm,
#: screen radius (pixels)
GRAD_EXTRA = 3


class StepMessages(DataflowProgram):
    """What the vertices of a window's step graph send (the part of ``TrainingSteps`` the simulator shares).

    An image sends each cell it sees [g_c, columns + GRAD_EXTRA] floats; a cell version broadcasts its
    parameters [g_c, columns] (nothing for an initial version: every rank holds it).
    steps: the window's StepGraph; cell_sizes: [K] Gaussians per cell; columns: float32 parameters per
    Gaussian (``odin_sched.training.step.param_columns`` of the SH degree: 14 at degree 0, 59 at degree 3).
    """

    def __init__(self, steps: StepGraph, cell_sizes: np.ndarray, columns: int):
        self.steps, self.cell_sizes, self.columns = steps, cell_sizes, columns

    def broadcasts(self, vertices: np.ndarray) -> np.ndarray:
        return ~self.steps.is_image(vertices)

    def payload_size(self, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
        from_image = self.steps.is_image(src)
        version = self.steps.version_index(np.where(from_image, dst, src))
        cells = self.steps.version_cell[version]
        rows = self.cell_sizes[cells]
        initial = ~from_image & (self.steps.version_batch[version] < 0)
        params = np.where(initial, 0, rows * self.columns)
        return np.where(from_image, rows * (self.columns + GRAD_EXTRA), params).astype(np.int64)


@dataclass
class ImageInputs:
    """What an image step reads besides its cells: the scene's cameras, the target images [H, W, 3] by
    camera, the rasterizer, the loss's SSIM weight, whether to return screen-space gradient norms
    (for densification), and the SH degree rendered in each batch of the window ([stop - start])."""

    scene: Scene
    targets: dict
    render: object
    ssim_weight: float
    screen_norms: bool
    sh_degrees: list


@dataclass
class CellInputs:
    """What a cell version updates and with what: the optimizer (its rows of the cell's Gaussians), the
    densification accumulator (None without densification), the learning rates of each batch of the
    window (name -> float, [stop - start]), the batch size B and the largest SH degree trained."""

    opt: VisibleAdam
    accum: GradAccumulator | None
    lrs: list
    batch_size: int
    sh_degree: int


class TrainingSteps(StepMessages):
    """The training step as a dataflow program over a window's step graph (one instance per rank).

    Image vertex i: inputs are the cell versions it reads ([g_c, columns] parameters, ``param_columns`` of
    the SH degree, or nothing for a cell still at its window-start state); it renders at its batch's SH
    degree, and sends each cell it sees a [g_c, columns + 3] block (gradients, visible flag, screen-space
    gradient norm, screen radius). Cell-version vertex (c, b): inputs are the blocks of batch b's images that see c (and,
    in odin-fast mode, the previous version of c, which only orders the updates); it takes the
    visible-Adam step of batch b on the cell and broadcasts the new parameters [g_c, columns] to the
    ranks of the images that read this version.
    window: the planned ``Window``; start_params: the window-start parameters (name -> [G, ...], the
    same on every rank); staging: the rank's ``HostStaging`` (its device and host copies).
    """

    def __init__(self, window, start_params: dict, images: ImageInputs, cells: CellInputs, staging: HostStaging):
        super().__init__(window.steps, np.diff(window.member_indptr), param_columns(cells.sh_degree))
        self.window, self.start_params, self.images, self.cells, self.staging = window, start_params, images, cells, staging
        self.image_losses = {}  # image -> its loss
        self.updated = {}       # cell version -> Gaussians its Adam step moved (for the timeline)

    def fire(self, ctx, vertex: int, inputs: dict):
        if self.steps.is_image(vertex):
            return self._image(vertex, inputs)
        return self._version(self.steps.version_index(vertex), inputs)

    def _index(self, rows: np.ndarray) -> torch.Tensor:
        """Gaussian ids (or positions) [k] int64 as an index tensor on the rank's device."""
        return torch.from_numpy(rows).to(self.staging.device)

    # --- image step
    def _image(self, image: int, inputs: dict) -> dict:
        steps, window, staging, given = self.steps, self.window, self.staging, self.images
        reads = steps.image_reads[steps.image_reads_indptr[image]:steps.image_reads_indptr[image + 1]]
        cells = steps.version_cell[steps.version_index(reads)]
        rows = np.concatenate([np.empty(0, np.int64), *(window.cell_rows(c) for c in cells)])  # none: sees nothing
        blocks = [torch.zeros(0, self.columns, device=staging.device)]
        for vertex, cell in zip(reads, cells):
            payload = inputs.get(vertex)  # none from an initial version
            if payload is not None and payload.size:
                blocks.append(staging.to_device(payload, self.columns))
            else:
                blocks.append(pack_params(self.start_params, self._index(window.cell_rows(cell))))
        order = np.argsort(rows, kind="stable")  # render in global id order, as the single process does
        params = unpack_params(torch.cat(blocks)[self._index(order)], self.cells.sh_degree)
        cam = int(steps.image_camera[image])
        scene = given.scene
        result = image_gradients(given.render, params, *camera(scene, cam, staging.device), scene.width,
                                 scene.height, given.targets[cam], given.ssim_weight, given.screen_norms,
                                 given.sh_degrees[int(steps.image_batch[image])])
        self.image_losses[image] = result.loss
        none = torch.zeros(len(rows), device=staging.device)
        packed = staging.to_host(torch.cat(
            [pack_params(result.grads), result.visible[:, None].to(torch.float32),
             (result.screen_norm if result.screen_norm is not None else none)[:, None],
             (result.radii.to(torch.float32) if result.radii is not None else none)[:, None]], dim=1))
        sorted_rows = rows[order]
        writes = steps.image_writes[steps.image_writes_indptr[image]:steps.image_writes_indptr[image + 1]]
        out = {}
        for target, cell in zip(writes, steps.version_cell[steps.version_index(writes)]):  # ascending by cell
            positions = np.searchsorted(sorted_rows, window.cell_rows(cell))
            out[int(target)] = np.ascontiguousarray(packed[positions]).reshape(-1)
        return out

    # --- cell version: the visible-Adam step of one batch on one cell
    def _version(self, version: int, inputs: dict) -> np.ndarray:
        steps, staging, given = self.steps, self.staging, self.cells
        cell, batch = int(steps.version_cell[version]), int(steps.version_batch[version])
        rows = self.window.cell_rows(cell)
        if batch < 0:
            return np.empty(0, np.float32)
        ids = self._index(rows)
        columns = self.columns
        total = torch.zeros(len(rows), columns, device=staging.device)
        seen = torch.zeros(len(rows), dtype=torch.bool, device=staging.device)
        for image in sorted(k for k in inputs if steps.is_image(k)):  # batch order (position in batch)
            block = staging.to_device(inputs[image], columns + GRAD_EXTRA)
            total += block[:, :columns]
            visible = block[:, columns] > 0
            seen |= visible
            if given.accum is not None:
                given.accum.add_rows(ids, block[:, columns + 1], visible, block[:, columns + 2])
        grads = batch_gradient(unpack_params(total, given.sh_degree), given.batch_size)
        idx = torch.nonzero(seen).squeeze(1)
        self.updated[version] = int(idx.numel())
        given.opt.step_rows(ids[idx], {name: g[idx] for name, g in grads.items()}, lrs=given.lrs[batch])
        return staging.to_host(pack_params(given.opt.params, ids)).reshape(-1)


def publish_first(priority: np.ndarray, steps: StepGraph) -> np.ndarray:
    """Firing priorities [N]: cell versions before any image, then by critical path. A version's update
    is cheap and other ranks' images wait for it, so it is published as soon as it is ready."""
    out = np.asarray(priority, np.float64).copy()
    out[steps.versions] += out.max(initial=0.0) + 1.0
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
    initial[steps.versions] = steps.version_batch < 0
    keep = ~initial[src]
    indptr, indices = edges_to_csr(graph.num_nodes, src[keep], graph.indices[keep])
    return GraphData(indptr, indices, directed=True)


@dataclass
class PlanConfig:
    """How windows are planned: ``num_cells`` cells owned by ``num_ranks`` ranks; reads up to
    ``max_staleness`` updates old (odin-fast) for at most ``stale_impact`` of an image's Gaussians; an
    image's predicted cost ``cost_weights · (1, predicted visible Gaussians, pixels)``; a cell's transfer
    its Gaussians' parameters at SH degree ``sh_degree`` (``param_columns``)."""

    num_cells: int
    num_ranks: int
    max_staleness: int = 0
    stale_impact: float = STALE_IMPACT
    cost_weights: tuple = (0.0, 1.0, PIXEL_COST)
    sh_degree: int = DEFAULT_SH_DEGREE


def plan_window(comm, means: np.ndarray, scales: np.ndarray, cameras, batches: np.ndarray, start: int, stop: int,
                margin, config: PlanConfig) -> tuple[Window, Schedule]:
    """Plan batches [start, stop) of ``batches`` [S, B] (collective on ``comm``, the same on every rank):
    cells of the Gaussians (means, log-scales [G, 3]), ownership by ``num_ranks`` ranks, visibility of
    every camera (viewmats [C, 4, 4], Ks [C, 3, 3]) within ``margin``, the step graph (with
    ``relax_reads`` for max_staleness > 0) and its schedule; an image's predicted cost is
    ``cost_weights · (1, predicted visible Gaussians, pixels)``. The runtime plans each window with it and
    the simulator (``odin_sched.sim.simulate``) plans for many virtual GPUs with it on one process.
    cameras: a Scene or a SimScene (its viewmats, Ks, width and height); config: see ``PlanConfig``."""
    num_cells, num_ranks, max_staleness, stale_impact = (config.num_cells, config.num_ranks, config.max_staleness,
                                                         config.stale_impact)
    viewmats, Ks, width, height, cost_weights = cameras.viewmats, cameras.Ks, cameras.width, cameras.height, \
        config.cost_weights
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
    schedule = plan_schedule(comm, steps, image_cost, bounds.count * param_columns(config.sh_degree) * 4, owner,
                             num_ranks=num_ranks)
    plan = DataflowPlan(without_initial_reads(publish_before_compute(steps, schedule.rank), steps), schedule.rank,
                        publish_first(schedule.priority, steps), schedule.phase)
    return Window(start, stop, cell_of, indptr, members, owner, visible, steps, plan, margin, staleness), schedule


class WindowPlanner:
    """Planning: where each window ends, and its plan (``plan_window``) within a visibility margin that
    a violation widens (``safety``); keeps the planning statistics of the run."""

    def __init__(self, comm, setup: TrainingSetup, steps: int, options: OdinOptions, densify, eval_every: int):
        self.comm, self.setup, self.steps, self.options = comm, setup, steps, options
        self.densify, self.eval_every = densify, eval_every
        self.num_cells = options.resolved_cells(comm.size)
        self.safety = 1.0           # the margin's factor: MARGIN_GROWTH after each violation
        self.stale_reads = 0        # reads of an older version than the synchronous order's (odin-fast)
        self.max_staleness_seen = 0
        self.dependency_edges = 0
        self.first_window = None    # (Window, Schedule) of the first window, for --schedule-out

    def window_end(self, start: int) -> int:
        """The first batch boundary after ``start`` where the window must end (0-based, exclusive)."""
        stop = min(start + self.options.window, self.steps)
        for b in range(start + 1, stop + 1):  # a loop over batch boundaries, not over data
            if due_after(self.densify, b, self.steps, self.setup.settings.batch_size) or b % self.eval_every == 0:
                return b
        return stop

    def plan(self, start: int, stop: int, params: dict) -> Window:
        """The plan of batches [start, stop) from the window-start parameters (name -> [G, ...])."""
        setup = self.setup
        lrs = setup.settings.lrs(setup.extent, start + 1)  # the largest in the window (decaying)
        margin = window_margin(lrs["means"], lrs["scales"], setup.settings.betas, stop - start, self.safety)
        config = PlanConfig(self.num_cells, self.comm.size, self.options.staleness, self.options.stale_impact,
                            sh_degree=setup.sh_degree)
        window, schedule = plan_window(self.comm, params["means"].detach().cpu().numpy(),
                                       params["scales"].detach().cpu().numpy(), setup.scene, setup.batches, start,
                                       stop, margin, config)
        self.stale_reads += int(np.count_nonzero(window.staleness))
        self.max_staleness_seen = max(self.max_staleness_seen, int(window.staleness.max(initial=0)))
        self.dependency_edges += window.steps.graph.num_edges
        if self.first_window is None:
            self.first_window = (window, schedule)
        return window

    def widen(self) -> None:
        """After a visibility violation: the next windows' margin grows by ``MARGIN_GROWTH``."""
        self.safety *= MARGIN_GROWTH


class DistributedTrainer:
    """Trains on every rank of ``comm``; see the module docstring. A window's phases: plan
    (``WindowPlanner``), run its program (``TrainingSteps``), gather the model and check the
    visibility prediction (``odin_sched.odin.window_end``), densify and evaluate; ``record`` (a
    ``RankRecord``) keeps the rank's metrics and timeline."""

    def __init__(self, comm, setup: TrainingSetup, config: TrainConfig, options: OdinOptions, progress,
                 checkpoint=None, render=None, staging: HostStaging | None = None):
        """``setup`` on the trainer's device (``odin_sched.training.train.to_device``), ``render`` the
        rasterizer for it (default: ``kernels.splat.render``, the CPU's), ``staging`` its ``HostStaging``
        (default: the CPU's)."""
        self.comm, self.setup, self.options, self.progress = comm, setup, options, progress
        self.steps, self.densify, self.eval_every = config.steps, config.densify, config.eval_every
        self.ssim_weight = config.ssim_weight
        self.checkpoint = checkpoint  # an odin_sched.training.checkpoint.TrainCheckpointer or None
        self.render = render or cpu_render
        self.staging = staging or HostStaging("cpu", staged=False)
        self.opt = new_optimizer(setup)
        self.accum = GradAccumulator(self.opt.num_gaussians, self.staging.device)
        self.densify_gen = torch.Generator().manual_seed(config.seed + 1)
        self.planner = WindowPlanner(comm, setup, self.steps, options, self.densify, self.eval_every)
        self.record = RankRecord(comm.rank, self.steps * setup.settings.batch_size, options.timeline is not None)
        self.violations = 0
        self.status = None       # an odin_sched.training.status.TrainStatus when the dashboard's file is written
        self.window_spans = None  # the last window's dataflow spans, for the dashboard
        self.heldout_view = None  # rank 0: the first held-out camera's view at the last evaluation

    def run(self) -> TrainResult:
        """Train every window in turn (collective); returns the result (the same on every rank)."""
        losses = np.empty(self.steps)
        psnr_steps, psnr_values = [], []
        self.comm.barrier()
        started = self.record.start()
        processor_started = time.process_time()
        resumed = self._state(0, losses, psnr_steps, psnr_values, 0.0)
        if self.checkpoint is not None:
            self.checkpoint.restore(resumed)
            self.accum, self.planner.safety, self.violations = resumed.accum, resumed.safety, resumed.violations
        start = resumed.step
        while start < self.steps:
            stop = self.planner.window_end(start)
            window = self._plan(start, stop)
            snapshot = motion_snapshot(self.opt)
            report = self._report_due(stop)
            program = self._run_window(window, report)
            losses[start:stop] = self._gather(window, program)
            self._check_visibility(snapshot, window)
            evaluated = self._densify_and_evaluate(stop, psnr_steps, psnr_values)
            self.progress.update(stop, f"loss {losses[stop - 1]:.4f}")
            if report:
                self._report(stop, losses, psnr_steps, psnr_values, evaluated)
            if self.checkpoint is not None:
                self.checkpoint.save(start, self._state(stop, losses, psnr_steps, psnr_values,
                                                        resumed.wall_time_s + time.perf_counter() - started))
            start = stop
        self.record.metrics.processor_seconds += time.process_time() - processor_started
        wall = resumed.wall_time_s + time.perf_counter() - started
        return TrainResult(self.steps, self.opt.num_gaussians, wall, np.array(psnr_steps, np.int64),
                           np.array(psnr_values), losses)

    # --- the phases of a window
    def _plan(self, start: int, stop: int) -> Window:
        t0 = time.perf_counter()
        window = self.planner.plan(start, stop, self.opt.params)
        self.record.planned(t0, time.perf_counter(), window)
        return window

    def _run_window(self, window: Window, reported: bool = False) -> TrainingSteps:
        """Run the window's program on this rank; returns it (its image losses and updates). ``reported``:
        the dashboard's status follows this window (so its spans are kept)."""
        setup, batch_size = self.setup, self.setup.settings.batch_size
        batches = range(window.start, window.stop)
        lrs = [setup.settings.lrs(setup.extent, b + 1) for b in batches]
        sh_degrees = [setup.active_sh_degree(b + 1) for b in batches]
        program = TrainingSteps(
            window, params_of(self.opt),  # the window-start state (identical on every rank)
            ImageInputs(setup.scene, setup.targets, self.render, self.ssim_weight, self.densify is not None,
                        sh_degrees),
            CellInputs(self.opt, self.accum if self.densify is not None else None, lrs, batch_size,
                       setup.sh_degree),
            self.staging)
        called = time.perf_counter()
        mode = "bsp" if self.options.mode == "barrier" else "dataflow"
        trace = self.record.tracing or reported
        result = run_dataflow(self.comm, window.plan, program, mode=mode, trace=trace)
        self.record.window_run(result, called, time.perf_counter(), window, program.updated)
        self.window_spans = result.spans
        return program

    def _gather(self, window: Window, program: TrainingSteps) -> np.ndarray:
        """Every owner's cells onto every rank; returns the window's batch losses [stop - start]."""
        gathered = gather_state(self.comm, window, self.opt, self.accum, self.staging, program.image_losses,
                                self.setup.sh_degree)
        self.record.gathered(gathered.t0, gathered.t1, gathered.t2, window)
        return gathered.losses

    def _check_visibility(self, snapshot: dict, window: Window) -> None:
        """Count Gaussians that moved or grew past the window's margin; widen the next margins if any."""
        bad = escaped(snapshot, self.opt, window.margin)
        if bad:
            self.violations += bad
            self.planner.widen()
            self.progress.write(f"warning: {bad} Gaussians left the visibility margin in batches "
                                f"{window.start + 1}-{window.stop}; the next window's margin is "
                                f"{self.planner.safety:g}x")

    def _densify_and_evaluate(self, stop: int, psnr_steps: list, psnr_values: list) -> bool:
        """At the window's end (batch ``stop``): densification and held-out PSNR when due; returns whether
        it evaluated."""
        setup = self.setup
        if self.densify is not None:
            self.accum = densify_round(self.opt, self.accum, stop, self.steps, setup.settings.batch_size,
                                       setup.extent, self.densify, self.densify_gen)
        evaluated = stop % self.eval_every == 0 or stop == self.steps
        if evaluated:
            psnr_steps.append(stop)
            value = None
            if self.comm.rank == 0:
                value, self.heldout_view = evaluate(self.render, self.opt.params, setup.scene, setup.test_ids,
                                                    setup.targets, setup.active_sh_degree(stop))
            psnr_values.append(self.comm.bcast(value))
            self.progress.write(f"step {stop}: held-out PSNR {psnr_values[-1]:.2f} dB, "
                                f"{self.opt.num_gaussians} Gaussians")
        return evaluated

    def _report(self, step: int, losses: np.ndarray, psnr_steps: list, psnr_values: list, evaluated: bool) -> None:
        """Write the dashboard's status file after a window (collective: rank 0 gathers every rank's
        counters so far and the window's spans, and writes)."""
        table = self.comm.gather_rows(self.record.metrics.as_row()[None, :])
        timeline = window_spans(self.comm, self.window_spans)
        if self.comm.rank == 0:
            ranks = {"fields": list(RANK_FIELDS), "rows": table.tolist(),
                     "timeline": {"kinds": list(SPAN_KINDS), "spans": timeline}}
            view = comparison_writer(self.heldout_view, self.setup) if evaluated else None
            self.status.update(step, losses, psnr_steps, psnr_values, self.opt.num_gaussians,
                               time.perf_counter() - self.record.started, force=True, view=view, ranks=ranks)

    def _report_due(self, stop: int) -> bool:
        """Whether the window ending at ``stop`` writes the dashboard's status (and so is traced): at
        evaluation points, at the end, else when the status file is due (rank 0 decides at the window's
        start; collective)."""
        if self.status is None:
            return False
        forced = stop % self.eval_every == 0 or stop == self.steps
        return self.comm.bcast(self.status.due(forced) if self.comm.rank == 0 else None)

    def _state(self, step: int, losses: np.ndarray, psnr_steps: list, psnr_values: list, wall: float) -> TrainState:
        """The training state after ``step`` steps, for checkpointing (global at a window's end)."""
        return TrainState(step, self.opt, self.accum, self.densify_gen, losses, psnr_steps, psnr_values, wall,
                          self.planner.safety, self.violations)


def train_distributed(comm, config: TrainConfig, options: OdinOptions, checkpoint=None) -> TrainResult:
    """Train on every rank of ``comm`` (collective) and write the outputs from rank 0.

    ``config``: the run (see ``TrainConfig``), ``options``: Odin's settings, ``checkpoint``: a
    ``TrainCheckpointer`` or None. With ``config.device='cuda'`` every rank trains on its GPU
    (``render_device``) and its payloads cross ranks through the host (``HostStaging``). Returns the
    TrainResult (the same on every rank). Bad settings or input raise the same InputError on every rank.
    """
    extra_outputs = (("timeline", options.timeline), ("schedule_out", options.schedule_out))
    setup, render = set_up(config, checkpoint, comm, extra_outputs,
                           check=lambda setup: check_options(options, comm.size, setup.initial["means"].shape[0]))
    if config.batch_size < comm.size and comm.rank == 0:
        print(f"note: batch size {config.batch_size} < {comm.size} ranks: at most {config.batch_size} ranks can "
              f"work on a batch at once")
    bar = Progress(config.steps, enabled=config.progress and comm.rank == 0, unit="step")
    staging = HostStaging(setup.initial["means"].device, staged=config.device == "cuda")
    trainer = DistributedTrainer(comm, setup, config, options, bar, checkpoint, render, staging)
    if config.status:
        trainer.status = TrainStatus(config.out, options.mode, comm.size, config.steps, config.batch_size,
                                     config.scene)
    result = trainer.run()
    if trainer.status is not None:
        trainer.status.close()
    bar.close()
    table = comm.gather_rows(trainer.record.metrics.as_row()[None, :])
    spans = comm.allgather(trainer.record.metrics.spans) if options.timeline is not None else None
    labels = comm.allgather(trainer.record.labels) if options.timeline is not None else None
    # the payloads always go through host buffers (the transport sends NumPy arrays): not CUDA-aware
    staged = {"cuda_aware_mpi": False, "bytes_staged": int(sum(comm.allgather(staging.bytes_staged)))} \
        if config.device == "cuda" else {}
    if comm.rank == 0:
        totals = dict(zip(RANK_FIELDS, table.sum(axis=0)))
        attrs = {"compute_seconds": totals["compute_seconds"], "comm_seconds": totals["comm_seconds"],
                 "wait_seconds": totals["wait_seconds"], "visibility_violations": trainer.violations,
                 "max_staleness": options.staleness, "stale_reads": trainer.planner.stale_reads,
                 "max_staleness_seen": trainer.planner.max_staleness_seen, "stale_impact": options.stale_impact,
                 "cells": trainer.planner.num_cells, "window": options.window,
                 "dependency_edges": trainer.planner.dependency_edges,
                 "per_rank_fields": list(RANK_FIELDS), **staged}
        write_outputs(trainer.render, setup, params_of(trainer.opt), result, config, options.mode, comm.size, attrs,
                      metrics={"per_rank": table})
        if options.timeline is not None:
            write_chrome_trace(options.timeline, spans, {k: v for part in labels for k, v in part.items()})
        if options.schedule_out is not None:
            window, schedule = trainer.planner.first_window
            write_schedule(options.schedule_out, window.steps, schedule)
    result.per_rank = comm.bcast(table)
    result.visibility_violations = trainer.violations
    comm.barrier()
    return result
