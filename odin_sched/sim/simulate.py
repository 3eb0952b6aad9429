"""A discrete-event simulator of distributed training that runs the runtime's own scheduling code.

What decides what runs where and when is the runtime's: the scene's k-d cells are cut once (cells
persist, as the sharded runtime's do; ``scene.cells``) and every window is planned from their metadata by
``odin_sched.odin.planner.plan_cells`` (conservative visibility, step graph, ``relax_reads`` in
odin-fast mode, levels / priorities / assignment by ``plan_schedule`` for ``gpus`` virtual ranks), the
messages are those of ``odin_sched.odin.program.StepMessages``, and every virtual rank fires its vertices
through ``pregel.dataflow.Firing`` (the ready queue, pending counts and routing that ``run_dataflow``
uses over MPI). Only the transport and the clock differ: a planned window runs in virtual time
(``window_run.WindowRun``), each vertex taking its cost from the cost model (``odin_sched.sim.costmodel``).
Each window ends like the runtime's (``window_end``): with an unsharded profile a barrier and an allgather
of the model; with a sharded one a barrier and an allgather of the cells' metadata, then cells migrate
between owners by the runtime's rule and grow by a densification model (``simulate``). Planning counts
when the profile says so (``CostProfile.planning_seconds``: the measured ``plan_seconds`` per window,
slower when the ranks outnumber the processors; sharded: only what outlasts the window before).

The other parts: ``scene`` (what the simulator knows of a scene), ``processors`` (processors shared by
ranks that outnumber them), ``results`` (``SimResult``, the printed table and the file), ``bounds``
(what no schedule can beat), ``grendel`` (Grendel-GS's step).

Not simulated: evaluation, the densification rounds' own work (the same in every mode), and contention
inside the network beyond the two ends of a link.
"""
import time
from dataclasses import replace

import numpy as np

from odin_sched.odin.depgraph import parallelism
from odin_sched.odin.migration import rebalance, row_words
from odin_sched.odin.modes import MODES
from odin_sched.odin.options import OdinOptions
from odin_sched.odin.options import BATCHES_AHEAD, HOLD_SHARE
from odin_sched.odin.planner import PlanConfig, plan_cells
from odin_sched.odin.shard import OWNER_GROUP, owners_by_count
from odin_sched.scenes.scene_io import HOLDOUT_EVERY
from odin_sched.scenes.sh import DEFAULT_SH_DEGREE, check_sh_degree
from odin_sched.scenes.visibility import window_margin
from odin_sched.sim.bounds import assigned_bound
from odin_sched.sim.config import SimulateConfig
from odin_sched.sim.costmodel import CostProfile
from odin_sched.sim.grendel import simulate_grendel
from odin_sched.sim.presets import PRESETS
from odin_sched.sim.results import SimResult, format_table, write_results
from odin_sched.sim.scene import (PRESET_GENERATED, SimScene, cells, metadata_scene, num_cells, odin_preset,
                                  preset_scene, scene_of_setup, standing_for)
from odin_sched.sim.window_end import (DENSIFY_GROWTH, METADATA_CELL_BYTES, METADATA_IMAGE_BYTES, densified_counts,
                                       gather_bytes, migration_cost, state_bytes, window_memory)
from odin_sched.sim.window_run import WindowRun, vertex_costs
from odin_sched.training.image_order import spread_batches
from odin_sched.training.step import BatchSettings, param_columns
from odin_sched.training.train import TrainConfig, prepare, scene_extent, visible_cells_of_cameras
from pregel.errors import InputError
from pregel.progress import Progress

#: the simulated modes: the runtime's, and Grendel-GS's step (``odin_sched.sim.grendel``)
SIM_MODES = (*MODES, "grendel")


def local_comm():
    """A one-rank communicator (MPI.COMM_SELF): the simulator plans for many virtual GPUs on one process."""
    from mpi4py import MPI

    from pregel.comm import Comm

    return Comm(MPI.COMM_SELF)


def simulate(scene: SimScene, profile: CostProfile, mode: str, gpus: int, steps: int, batch_size: int,
             window: int = OdinOptions.window, cells_per_gpu: int | None = None,
             max_staleness: int = 1, seed: int = 0,
             trace: bool = False, sh_degree: int = DEFAULT_SH_DEGREE, densify_growth: float = DENSIFY_GROWTH,
             message_sizes=None, joining=None, owner_group: int = OWNER_GROUP,
             batches_ahead: int = BATCHES_AHEAD, hold_share: float = HOLD_SHARE, on_window=None) -> SimResult:
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
    by default the runtime's). ``batches_ahead``, ``hold_share``: as ``PlanConfig``'s (by default the runtime's).
    ``on_window``: called with (windows done, windows in all) after each window (progress)."""
    if mode not in SIM_MODES:
        raise InputError(f"mode must be one of {', '.join(SIM_MODES)}, got {mode!r}")
    if profile.host_sends and (profile.cores or joining is not None):
        raise InputError("host_sends: a host thread beside a GPU: not with shared cores nor with joining")
    comm = local_comm()
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
    memory, reads, last_window = np.zeros(gpus), np.empty((0, 2), np.int64), 0.0
    traced = arrivals = None
    cell_of, bounds = cells(scene, num_cells(scene.total_gaussians, gpus, cells_per_gpu))
    owner = owners_by_count(bounds.count, gpus, owner_group)
    total, row_bytes = int(bounds.count.sum()), 4 * row_words(param_columns(sh_degree), True)
    migrated = {"bytes": 0.0, "seconds": 0.0, "cells": 0}
    messages = planning_wait = 0.0
    windows = -(-steps // window)
    for done, start in enumerate(range(0, steps, window), 1):
        stop = min(start + window, steps)
        lrs = settings.lrs(extent, start + 1)
        margin = window_margin(lrs["means"], lrs["scales"], settings.betas, stop - start)
        t0 = time.perf_counter()
        win, _ = plan_cells(comm, bounds, owner, scene, batches, start, stop, margin,
                            PlanConfig(bounds.num_cells, gpus, staleness, cost_weights=weights, sh_degree=sh_degree,
                                       batches_ahead=batches_ahead, hold_share=hold_share),
                            initial_reads=False)
        win = replace(win, cell_of=cell_of)
        planned = time.perf_counter() - t0
        plan_total += planned
        stale += int(np.count_nonzero(win.staleness))
        worst = max(worst, int(win.staleness.max(initial=0)))
        cost = vertex_costs(win, scene.views, profile, np.random.default_rng([seed, start]),
                            profile.step_seconds * gpus / batch_size)
        run = WindowRun(win, cost, profile, gpus, trace and start == 0, param_columns(sh_degree))
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
        if on_window is not None:
            on_window(done, windows)
    return SimResult(mode, gpus, steps, clock, totals["compute"], totals["comm"], totals["wait"], plan_total,
                     work / path if path else 0.0, stale, worst, spans, traced, arrivals, bound, bound + assigned,
                     window,
                     memory_bytes=float(memory.max()), migration_bytes=migrated["bytes"],
                     migration_seconds=migrated["seconds"], migrated_cells=migrated["cells"], messages_sent=messages,
                     planning_wait=planning_wait)

def scaling(scene: SimScene, profile: CostProfile, gpu_counts, steps: int, batch_size: int | None = None,
            modes=SIM_MODES, windows=(OdinOptions.window,), progress: bool = False, **options) -> dict:
    """{mode: [SimResult per GPU count]}; the batch size defaults to the number of GPUs. With several
    ``windows`` every mode is simulated with each and reported at its fastest (its ``window``), so
    that no mode is compared at a window length that suits another. ``progress``: a bar on a terminal,
    else a line on stderr every few seconds, counting the runs (a mode at one GPU count and window
    length) and the windows of the run under way."""
    runs = [(mode, p, w) for mode in modes for p in gpu_counts for w in (windows if mode != "grendel" else windows[:1])]
    bar = Progress(len(runs), enabled=progress, unit="run")
    best = {}
    for i, (mode, p, w) in enumerate(runs):
        note = f"{mode} at {p} GPUs, window length {w}"
        run = simulate(scene, profile, mode, p, steps, batch_size or p, window=w, **options,
                       on_window=lambda done, total, i=i, note=note: bar.update(i, f"{note}: window {done}/{total}"))
        if (mode, p) not in best or run.steps_per_second > best[mode, p].steps_per_second:
            best[mode, p] = run
        bar.update(i + 1, note)
    bar.close()
    return {mode: [best[mode, p] for p in gpu_counts] for mode in modes}


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
    for name in ("max_staleness", "batches_ahead", "hold_share"):
        if not getattr(config, name) >= 0:
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
                      progress=config.progress,
                      cells_per_gpu=config.cells_per_gpu, max_staleness=config.max_staleness, seed=config.seed,
                      sh_degree=sh_degree, batches_ahead=config.batches_ahead, hold_share=config.hold_share)
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
                   "batches_ahead": config.batches_ahead, "hold_share": config.hold_share})
    print(f"wrote {config.out}")
    return results
