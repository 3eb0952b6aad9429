"""A discrete-event simulator of distributed training that runs the runtime's own scheduling code.

What decides what runs where and when is the runtime's: the scene's k-d cells are cut once (cells
persist, as the sharded runtime's do; ``cells``) and every window is planned from their metadata by
``odin_sched.odin.planner.plan_cells`` (conservative visibility, step graph, ``relax_reads`` in
odin-fast mode, levels / priorities / assignment by ``plan_schedule`` for ``gpus`` virtual ranks), the
messages are those of ``odin_sched.odin.program.StepMessages``, and every virtual rank fires its vertices
through ``pregel.dataflow.Firing`` (the ready queue, pending counts and routing that ``run_dataflow``
uses over MPI). Only the transport and the clock differ: SimPy processes (one per virtual GPU) take
a vertex's cost from the cost model (``odin_sched.sim.costmodel``) as virtual time and hand each message
to the destination after ``latency + bytes / bandwidth`` (each rank's outgoing link sends its
messages one after another, and each rank's incoming link takes them in one after another). BSP mode (``barrier``) fires the same phases as ``run_dataflow(mode='bsp')``, then a
barrier and an Alltoallv per phase. Each window ends like the runtime's: a barrier and an
allgather of the model; planning counts when the profile says so
(``CostProfile.planning_seconds``: the measured ``plan_seconds`` per window, slower when the ranks
outnumber the processors).

A rank fires its ready cell versions between an image's forward and backward pass, as the runtime's
rank loop serves them there (``StepMessages.servable``; the image's cost split at the profile's
``forward_share``). With a sharded profile, cells grow by a densification model and whole cells migrate
between owners at window ends by the runtime's rule (``simulate``).

Not simulated: evaluation, the densification rounds' own work (the same in every mode), and contention
inside the network beyond the two ends of a link.
"""
import copy
import math
import time
from dataclasses import dataclass, field, replace

import numpy as np

from odin_sched.sim.bounds import assigned_bound
from odin_sched.sim.costmodel import CameraViews, CostProfile, camera_views
from odin_sched.sim.grendel import hidden_vs_grendel, simulate_grendel
from odin_sched.sim.presets import PRESETS, published_grendel_steps
from odin_sched.odin.depgraph import parallelism
from odin_sched.training.image_order import spread_batches
from odin_sched.odin.migration import rebalance, row_words
from odin_sched.odin.modes import MODES
from odin_sched.odin.planner import BATCHES_AHEAD, PlanConfig, plan_cells
from odin_sched.odin.shard import OWNER_GROUP, owners_by_count
from odin_sched.odin.program import StepMessages
from odin_sched.odin.trainer import OdinOptions, default_cells
from odin_sched.scenes.sh import DEFAULT_SH_DEGREE, check_sh_degree
from odin_sched.training.step import BatchSettings, param_columns
from odin_sched.sim.config import SimulateConfig
from odin_sched.training.train import TrainConfig, prepare, scene_extent, visible_cells_of_cameras
from odin_sched.scenes.cells import cut_cells
from odin_sched.scenes.scene_io import HOLDOUT_EVERY
from odin_sched.scenes.visibility import window_margin
from pregel.dataflow import Firing, Routes
from pregel.errors import InputError

#: the simulated modes: the runtime's, and Grendel-GS's step (``odin_sched.sim.grendel``)
SIM_MODES = (*MODES, "grendel")


def gather_bytes(sh_degree: int) -> int:
    """Bytes per Gaussian of the window-end allgather at SH degree ``sh_degree``: parameters and two Adam
    moments (float32, ``param_columns``: 14 at degree 0, 59 at degree 3), the densification accumulator
    and largest screen radius (float32) and the id, step count and accumulator count (int64): 200 bytes
    at degree 0, 740 at 3."""
    return 4 * (3 * param_columns(sh_degree) + 2) + 3 * 8


#: the sharded runtime's window end (issue 20's bounds): bytes per cell of metadata (box of means grown
#: by the largest scale, Gaussian count, predicted cost) and per image (loss, violation count)
METADATA_CELL_BYTES, METADATA_IMAGE_BYTES = 64, 16

#: the densification model of the sharded runtime's windows: each window, a cell's count grows by the factor
#: exp(DENSIFY_GROWTH x the window's images that see it), the rate per image of the project's own
#: densification on a real capture (README, "Real captures end to end": maupertuis, 1,039 -> 36,583
#: Gaussians over the rounds of images 600-1,500 with the defaults, ln(35.2) / 900 = 4.0e-3); then all
#: counts are scaled back to the scene's total (the simulated scene stands for the model at its size:
#: what densification adds where the images look, pruning takes evenly)
DENSIFY_GROWTH = 4.0e-3


def densified_counts(counts: np.ndarray, seen: np.ndarray, growth: float, total: int) -> np.ndarray:
    """[K] int64 Gaussians per cell after a window's densification: ``counts`` [K] each times
    exp(``growth`` x ``seen`` [K], the window's images that see the cell), rounded, scaled to ``total``."""
    grown = np.asarray(counts, np.float64) * np.exp(growth * np.asarray(seen, np.float64))
    return np.rint(grown * total / max(grown.sum(), 1.0)).astype(np.int64)


def exchange_seconds(profile: CostProfile, src: np.ndarray, dst: np.ndarray, nbytes: np.ndarray, gpus: int) -> float:
    """Seconds of point-to-point messages of ``nbytes`` [m] from ranks ``src`` [m] to ``dst`` [m], all sent
    at once: the busiest rank's bytes in or out over its links, plus one latency per peer it talks to."""
    if len(src) == 0:
        return 0.0
    latency, bandwidth = profile.link(src, dst)
    seconds = np.asarray(nbytes, np.float64) / bandwidth
    busy = np.maximum(np.bincount(src, seconds, gpus), np.bincount(dst, seconds, gpus))
    peers = np.bincount(np.unique(np.asarray(src) * gpus + dst) // gpus, minlength=gpus)
    return float((busy + peers * latency.max()).max())


def migration_cost(profile: CostProfile, counts: np.ndarray, owner: np.ndarray, new_owner: np.ndarray,
                   row_bytes: int, gpus: int) -> tuple[float, float]:
    """(seconds, bytes) of moving every cell whose owner changes from ``owner`` [K] to ``new_owner`` [K]
    as ``migration.migrate`` moves them: one message per pair of ranks carrying its cells' ``counts`` [K]
    Gaussians of ``row_bytes`` each, all pairs at once (``exchange_seconds``)."""
    moving = np.flatnonzero(np.asarray(new_owner) != np.asarray(owner))
    pairs, at = np.unique(owner[moving] * gpus + new_owner[moving], return_inverse=True)
    nbytes = np.bincount(at.reshape(-1), weights=np.asarray(counts, np.float64)[moving] * row_bytes,
                         minlength=len(pairs))
    return exchange_seconds(profile, pairs // gpus, pairs % gpus, nbytes, gpus), float(nbytes.sum())


def state_bytes(sh_degree: int) -> int:
    """Bytes of training state an owner holds per Gaussian: what the window-end gather moves
    (``gather_bytes``) and the gradient (float32 parameters)."""
    return gather_bytes(sh_degree) + 4 * param_columns(sh_degree)


def window_memory(win, gpus: int, sh_degree: int, previous: set) -> tuple:
    """([P] bytes each rank holds in window ``win``: its owned cells' state and read-only parameters of
    the remote cells its images read in this window and the one before (``previous``: that window's
    (rank, cell) reads), this window's reads)."""
    steps, sizes = win.steps, win.count
    image_rank = win.plan.rank[:steps.num_images]
    cells = steps.version_cell[steps.version_index(steps.image_reads)]
    ranks = np.repeat(image_rank, np.diff(steps.image_reads_indptr))
    reads = set(zip(ranks.tolist(), cells.tolist()))
    cached = np.zeros(gpus)
    for rank, cell in reads | previous:
        if win.owner[cell] != rank:
            cached[rank] += sizes[cell]
    owned = np.bincount(win.owner, weights=sizes, minlength=gpus)
    return owned * state_bytes(sh_degree) + cached * 4 * param_columns(sh_degree), reads


def _local_comm():
    """A one-rank communicator (MPI.COMM_SELF): the simulator plans for many virtual GPUs on one process."""
    from mpi4py import MPI

    from pregel.comm import Comm

    return Comm(MPI.COMM_SELF)


@dataclass
class SimScene:
    """What the simulator needs of a scene: the model's Gaussians (means, log-scales [G, 3], quats
    [G, 4]), the cameras (viewmats [C, 4, 4], Ks [C, 3, 3], size), the training cameras and what each
    camera sees (``costmodel.camera_views``: cost features [C, 3] and the Gaussians on screen)."""

    means: np.ndarray
    scales: np.ndarray
    quats: np.ndarray
    viewmats: np.ndarray
    Ks: np.ndarray
    width: int
    height: int
    train_ids: np.ndarray
    views: CameraViews
    gaussians: int = 0  # Gaussians the scene stands for (0: len(means)); metadata presets project fewer
    cache: dict = field(default_factory=dict, init=False, repr=False, compare=False)  # cells, orders: made once

    @property
    def total_gaussians(self) -> int:
        return self.gaussians or len(self.means)

    @property
    def stands_for(self) -> int:
        """Gaussians each generated one stands for in odin's cells (``cells``): total / generated, which
        must be a whole number for modes other than grendel."""
        factor, rest = divmod(self.total_gaussians, len(self.means))
        if rest:
            raise ValueError(f"a scene of {len(self.means):,} Gaussians cannot stand for {self.total_gaussians:,} "
                             "in cells (not a whole number each)")
        return factor

    @property
    def features(self) -> np.ndarray:
        """[C, 3] cost features of every camera (visible Gaussians, pixels, tile-Gaussian pairs)."""
        return self.views.features


def metadata_scene(layout: str, gaussians: int, cameras: int, width: int = 256, height: int = 192,
                   seed: int = 0, sample: float | None = None, shrink: float = 1.0) -> SimScene:
    """A generated layout as metadata only (no images): the ground-truth Gaussians are the model, each
    ``shrink`` times its generated size. Features are projected from a subsample of about 20,000
    Gaussians unless ``sample`` is given."""
    from odin_sched.scenes.scene_gen import LAYOUTS, scene_geometry

    if layout not in LAYOUTS:
        raise InputError(f"`layout` must be one of {', '.join(LAYOUTS)}, got {layout!r}")
    if gaussians < 16 or cameras < 2:
        raise InputError(f"`gaussians` must be >= 16 and `cameras` >= 2, got {gaussians} and {cameras}")
    gauss, viewmats, Ks = scene_geometry(gaussians, cameras, width, height, np.random.default_rng(seed), layout)
    if shrink != 1.0:
        gauss["scales"] += np.float32(np.log(shrink))  # log scales
    sample = min(1.0, 20000 / gaussians) if sample is None else sample
    views = camera_views(gauss["means"], gauss["scales"], gauss["quats"], viewmats, Ks, width, height, sample)
    train_ids = np.flatnonzero(np.arange(cameras) % HOLDOUT_EVERY != 0)
    return SimScene(gauss["means"], gauss["scales"], gauss["quats"], viewmats, Ks, width, height, train_ids, views)


def standing_for(scene: SimScene, gaussians: int, visible: float = 0.0) -> SimScene:
    """``scene`` whose Gaussians each stand for gaussians / len(scene.means): the cost features and the
    projected sample's weight scaled up (grendel's costs come from the features; odin's cells count each
    Gaussian that many times, which must then be a whole number: ``cells``). With ``visible`` > 0 the
    share in view per image is scaled to that mean (its spread over cameras stays the scene's)."""
    factor = gaussians / len(scene.means)
    if visible:
        factor *= visible * len(scene.means) / scene.views.features[scene.train_ids, 0].mean()
    features = scene.views.features.copy()
    features[:, [0, 2]] *= factor
    views = replace(scene.views, features=features, weight=scene.views.weight * factor)
    return replace(scene, views=views, gaussians=gaussians)


def preset_scene(name: str, seed: int = 0, generated: int | None = None, factor: int = 0) -> SimScene:
    """The metadata scene of preset ``name`` (``presets.PRESETS``); with ``generated`` < the preset's
    Gaussians, only that many are generated and each stands for several (``standing_for``): the
    preset's count over ``generated`` (grendel's costs need only the features), or with ``factor`` > 0
    that whole number of them (a stand-in of ``generated`` x ``factor`` Gaussians: ``stand_in_size``),
    each Gaussian 1 / sqrt(factor) the size the layout gives it (the size of the layout's Gaussians when
    factor times as many cover its surfaces), before its camera views are projected."""
    if name not in PRESETS:
        raise InputError(f"`layout` must be one of city, objects, {', '.join(PRESETS)}, got {name!r}")
    preset = PRESETS[name]
    made, total = min(preset.gaussians, generated or preset.gaussians), preset.gaussians
    shrink = 1.0
    if factor and made < total:
        total, shrink = made * factor, factor ** -0.5
    scene = metadata_scene(preset.layout, made, preset.cameras, preset.width, preset.height, seed, shrink=shrink)
    return standing_for(scene, total, preset.visible)


def scene_of_setup(setup) -> SimScene:
    """The SimScene of a trainer's ``TrainingSetup`` (its initial Gaussians; for validation runs)."""
    g = {k: v.numpy() for k, v in setup.initial.items()}
    s = setup.scene
    views = camera_views(g["means"], g["scales"], g["quats"], s.viewmats, s.Ks, s.width, s.height)
    return SimScene(g["means"], g["scales"], g["quats"], s.viewmats, s.Ks, s.width, s.height, setup.train_ids, views)


@dataclass
class SimResult:
    """One simulated run: seconds per rank and in all, and the dependency graph's parallelism."""

    mode: str
    gpus: int
    steps: int
    seconds: float
    compute: np.ndarray   # [P] seconds
    comm: np.ndarray      # [P]
    wait: np.ndarray      # [P]
    plan_seconds: float
    parallelism: float
    stale_reads: int = 0
    max_staleness_seen: int = 0
    spans: list = field(default_factory=list)  # per rank: [(kind, start, end, vertex)] of the first window
    traced: object = None  # with trace: the first window's plan (a ``planner.Window``)
    arrivals: np.ndarray | None = None  # with trace: [m, 3] (rank, source vertex, seconds) of its messages
    bound_seconds: float = 0.0  # no schedule of these windows can take less (see ``simulate``)
    assigned_bound_seconds: float = 0.0  # nor any with their assignment (``bounds.assigned_bound``)
    window: int = OdinOptions.window  # batches per planning window
    bytes_sent: float = 0.0  # bytes between GPUs (grendel: its all-to-alls)
    memory_bytes: float = 0.0  # the most bytes of model state one GPU holds (owned + cached; buffers)
    migration_bytes: float = 0.0  # bytes of cells moved between owners at window ends (sharded profiles)
    migration_seconds: float = 0.0  # seconds those moves took, on the critical path
    migrated_cells: int = 0  # cells moved
    messages_sent: float = 0.0  # messages between GPUs, summed over GPUs and windows (odin's modes)
    planning_wait: float = 0.0  # GPU-seconds of ``wait`` spent on planning that outlasted a window (sharded)

    @property
    def steps_per_second(self) -> float:
        return self.steps / self.seconds

    @property
    def ceiling_steps_per_second(self) -> float:
        """The most steps/s any schedule of the same windows could reach: per window, the larger of
        its work over the processors and its critical path, plus the window-end costs every mode pays."""
        return self.steps / self.bound_seconds if self.bound_seconds else 0.0

    @property
    def assigned_ceiling_steps_per_second(self) -> float:
        """The most steps/s any schedule of the same windows with the same assignment could reach: per
        window the larger of the ceiling's terms, the busiest rank's time and the heaviest path with every
        edge between two ranks charged its message's transfer (``bounds.assigned_bound``), plus the same
        window-end costs."""
        return self.steps / self.assigned_bound_seconds if self.assigned_bound_seconds else 0.0

    @property
    def wait_fraction(self) -> float:
        return float(self.wait.sum() / (self.gpus * self.seconds))


def num_cells(gaussians: int, gpus: int, cells_per_gpu: int | None = None) -> int:
    """Odin's cells for a model of ``gaussians`` (for a stand-in, those it stands for) on ``gpus`` GPUs:
    ``cells_per_gpu`` x ``gpus``, or by default the runtime's ``default_cells`` (one per 8,192 Gaussians,
    16 to 512 per GPU)."""
    return cells_per_gpu * gpus if cells_per_gpu else default_cells(gaussians, gpus)


def cells(scene: SimScene, num_cells: int) -> tuple:
    """The scene's k-d cells, cut once per cell count as the sharded runtime's persist: (cell_of [G] int32
    of every generated Gaussian, their ``CellBounds`` with each count times ``scene.stands_for``). A
    scene of n Gaussians standing for f each, n a multiple of the cells, plans and costs as the scene
    of each Gaussian repeated f times (``kd_cells`` splits at whole multiples of f there)."""
    key = ("cells", num_cells)
    if key not in scene.cache:
        cell_of, bounds = cut_cells(scene.means, scene.scales, num_cells)
        scene.cache[key] = cell_of, replace(bounds, count=bounds.count * scene.stands_for)
    return scene.cache[key]


def simulate(scene: SimScene, profile: CostProfile, mode: str, gpus: int, steps: int, batch_size: int,
             window: int = OdinOptions.window, cells_per_gpu: int | None = None,
             max_staleness: int = 1, seed: int = 0,
             trace: bool = False, sh_degree: int = DEFAULT_SH_DEGREE, densify_growth: float = DENSIFY_GROWTH,
             message_sizes=None, joining=None, owner_group: int = OWNER_GROUP,
             batches_ahead: int = BATCHES_AHEAD) -> SimResult:
    """Simulate ``steps`` batches of ``batch_size`` images on ``gpus`` virtual GPUs in ``mode``
    (odin, barrier, odin-fast, grendel), windows of ``window`` batches, ``num_cells`` cells (by default
    the runtime's ``default_cells`` of the Gaussians the scene stands for; ``cells_per_gpu`` x gpus if given),
    Gaussians of SH degree ``sh_degree`` (what a cell's parameters and gradients weigh in messages and
    gathers). Every mode trains the same batches. With a sharded profile, each window end runs the
    runtime's ``OdinTrainer._reshape`` on the cells' counts: ``rebalance`` (the runtime's default
    ``max_imbalance``; cells never split, its default ``split_above``) on the counts the next window's
    plan is made from, the moved cells' state charged as ``migrate`` sends it (``migration_cost``); the
    plan made ahead is made for the new owners (``OdinTrainer._moved``), so a move costs no planning
    again, as in the runtime; then the counts densify
    (``densified_counts`` with ``densify_growth``; 0: cells never grow). ``message_sizes``: a what-if, not
    what the runtime sends (None: the runtime's messages): called with each planned window and its
    ``Routes``, it returns the words of every message group and the seconds [N] added to each vertex
    (``odin_sched.sim.rows.RowMessages``). ``joining``: a what-if, not what the runtime sends (None: one
    message per group): a rank joins the messages of its fires into fewer (``odin_sched.sim.joining``;
    dataflow modes only). ``owner_group``: the cells dealt together to one owner (``owners_by_count``;
    by default the runtime's). ``batches_ahead``: as ``PlanConfig``'s (by default the runtime's)."""
    if mode not in SIM_MODES:
        raise InputError(f"mode must be one of {', '.join(SIM_MODES)}, got {mode!r}")
    if profile.host_sends and (profile.cores or joining is not None):
        raise InputError("host_sends: a host thread beside a GPU: not with shared cores nor with joining")
    comm = _local_comm()
    settings = BatchSettings(batch_size)
    extent = scene_extent(scene.viewmats)
    key = ("sees", batch_size)
    if key not in scene.cache:  # the same for every mode and GPU count
        scene.cache[key] = visible_cells_of_cameras(scene.means, scene.scales, scene.viewmats, scene.Ks, scene.width,
                                                    scene.height, settings, extent)
    batches = spread_batches(scene.train_ids, steps, batch_size, seed, scene.cache[key])  # the trainer's order
    if mode == "grendel":
        run = simulate_grendel(scene.views, scene.total_gaussians, batches, profile, gpus, seed,
                               state_bytes=state_bytes(sh_degree))
        return SimResult(mode, gpus, steps, run["seconds"], run["compute"], run["comm"], run["wait"], 0.0,
                         float(gpus), window=window, bytes_sent=run["bytes"], memory_bytes=run["memory"])
    staleness = max_staleness if mode == "odin-fast" else 0
    # the planner balances the cost model's prediction from predicted visibility (tile pairs: the
    # scene's mean pairs per visible Gaussian)
    per_visible = scene.features[:, 2].sum() / max(scene.features[:, 0].sum(), 1.0)
    weights = (profile.image[0], profile.image[1] + profile.image[3] * per_visible, profile.image[2])
    processors = min(gpus, profile.cores) if profile.cores else gpus
    # every rank warms up at the start (its first image loads the kernels), all at once
    warmup = profile.warmup_seconds * float(profile.slowdown(gpus))
    totals = {k: np.zeros(gpus) for k in ("compute", "comm", "wait")}
    totals["compute"] += warmup
    clock, plan_total, work, path, stale, worst, spans, bound = warmup, 0.0, 0.0, 0.0, 0, 0, [], warmup
    assigned = 0.0  # what the assignment's bound adds to the ceiling's
    memory, reads, last_window = np.zeros(gpus), set(), 0.0
    traced = arrivals = None
    cell_of, bounds = cells(scene, num_cells(scene.total_gaussians, gpus, cells_per_gpu))
    owner = owners_by_count(bounds.count, gpus, owner_group)
    total, row_bytes = int(bounds.count.sum()), 4 * row_words(param_columns(sh_degree), True)
    migrated = {"bytes": 0.0, "seconds": 0.0, "cells": 0}
    messages = planning_wait = 0.0
    for start in range(0, steps, window):
        stop = min(start + window, steps)
        lrs = settings.lrs(extent, start + 1)
        margin = window_margin(lrs["means"], lrs["scales"], settings.betas, stop - start)
        t0 = time.perf_counter()
        win, _ = plan_cells(comm, bounds, owner, scene, batches, start, stop, margin,
                            PlanConfig(bounds.num_cells, gpus, staleness, cost_weights=weights, sh_degree=sh_degree,
                                       batches_ahead=batches_ahead),
                            initial_reads=False)
        win = replace(win, cell_of=cell_of)
        planned = time.perf_counter() - t0
        plan_total += planned
        stale += int(np.count_nonzero(win.staleness))
        worst = max(worst, int(win.staleness.max(initial=0)))
        cost = vertex_costs(win, scene.views, profile, np.random.default_rng([seed, start]),
                            profile.step_seconds * gpus / batch_size)
        run = _WindowRun(win, cost, profile, gpus, trace and start == 0, param_columns(sh_degree))
        if message_sizes is not None:  # a what-if: the groups' sizes and costs replaced in place (run's own)
            run.routes.group_size[:], extra = message_sizes(win, run.routes)
            cost += extra
        if joining is not None:
            run.join_with(joining(win, run.routes), joining.flush)
        p = parallelism(win.steps, cost)
        work, path = work + cost.sum(), path + (cost.sum() / p if p else 0.0)
        ceiling = max(cost.sum() / processors, cost.sum() / p if p else 0.0)
        bound += ceiling
        if profile.sharded:  # planned while the previous window ran: only what outlasts it waits (the
            # first window is planned before training starts: a start-up cost, not the steady state's)
            held, reads = window_memory(win, gpus, sh_degree, reads)
            memory = np.maximum(memory, held)
            planning = profile.sharded_planning_seconds(gpus)
            exposed = max(0.0, planning - last_window) if start else 0.0
            planning_wait += exposed * gpus
            clock += exposed
            bound += exposed
            totals["wait"] += exposed
        elif profile.count_planning:
            planning = profile.planning_seconds(gpus)  # every rank plans
            clock += planning
            bound += planning
            totals["compute"] += planning
        assigned += max(ceiling, assigned_bound(win.steps, win.plan, run.routes, cost, profile, gpus)) - ceiling
        run.dataflow() if mode != "barrier" else run.bsp()
        end = run.end.max()
        messages += run.messages.sum()
        for k in totals:
            totals[k] += getattr(run, k)
        totals["wait"] += end - run.end  # the window-end barrier
        if profile.sharded:  # owners exchange metadata only
            moved = METADATA_CELL_BYTES * len(win.owner) + METADATA_IMAGE_BYTES * win.steps.num_images
        else:
            moved = gather_bytes(sh_degree) * scene.total_gaussians
        gather = profile.allgather_seconds(moved, gpus) + profile.barrier_seconds(gpus)
        totals["comm"] += gather
        clock += end + gather
        bound += gather
        last_window = end + gather
        if profile.sharded:  # the runtime's window end: cells rebalanced by count, then densified
            new_owner = rebalance(bounds.count, owner, gpus, OdinOptions.max_imbalance)
            moving, moved_bytes = migration_cost(profile, bounds.count, owner, new_owner, row_bytes, gpus)
            migrated["bytes"] += moved_bytes
            migrated["seconds"] += moving
            migrated["cells"] += int(np.count_nonzero(new_owner != owner))
            totals["comm"] += moving
            clock += moving
            bound += moving
            owner = new_owner
            seen = np.bincount(win.steps.version_cell[win.steps.version_index(win.steps.image_writes)],
                               minlength=len(owner))
            bounds = replace(bounds, count=densified_counts(bounds.count, seen, densify_growth, total))
        if run.spans and not spans:
            spans, traced, arrivals = run.spans, win, np.asarray(run.arrivals, np.float64).reshape(-1, 3)
    return SimResult(mode, gpus, steps, clock, totals["compute"], totals["comm"], totals["wait"], plan_total,
                     work / path if path else 0.0, stale, worst, spans, traced, arrivals, bound, bound + assigned,
                     window,
                     memory_bytes=float(memory.max()), migration_bytes=migrated["bytes"],
                     migration_seconds=migrated["seconds"], migrated_cells=migrated["cells"], messages_sent=messages,
                     planning_wait=planning_wait)


def vertex_costs(win, views: CameraViews, profile: CostProfile, rng: np.random.Generator,
                 image_overhead: float = 0.0) -> np.ndarray:
    """[N] simulated seconds of every vertex of a planned window: images by their camera's features
    and the Gaussians of the cells they read, each times one resampled relative error of the profile's
    fit (``image_noise``; the same draws in every mode), plus ``image_overhead`` (the profile's fixed
    time per step and GPU, ``step_seconds``, shared by the GPU's images of a batch: step_seconds x
    GPUs / batch, as grendel pays it), cell versions by their cell's size and whether their batch's
    cameras have any of its Gaussians on screen (initial versions: 0)."""
    steps = win.steps
    rows = win.count[steps.version_cell]
    writes = steps.version_index(steps.image_writes)
    camera_of_write = np.repeat(steps.image_camera, np.diff(steps.image_writes_indptr))
    seen = np.zeros(len(rows), bool)
    np.logical_or.at(seen, writes, views.cameras_see_cells(camera_of_write, steps.version_cell[writes], win.cell_of))
    versions = np.where(steps.version_batch < 0, 0.0, profile.version_seconds(rows, seen))
    images = profile.image_seconds(views.features[steps.image_camera], win.image_rows)
    if profile.image_noise:
        images = images * (1.0 + rng.choice(np.asarray(profile.image_noise, np.float64), len(images)))
    return np.concatenate([images + image_overhead, versions])


@dataclass
class _Turn:
    """A rank's hold on a shared processor: its granted SimPy request, the seconds left of its time
    slice, and when its current computation began."""

    request: object
    slice_left: float
    began: float = 0.0


class Processors:
    """What the virtual ranks compute on (in a SimPy environment): a processor each (``profile.cores``
    = 0, as GPUs), or ``cores`` processors shared by all ranks the way Linux's fair scheduler shares
    them. A rank keeps its processor from one computation to the next for at most
    ``profile.time_slice`` seconds and gives it up when it waits for a message or has no more work
    (``release``); a free processor goes to the waiting rank that has had the least processor time.
    When the ranks outnumber the processors, a rank waiting for a message looks for it like the
    runtime then does (``pregel.comm.Comm``): ``profile.poll_seconds`` of processor time, then a sleep
    of ``profile.poll_sleep`` seconds, so it notices a message only at a look. A look that wakes up
    takes a processor at once only from a rank that has had more processor time than the looking one
    (which then queues again), else it waits for one: a rank that has just computed a lot may miss its
    message for up to a time slice. Otherwise it waits inside MPI and notices a message at once.
    Sharing processors, a rank loses ``profile.switch_seconds`` each time it gets one back."""

    def __init__(self, env, profile: CostProfile, ranks: int):
        import simpy

        self.env, self.time_slice = env, profile.time_slice if profile.time_slice > 0 else math.inf
        self.poll_seconds, self.poll_sleep = profile.poll_seconds, profile.poll_sleep
        self.cores = simpy.PreemptiveResource(env, capacity=profile.cores) if profile.cores else None
        shared = self.cores is not None and ranks > profile.cores
        self.polls = shared and self.poll_sleep > 0
        self.switch_seconds = profile.switch_seconds if shared else 0.0
        self.used = np.zeros(ranks)  # processor seconds each rank has had
        self.held = {}  # rank -> its _Turn on a processor

    def hold(self, rank: int, seconds: float):
        """SimPy process steps: ``rank`` computes for ``seconds`` of processor time. It keeps its
        processor from one computation to the next until its time slice is used up, a look takes it,
        or it waits (``release``)."""
        import simpy

        if self.cores is None:
            yield self.env.timeout(seconds)
            return
        left = seconds
        while left > 0:
            if rank not in self.held:
                request = self.cores.request(priority=self.used[rank], preempt=False)
                try:
                    yield request
                except simpy.Interrupt:  # granted, then taken by a look before this rank ran: queue again
                    continue
                self.held[rank] = _Turn(request, self.time_slice)
                left += self.switch_seconds  # the caches another rank filled are refilled
            turn = self.held[rank]
            turn.began, run = self.env.now, min(left, turn.slice_left)
            try:
                yield self.env.timeout(run)
            except simpy.Interrupt:  # a look took the processor
                run = self.env.now - turn.began
                del self.held[rank]
            self.used[rank] += run
            left -= run
            if rank in self.held:
                turn.slice_left -= run
                if turn.slice_left <= 0:  # the slice is used up: queue again
                    self.release(rank)

    def release(self, rank: int):
        """``rank`` gives up its processor (it waits, or has no more work)."""
        turn = self.held.pop(rank, None)
        if turn is not None:
            self.cores.release(turn.request)

    def wait(self, rank: int, event):
        """SimPy process steps: until ``event`` has happened and ``rank`` has noticed it."""
        self.release(rank)
        if not self.polls:
            yield event
            return
        while not event.processed:  # the first look is the caller's: then sleep, wake, look again
            yield self.env.timeout(self.poll_sleep)
            yield from self._look(rank)

    def _look(self, rank: int):
        """SimPy process steps: ``poll_seconds`` of processor time for ``rank``'s look, taken at once
        from the rank that has had the most processor time if that is more than ``rank`` has had."""
        import simpy

        left = self.poll_seconds
        while left > 0:
            for other, turn in self.held.items():  # SimPy pre-empts by key: what each has had by now
                turn.request.key = (self.used[other] + self.env.now - turn.began, *turn.request.key[1:])
            with self.cores.request(priority=self.used[rank], preempt=True) as request:
                try:
                    yield request
                except simpy.Interrupt:  # granted, then taken by another look before this rank ran
                    continue
                began, run = self.env.now, left
                try:
                    yield self.env.timeout(run)
                except simpy.Interrupt:  # another look took the processor
                    run = self.env.now - began
                self.used[rank] += run
                left -= run


class _WindowRun:
    """One window on ``gpus`` virtual ranks: a ``Firing`` per rank, driven in virtual time."""

    def __init__(self, win, cost: np.ndarray, profile: CostProfile, gpus: int, trace: bool, columns: int):
        self.plan, self.cost, self.profile, self.gpus = win.plan, cost, profile, gpus
        self.images = win.steps.num_images
        program = StepMessages(win.steps, win.count, columns)
        self.routes = Routes(win.plan, program, gpus)
        self.firings = [Firing(win.plan, program, copy.copy(self.routes).select(r), r, gpus, carry=False)
                        for r in range(gpus)]
        self.compute, self.comm, self.wait, self.end, self.messages = (np.zeros(gpus) for _ in range(5))
        self.spans = [[] for _ in range(gpus)] if trace else []
        self.arrivals = []  # traced: (rank, source vertex, seconds) of every message received
        self.key = self.key_words = self.flush = None  # the joining what-if (``join_with``); None: none
        self.held = [[] for _ in range(gpus)]  # per rank: the groups it holds to join
        self.holding = np.zeros(gpus, bool)  # whether a rank now holds its messages to join them
        self.host_free = np.zeros(gpus)  # (``profile.host_sends``) when each rank's host has posted all it was given

    def join_with(self, keys: tuple, flush: str) -> None:
        """The joining what-if (``odin_sched.sim.joining``): keys = (key [G] int64 of every group, -1: sent
        alone at once; words [K] of a joined message of each key, or None: its groups' words summed); flush:
        'serving' (a rank holds its messages while it serves at a serving point) or 'run' (it holds them
        until its next image part or wait)."""
        self.key, self.key_words = keys
        self.flush = flush
        self.holding[:] = flush == "run"

    def _span(self, rank, kind, t0, t1, vertex=-1):
        if self.spans and t1 > t0:
            self.spans[rank].append((kind, t0, t1, vertex))

    def _fire(self, rank: int, u: int | None = None):
        """Take ``u`` (default: rank's next ready vertex) with its inputs: (vertex, seconds)."""
        f = self.firings[rank]
        u = f.pop() if u is None else u
        f.inputs(u)
        return u, float(self.cost[u])

    def _compute(self, env, cpu: "Processors", me: int, u: int, seconds: float, route: bool = True, send=None):
        """SimPy process steps of rank ``me`` firing ``u``: ``seconds`` of compute, then (``route``: the
        fire's end) its outputs routed as the runtime routes them after the fire (``Firing.route``): the
        local readers served, and each remote message sent (``send(me, group)``, if given) once the
        sender's overhead for it is paid, in sending order. Returns their groups."""
        t0 = env.now
        yield from cpu.hold(me, seconds)
        self.compute[me] += env.now - t0
        self._span(me, "compute", t0, env.now, u)
        if not route:
            return []
        remote, t0 = [], env.now
        for g, _ in self.firings[me].route(u, None):
            if send is not None and self.holding[me] and self.key[g] >= 0:
                self.held[me].append(g)  # joined later (``_release``)
                continue
            remote.append(g)
            if self.profile.host_sends:
                self._post(env, me, g, send)
                continue
            yield from cpu.hold(me, self.profile.overhead)
            if send is not None:
                send(me, [g], self.routes.group_size[g])
        self.comm[me] += env.now - t0
        self._span(me, "send", t0, env.now, u)
        return remote

    def _post(self, env, me: int, group: int, send) -> None:
        """The host-sends what-if (``CostProfile.host_sends``): rank ``me``'s host thread pays the sender's time
        of message ``group`` after the messages it was given before, while the GPU goes on; the message leaves
        then (``send(me, [group], words)``, if given)."""
        self.host_free[me] = max(env.now, self.host_free[me]) + self.profile.overhead
        if send is not None:
            event = env.timeout(self.host_free[me] - env.now)
            event.callbacks.append(lambda _, g=group: send(me, [g], self.routes.group_size[g]))

    def _host_done(self, env, me: int):
        """SimPy process steps: rank ``me`` waits until its host has posted all it was given (charged as
        communication); nothing without ``CostProfile.host_sends``."""
        tail = self.host_free[me] - env.now
        if tail > 0:
            self._span(me, "send", env.now, self.host_free[me])
            yield env.timeout(tail)
            self.comm[me] += tail

    def _release(self, cpu: "Processors", me: int, send):
        """SimPy process steps: rank ``me`` sends the groups it holds (``join_with``), those to one rank with
        one key as one message (in the order of their first group), each after its sender's overhead."""
        if not self.held[me]:
            return
        groups, self.held[me] = np.asarray(self.held[me], np.int64), []
        r, t0 = self.routes, cpu.env.now
        bucket = r.group_rank[groups] * (int(self.key.max()) + 1) + self.key[groups]
        _, first, inverse = np.unique(bucket, return_index=True, return_inverse=True)
        for b in np.argsort(first).tolist():
            joined = groups[inverse.reshape(-1) == b]
            words = (r.group_size[joined].sum() if self.key_words is None
                     else self.key_words[self.key[joined[0]]])
            yield from cpu.hold(me, self.profile.overhead)
            send(me, joined.tolist(), words)
        self.comm[me] += cpu.env.now - t0
        self._span(me, "send", t0, cpu.env.now)

    def dataflow(self) -> None:
        """Every rank fires ready vertices by priority and sends at once (SimPy processes)."""
        import simpy

        env = simpy.Environment()
        r = self.routes
        out_free, in_free = np.zeros(self.gpus), np.zeros(self.gpus)
        wake = [env.event() for _ in range(self.gpus)]

        def arrive(dst, groups):
            for g in groups:
                if self.spans:
                    self.arrivals.append((dst, int(np.searchsorted(r.vertex_groups, g, side="right")) - 1, env.now))
                self.firings[dst].received(g, None)
            if not wake[dst].triggered:
                wake[dst].succeed()

        def send(src, groups, words):
            """One message from ``src`` of ``words`` float32 words carrying ``groups`` (one rank's)."""
            dst = int(r.group_rank[groups[0]])
            self.messages[src] += 1
            latency, bandwidth = self.profile.link(src, dst)
            seconds = 4.0 * words / float(bandwidth)
            begin = max(env.now, out_free[src])  # the sender's link streams its messages in order ...
            out_free[src] = begin + seconds
            in_free[dst] = max(begin, in_free[dst]) + seconds  # ... and the receiver's drains them in order
            event = env.timeout(in_free[dst] + float(latency) - env.now)
            event.callbacks.append(lambda _, dst=dst, groups=groups: arrive(dst, groups))

        cpu = Processors(env, self.profile, self.gpus)

        def fire(me, u, seconds):
            yield from self._compute(env, cpu, me, u, seconds, send=send)

        def rank(me):
            f = self.firings[me]
            while not f.done:
                if f.ready:
                    u, seconds = self._fire(me)
                    if u < self.images:  # the runtime's serving point: after the forward pass, the rank
                        # fires its ready cell versions (``StepMessages.servable``), then the backward pass
                        yield from self._release(cpu, me, send)  # (joining: held messages go before an image)
                        forward = seconds * self.profile.forward_share
                        yield from self._compute(env, cpu, me, u, forward, route=False)
                        seconds -= forward
                        self.holding[me] |= self.flush == "serving"
                        served = f.pop_servable()
                        while served is not None:
                            yield from fire(me, *self._fire(me, served))
                            served = f.pop_servable()
                        self.holding[me] = self.flush == "run"
                        yield from self._release(cpu, me, send)
                    yield from fire(me, u, seconds)
                elif self.held[me]:  # (joining) send what it holds, then look again: a message may come meanwhile
                    yield from self._release(cpu, me, send)
                else:
                    t0 = env.now
                    wake[me] = env.event()
                    yield from cpu.wait(me, wake[me])
                    self.wait[me] += env.now - t0
                    self._span(me, "wait", t0, env.now)
            yield from self._release(cpu, me, send)
            yield from self._host_done(env, me)
            cpu.release(me)
            self.end[me] = env.now

        for me in range(self.gpus):
            env.process(rank(me))
        env.run()
        stuck = [me for me, f in enumerate(self.firings) if not f.done]
        if stuck:
            raise RuntimeError(f"simulated ranks {stuck[:8]} never fired all their vertices")

    def bsp(self) -> None:
        """Phase by phase as ``run_dataflow(mode='bsp')``: fire, barrier, one Alltoallv of the phase."""
        import simpy

        r, gpus = self.routes, self.gpus
        orders = [f.bsp_order() for f in self.firings]
        env = simpy.Environment()
        cpu = Processors(env, self.profile, self.gpus)
        clocks = np.zeros(gpus)  # when each rank reached the barrier, then when it left it

        def rank_phase(me, vertices, sent, met, arrived):
            """Fire this rank's vertices of the phase, then wait at the barrier until all have."""
            for u in vertices:
                sent.extend((yield from self._compute(env, cpu, me, *self._fire(me, u))))
            yield from self._host_done(env, me)
            clocks[me] = env.now
            cpu.release(me)
            arrived.append(me)
            if len(arrived) == gpus:  # the last rank in: the barrier completes after its rounds
                yield env.timeout(self.profile.barrier_seconds(gpus))
                met.succeed()
            else:
                yield from cpu.wait(me, met)
            self.wait[me] += env.now - clocks[me]
            self._span(me, "barrier", clocks[me], env.now)
            clocks[me] = env.now  # out of the barrier, into the Alltoallv

        def phases():
            starts = [0] * gpus
            for i in range(len(orders[0][0])):
                sent, met, arrived = [], env.event(), []
                yield env.all_of([env.process(rank_phase(me, order[starts[me]:bounds[i]].tolist(), sent, met, arrived))
                                  for me, (_, order, bounds) in enumerate(orders)])
                starts = [bounds[i] for _, _, bounds in orders]
                sent = np.array(sent, np.int64)
                exchange = self._alltoallv(sent)  # from the last rank out of the barrier
                self.messages += np.bincount(r.group_source_rank[sent], minlength=gpus)
                for g in sent.tolist():
                    self.firings[int(r.group_rank[g])].received(g, None)
                done = env.now + exchange  # the Alltoallv ends together, after the last rank joined it
                for me in range(gpus):
                    self._span(me, "recv", clocks[me], done)
                self.comm += done - clocks
                yield env.timeout(exchange)
            self.end[:] = env.now

        env.process(phases())
        env.run()

    def _alltoallv(self, groups: np.ndarray) -> float:
        """Seconds of an Alltoallv of the messages ``groups``: the busiest rank's bytes in or out over
        its links, plus one latency per peer it talks to."""
        r = self.routes
        return exchange_seconds(self.profile, r.group_source_rank[groups], r.group_rank[groups],
                                4.0 * r.group_size[groups], self.gpus)


def scaling(scene: SimScene, profile: CostProfile, gpu_counts, steps: int, batch_size: int | None = None,
            modes=SIM_MODES, windows=(OdinOptions.window,), **options) -> dict:
    """{mode: [SimResult per GPU count]}; the batch size defaults to the number of GPUs. With several
    ``windows`` every mode is simulated with each and reported at its fastest (its ``window``), so
    that no mode is compared at a window length that suits another."""
    return {mode: [max((simulate(scene, profile, mode, p, steps, batch_size or p, window=w, **options)
                        for w in (windows if mode != "grendel" else windows[:1])), key=lambda run: run.steps_per_second)
                   for p in gpu_counts]
            for mode in modes}


def write_results(path, gpu_counts, results: dict, profile: CostProfile, attrs: dict) -> None:
    """The simulate result file: /gpus, /steps_per_second/{mode}, /wait_fraction/{mode}, /window/{mode},
    /memory_per_gpu/{mode} (bytes; with a sharded profile or grendel), /plan_seconds_per_window/{mode}
    (this machine's wall time of ``plan_cells``; 0 for grendel),
    /speedup_vs_barrier, /hidden_fraction, /ceiling_steps_per_second, /ceiling_vs_barrier, /parallelism,
    /stale_reads, /max_staleness_seen, and with grendel: /speedup_vs_grendel/{mode} for the other modes,
    /hidden_vs_grendel (odin), and for a Mip360 preset with batch = GPUs /published_grendel/{gpus,
    steps_per_second} (Grendel-GS's README); the cost profile and ``attrs`` as root attributes."""
    import h5py

    from pregel.atomic import atomic_output

    by = {m: results[m] for m in results}
    with atomic_output(path, ".h5") as temp, h5py.File(temp, "w") as f:
        f.create_dataset("gpus", data=np.asarray(gpu_counts, np.int64))
        for m, runs in by.items():
            f.create_dataset(f"steps_per_second/{m}", data=[x.steps_per_second for x in runs])
            f.create_dataset(f"wait_fraction/{m}", data=[x.wait_fraction for x in runs])
            f.create_dataset(f"wait_seconds/{m}", data=[x.wait.sum() for x in runs])
            f.create_dataset(f"window/{m}", data=[x.window for x in runs])
            f.create_dataset(f"memory_per_gpu/{m}", data=[x.memory_bytes for x in runs])
            f.create_dataset(f"plan_seconds_per_window/{m}", data=[x.plan_seconds / -(-x.steps // x.window)
                                                                  for x in runs])
        if "odin" in by and "barrier" in by:
            f.create_dataset("speedup_vs_barrier", data=[o.steps_per_second / b.steps_per_second
                                                         for o, b in zip(by["odin"], by["barrier"])])
            f.create_dataset("hidden_fraction", data=[hidden_fraction(o, b) for o, b in zip(by["odin"], by["barrier"])])
            f.create_dataset("ceiling_steps_per_second", data=[o.ceiling_steps_per_second for o in by["odin"]])
            f.create_dataset("ceiling_vs_barrier", data=[o.ceiling_steps_per_second / b.steps_per_second
                                                         for o, b in zip(by["odin"], by["barrier"])])
        if "grendel" in by:
            for m in (m for m in by if m != "grendel"):
                f.create_dataset(f"speedup_vs_grendel/{m}", data=[x.steps_per_second / g.steps_per_second
                                                                  for x, g in zip(by[m], by["grendel"])])
            if "odin" in by:
                f.create_dataset("hidden_vs_grendel", data=[hidden_vs_grendel(o.comm, o.wait, g.comm, g.wait)
                                                            for o, g in zip(by["odin"], by["grendel"])])
        first = next(iter(by.values()))
        f.create_dataset("parallelism", data=[x.parallelism for x in first])
        if "odin-fast" in by:
            f.create_dataset("stale_reads", data=[x.stale_reads for x in by["odin-fast"]])
            f.create_dataset("max_staleness_seen", data=[x.max_staleness_seen for x in by["odin-fast"]])
        gpus, speed = published_grendel_steps(str(attrs.get("layout", "")))
        if gpus and not attrs.get("batch_size"):  # published runs with batch = GPUs, as this one
            f.create_dataset("published_grendel/gpus", data=np.asarray(gpus, np.int64))
            f.create_dataset("published_grendel/steps_per_second", data=np.asarray(speed))
        for k, v in {**_profile_attrs(profile), **attrs}.items():
            f.attrs[k] = v


def hidden_fraction(odin: SimResult, barrier: SimResult) -> float:
    """1 - wait_odin / wait_barrier (summed over GPUs); 0 when the barrier run never waits."""
    total = barrier.wait.sum()
    return float(1.0 - odin.wait.sum() / total) if total > 0 else 0.0


def _profile_attrs(profile: CostProfile) -> dict:
    from dataclasses import asdict

    return {f"profile_{k}": (list(v) if isinstance(v, tuple) else v) for k, v in asdict(profile).items()
            if v is not None}  # HDF5 has no None: a profile without the term has no attribute for it


def format_table(gpu_counts, results: dict) -> str:
    """The printed table: steps/s and wait fraction per mode, speedup, hidden fraction, ceiling,
    parallelism and the window each mode ran with."""
    modes = list(results)
    head = "GPUs " + " ".join(f"{m + ' st/s':>15} {m + ' wait':>15}" for m in modes)
    if "odin" in results and "barrier" in results:
        head += f" {'odin/barrier':>12} {'hidden':>7} {'ceiling/barrier':>15}"
    if "odin" in results and "grendel" in results:
        head += f" {'odin/grendel':>12} {'hidden vs grendel':>17} {'ceiling/grendel':>15}"
    head += f" {'parallelism':>11} {'windows ' + '/'.join(modes):>20}"
    lines = [head]
    for i, p in enumerate(gpu_counts):
        row = f"{p:>4} " + " ".join(f"{results[m][i].steps_per_second:>15.2f} {results[m][i].wait_fraction:>15.3f}"
                                    for m in modes)
        if "odin" in results and "barrier" in results:
            o, b = results["odin"][i], results["barrier"][i]
            row += (f" {o.steps_per_second / b.steps_per_second:>12.3f} {hidden_fraction(o, b):>7.3f}"
                    f" {o.ceiling_steps_per_second / b.steps_per_second:>15.3f}")
        if "odin" in results and "grendel" in results:
            o, g = results["odin"][i], results["grendel"][i]
            row += (f" {o.steps_per_second / g.steps_per_second:>12.3f} "
                    f"{hidden_vs_grendel(o.comm, o.wait, g.comm, g.wait):>17.3f}"
                    f" {o.ceiling_steps_per_second / g.steps_per_second:>15.3f}")
        row += f" {results[modes[0]][i].parallelism:>11.1f} {'/'.join(str(results[m][i].window) for m in modes):>20}"
        lines.append(row)
    return "\n".join(lines)


#: Gaussians generated for a scene simulated in grendel mode alone (each stands for several)
PRESET_GENERATED = 400_000
#: a preset of more Gaussians is simulated with odin's modes as a stand-in of at most STAND_IN_GENERATED
STAND_IN_ABOVE, STAND_IN_GENERATED = 8_000_000, 2_000_000


def stand_in_size(gaussians: int, generated: int, gpus, cells_per_gpu: int | None = None) -> tuple:
    """(n, f): a stand-in for a model of ``gaussians``, n <= ``generated`` Gaussians standing for f each,
    with n a multiple of the image order's ``ORDER_CELLS`` and of odin's ``num_cells`` of n x f at every
    GPU count of ``gpus`` (so that its cells plan exactly as its Gaussians repeated f times: ``cells``)
    and n x f within 1 % below ``gaussians``: the smallest such f, then the largest n. (With the default
    cells, uncapped at some GPU count, a cell holds exactly 8,192 Gaussians: f is a power of two.)"""
    from odin_sched.training.image_order import ORDER_CELLS

    for f in range(-(-gaussians // generated), gaussians // ORDER_CELLS + 1):
        top = gaussians // f // ORDER_CELLS * ORDER_CELLS
        for n in range(top, max(math.ceil(0.99 * gaussians / f), ORDER_CELLS) - 1, -ORDER_CELLS):
            if all(n % num_cells(n * f, p, cells_per_gpu) == 0 for p in gpus):
                return n, f
    raise InputError(f"no stand-in of at most {generated:,} Gaussians for {gaussians:,} whose odin cells at "
                     f"{','.join(map(str, gpus))} GPUs divide it")


def odin_preset(name: str, gpus, cells_per_gpu: int | None = None, seed: int = 0,
                generated: int | None = None) -> SimScene:
    """The scene of preset ``name`` for odin's modes at the GPU counts ``gpus`` (``cells_per_gpu`` as
    ``simulate``'s): all of it, or a stand-in (``stand_in_size``) of at most ``generated`` Gaussians
    (default: STAND_IN_GENERATED for a preset of more than STAND_IN_ABOVE)."""
    if generated is None and PRESETS[name].gaussians > STAND_IN_ABOVE:
        generated = STAND_IN_GENERATED
    if generated is None or generated >= PRESETS[name].gaussians:
        return preset_scene(name, seed)
    made, factor = stand_in_size(PRESETS[name].gaussians, generated, gpus, cells_per_gpu)
    return preset_scene(name, seed, made, factor)


#: the most bytes the per-window tables of cameras x cells (visibility, one byte each) may take
MAX_TABLE_BYTES = 2 ** 31


def check_sizes(gaussians: int, cameras: int, train_cameras: int, gpus, batch_size: int | None,
                cells_per_gpu: int | None) -> None:
    """``InputError`` unless every GPU count of ``gpus`` makes a meaningful run that fits in memory: its
    batch (``batch_size``, default the GPU count) no more than the training cameras, each of its
    ``num_cells`` cells able to hold a Gaussian, and a cameras x cells table within ``MAX_TABLE_BYTES``."""
    for p in gpus:
        cells = num_cells(gaussians, p, cells_per_gpu)
        if cells > gaussians:
            chosen = (f"SimulateConfig.cells_per_gpu {cells_per_gpu}" if cells_per_gpu
                      else "the default (at least 16 per GPU)")
            raise InputError(f"SimulateConfig.gpus {p} with {chosen}: {cells:,} cells is more than the "
                             f"{gaussians:,} Gaussians: a cell would hold none (fewer GPUs or cells per GPU)")
        if cameras * cells > MAX_TABLE_BYTES:
            raise InputError(f"SimulateConfig.gpus {p}: {cameras:,} cameras x {cells:,} cells is more than the "
                             f"{MAX_TABLE_BYTES:,} bytes a window's visibility table may take (fewer cameras, "
                             "GPUs or cells per GPU)")
        batch = batch_size or p
        default = "" if batch_size else f" (the default: the GPU count of SimulateConfig.gpus {p})"
        if batch > train_cameras:
            raise InputError(f"SimulateConfig.batch_size {batch}{default} is more than the {train_cameras} "
                             "training cameras")


def run(config: SimulateConfig) -> dict:
    """``pregel simulate``: simulate every mode at each GPU count of ``config``, print the table and write
    ``config.out``. Returns {mode: [SimResult per GPU count]}."""
    from odin_sched.sim.costmodel import load_profile
    from pregel.outputs import check_outputs

    for name, value in (("gpus", min(config.gpus)), ("steps", config.steps), ("window", min(config.window)),
                        ("cells_per_gpu", 1 if config.cells_per_gpu is None else config.cells_per_gpu),
                        ("width", config.width),
                        ("height", config.height)):
        if value < 1:
            raise InputError(f"SimulateConfig.{name} must be at least 1, got {value}")
    if config.batch_size is not None and config.batch_size < 1:
        raise InputError(f"SimulateConfig.batch_size must be at least 1, got {config.batch_size}")
    for name in ("max_staleness", "batches_ahead"):
        if getattr(config, name) < 0:
            raise InputError(f"SimulateConfig.{name} must be at least 0, got {getattr(config, name)}")
    if config.shared_cores < 0:
        raise InputError(f"SimulateConfig.shared_cores must be at least 0, got {config.shared_cores}")
    if config.host_sends and config.shared_cores:
        raise InputError("SimulateConfig.host_sends: a host thread beside each GPU, not with shared_cores")
    sh_degree = check_sh_degree(config.sh_degree, "SimulateConfig.sh_degree")
    unknown = [m for m in config.modes if m not in SIM_MODES]
    if unknown or not config.modes:
        raise InputError(f"SimulateConfig.modes must be some of {', '.join(SIM_MODES)}, got {','.join(config.modes)!r}")
    check_outputs([("out", config.out)], inputs=[config.scene])
    try:  # refused before any work; loaded again below with the planning measured nearest the scene's size
        load_profile(config.profile)
    except (OSError, ValueError) as err:
        raise InputError(f"SimulateConfig.profile {config.profile}: {err}") from None
    if config.scene is not None:
        setup = prepare(TrainConfig(config.scene, config.steps, batch_size=config.batch_size or 1, seed=config.seed,
                                    eval_every=config.steps, sh_degree=sh_degree))
        check_sizes(len(setup.initial["means"]), setup.scene.num_cameras, len(setup.train_ids), config.gpus,
                    config.batch_size, config.cells_per_gpu)
        scene = scene_of_setup(setup)
    elif config.layout in PRESETS:  # grendel alone needs only the features: a sample stands for the rest
        preset = PRESETS[config.layout]
        check_sizes(preset.gaussians, preset.cameras, preset.cameras - -(-preset.cameras // HOLDOUT_EVERY),
                    config.gpus, config.batch_size, config.cells_per_gpu)
        scene = (preset_scene(config.layout, config.seed, generated=PRESET_GENERATED)
                 if tuple(config.modes) == ("grendel",) else odin_preset(config.layout, config.gpus,
                                                                         config.cells_per_gpu, config.seed))
    else:
        train_cameras = config.cameras - -(-config.cameras // HOLDOUT_EVERY)  # as metadata_scene holds out
        check_sizes(config.gaussians, config.cameras, train_cameras, config.gpus, config.batch_size,
                    config.cells_per_gpu)
        grendel_only = tuple(config.modes) == ("grendel",)
        made = min(config.gaussians, PRESET_GENERATED) if grendel_only else config.gaussians
        scene = standing_for(metadata_scene(config.layout, made, config.cameras, config.width, config.height,
                                            config.seed), config.gaussians)
    # GPUs share the processors of shared_cores, not this machine's; planning as measured at this size
    profile = replace(load_profile(config.profile, scene.total_gaussians, config.host_sends),
                      cores=config.shared_cores)
    gpus, windows = list(config.gpus), tuple(config.window)
    results = scaling(scene, profile, gpus, config.steps, config.batch_size, modes=tuple(config.modes), windows=windows,
                      cells_per_gpu=config.cells_per_gpu, max_staleness=config.max_staleness, seed=config.seed,
                      sh_degree=sh_degree, batches_ahead=config.batches_ahead)
    seen = scene.features[scene.train_ids, 0]
    print(f"{config.scene or config.layout}: {scene.total_gaussians:,} Gaussians, {len(scene.viewmats):,} cameras "
          f"at {scene.width} x {scene.height}, in view per image {seen.mean():,.0f} (spread {seen.std():,.0f}), "
          f"{config.steps} steps, batch size {config.batch_size or 'GPUs'}, profile {profile.name}, "
          f"odin's cells {'/'.join(str(num_cells(scene.total_gaussians, p, config.cells_per_gpu)) for p in gpus)}")
    print(format_table(gpus, results))
    write_results(config.out, gpus, results, profile,
                  {"layout": config.layout if config.scene is None else "scene", "gaussians": scene.total_gaussians,
                   "cameras": len(scene.viewmats), "steps": config.steps, "batch_size": config.batch_size or 0,
                   "windows": list(windows), "cells_per_gpu": config.cells_per_gpu or 0,  # 0: the default
                   "cells": [num_cells(scene.total_gaussians, p, config.cells_per_gpu) for p in gpus],
                   "max_staleness": config.max_staleness, "sh_degree": sh_degree,
                   "batches_ahead": config.batches_ahead})
    print(f"wrote {config.out}")
    return results
