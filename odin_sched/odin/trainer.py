"""Barrier-free distributed training of Gaussian splatting (Odin) on a sharded model.

The model is cut into persistent spatial *cells* (k-d cells of the initial means, ``Shard``): each cell
has one owner, and a rank holds parameters, Adam moments, step counts and densification statistics only
for the Gaussians of the cells it owns (``odin_sched.odin.shard``). At the start every rank reads the
initial Gaussians once to build the cells, keeps its own and drops the rest.

Training is cut into *windows* of at most ``window`` batches (also ending where densification or
evaluation is due). Each window is planned from cell metadata alone (``odin_sched.odin.planner``): the
cells each camera may see within the window's motion margin, the dependency graph of the window's steps
(image steps and cell versions), and the rank of every step. Every rank plans the same way on its own
(planning sends nothing), and window w + 1 is planned in a thread while window w runs, from the
metadata of w's start with a margin covering both windows; at w's end its premise is checked, and a
plan whose premise failed is dropped and made again (never run).

A window runs as a dataflow program (``odin_sched.odin.program.TrainingSteps``) on
``pregel.dataflow``: each cell's owner sends the cell's parameters point to point to the ranks whose
images read it (the last version of the previous window), an image step fires on its rank once the
versions of all its cells have arrived, renders its image with only those of the cells' Gaussians that
can touch it (``odin_sched.odin.program.CellCulling``) and sends each cell its share of the gradient; a
cell version fires on the owner once every image of its batch
that sees the cell has reported, sums their gradients in batch order, takes the visible-Adam step and
sends the new parameters straight to the ranks of the next batch's images that read the cell. The
window ends with one metadata-sized exchange (``odin_sched.odin.window_end``): images' losses,
visibility-violation counts and every owned cell's metadata; no parameter crosses ranks there.

Because every number is computed with the same per-Gaussian operations in the same order as the
single-process trainer (``odin_sched.training.step``) and a cell's latest version lives in one place, the
result equals the single-process run with the same batch size bit for bit, whatever the number of
ranks, provided the visibility prediction held, which is checked and reported
(``visibility_violations``). ``mode="barrier"`` runs the same program in the engine's bulk-synchronous
mode (a collective exchange and a global barrier per phase), the synchronous baseline of Grendel-GS.

Held-out PSNR is computed by the ranks (``odin_sched.odin.program.EvalViews``: each renders some test
views after its owners send the cells they may see) and combined in camera order. The whole model is
never brought onto one rank: a checkpoint is written by every rank (its owned rows) and resumed at any
number of ranks, each reading only the rows of the cells it owns (``Shard.from_checkpoint``), and the
outputs are streamed to rank 0 in bounded pieces (``odin_sched.training.outputs``).

Densification runs on each owner's Gaussians (``odin_sched.odin.owner_densify``): every model's rows,
the single process's and each owner's, are in ascending Gaussian id, and images render their gathered
cells in id order, so owners densifying their own rows reproduce the single process's round; new
Gaussians join their parent's cell and no parameter crosses ranks.

With ``device='cuda'`` each rank's Gaussians, their Adam state, the renders, losses, backward passes and
Adam steps are on the rank's GPU; the blocks sent between ranks cross through host memory in
``HostStaging``, which counts the bytes copied.

Where each part lives, one module per job: ``shard`` (owned state and cells), ``cell_meta`` (metadata),
``planner`` (plans, overlapped), ``program`` (a window's program and the held-out evaluation),
``window_end`` (the exchange and visibility check), ``options`` (``OdinOptions`` and their check),
``rank_record`` (a rank's metrics and timeline labels, ``RankRecord``); here ``DistributedTrainer.run``
reads as a window's phases.
"""
import time

import numpy as np

from kernels.splat import render as cpu_render
from odin_sched.odin.cell_meta import exchange_metadata
from odin_sched.odin.depgraph import write_schedule
from odin_sched.odin.migration import migrate, rebalance, split_cells
from odin_sched.odin.options import OdinOptions, check_options
from odin_sched.odin.owner_densify import densify_owned
from odin_sched.odin.planner import Planned, Window, WindowPlanner, cached_bytes, image_ranks, window_cameras
from odin_sched.odin.program import CellCulling, CellInputs, EvalViews, ImageInputs, TrainingSteps, eval_plan
from odin_sched.odin.rank_record import RANK_FIELDS, RankRecord
from odin_sched.odin.shard import Shard
from odin_sched.odin.staging import HostStaging
from odin_sched.odin.window_end import (escaped, exchange_window_end, motion_snapshot, snapshot_columns,
                                        snapshots_of_columns)
from odin_sched.scenes.visibility import Margin, predict_visible_cells
from odin_sched.training.checkpoint import TrainState
from odin_sched.training.config import TrainConfig
from odin_sched.training.densify import due_after
from odin_sched.training.optim import default_lrs
from odin_sched.training.train import TrainResult, TrainingSetup, comparison_writer, params_of, set_up, write_outputs
from odin_sched.training.status import SPAN_KINDS, TrainStatus, window_spans
from pregel.comm import Comm
from pregel.dataflow import run_dataflow, write_chrome_trace
from pregel.progress import Progress
from pregel.sends import thread_multiple


class DistributedTrainer:
    """Trains on every rank of ``comm``; see the module docstring. A window's phases: take its plan (made
    ahead, or now), plan the next one in a thread, run the window's program (``TrainingSteps``), the
    window-end exchange and visibility checks (``odin_sched.odin.window_end``), densify and evaluate;
    ``record`` (a ``RankRecord``) keeps the rank's metrics and timeline."""

    def __init__(self, comm, setup: TrainingSetup, config: TrainConfig, options: OdinOptions, progress,
                 checkpoint=None, render=None, staging: HostStaging | None = None):
        """``setup`` on the trainer's device (``odin_sched.training.train.to_device``), ``render`` the
        rasterizer for it (default: ``kernels.splat.render``, the CPU's), ``staging`` its ``HostStaging``
        (default: the CPU's). The initial Gaussians of ``setup`` are dropped once the shard is made."""
        from mpi4py import MPI

        self.comm, self.setup, self.options, self.progress = comm, setup, options, progress
        self.steps, self.densify, self.eval_every = config.steps, config.densify, config.eval_every
        self.ssim_weight = config.ssim_weight
        self.checkpoint = checkpoint  # an odin_sched.training.checkpoint.TrainCheckpointer or None
        self.render = render or cpu_render
        self.staging = staging or HostStaging("cpu", staged=False)
        self.culling = CellCulling()  # which rows of the cells an image reads can touch it
        self.num_cells = options.resolved_cells(comm.size, setup.initial["means"].shape[0])
        self.seed = config.seed  # densification draws are keyed by (seed, step, Gaussian id)
        self.planner = WindowPlanner(Comm(MPI.COMM_SELF), setup, self.steps, options, comm.size, self.densify,
                                     self.eval_every)
        self.record = RankRecord(comm.rank, self.steps * setup.settings.batch_size, options.timeline is not None)
        self.violations = 0
        self.migrated = 0         # cells that moved to another owner
        self.status = None       # an odin_sched.training.status.TrainStatus when the dashboard's file is written
        self.view = None         # the first held-out view [H, W, 3] of the last evaluation, on rank 0
        self.window_spans = None  # the last window's dataflow spans, for the dashboard
        self.resumed = TrainState(0, None, None, np.empty(self.steps), [], [])
        settings = setup.settings
        if checkpoint is not None and checkpoint.resume_from is not None:  # only this rank's rows are read
            self.shard = Shard.from_checkpoint(comm.rank, comm.size, checkpoint, self.resumed, self.num_cells,
                                               default_lrs(setup.extent), settings.betas, settings.eps,
                                               self.densify is not None, setup.initial["means"].device)
            self.planner.safety, self.violations = self.resumed.safety, self.resumed.violations
        else:
            self.shard = Shard.from_initial(comm.rank, comm.size, setup.initial, default_lrs(setup.extent),
                                            settings.betas, settings.eps, self.num_cells, self.densify is not None,
                                            setup.initial_rows)
        setup.initial.clear()  # the whole model is no longer held
        setup.initial_rows = None
        self.record.held(self.shard.state_bytes())

    def run(self) -> TrainResult:
        """Train every window in turn (collective); returns the result (the same on every rank)."""
        resumed = self.resumed
        losses, psnr_steps, psnr_values = resumed.losses, resumed.psnr_steps, resumed.psnr_values
        self.comm.barrier()
        started = self.record.start()
        processor_started = time.process_time()
        bounds = self._metadata()
        start, ahead, snapshots = resumed.step, None, {}
        while start < self.steps:
            stop = self.planner.window_end(start)
            planned = ahead if ahead is not None else self._plan(start, stop, bounds)
            self.planner.used(planned)
            snapshots = {b: s for b, s in snapshots.items() if b == planned.base}
            snapshots.setdefault(start, motion_snapshot(self.shard.opt))
            future = self._plan_next(start, stop, bounds)
            report = self._report_due(stop)
            image_losses = self._run_window(planned.window, report)
            ahead = self._wait(future)
            bad = [escaped(snapshots[planned.base], self.shard.opt, planned.window.margin),
                   escaped(snapshots[start], self.shard.opt, self.planner.premise(ahead)) if ahead else 0]
            t0 = time.perf_counter()
            end = exchange_window_end(self.comm, self.shard, image_losses, image_ranks(planned.window),
                                      self.setup.settings.batch_size, bad)
            self.record.window_ended(t0, time.perf_counter(), planned.window, end.bytes_sent)
            losses[start:stop], bounds = end.losses, end.bounds
            if end.counts[0]:
                self._violated(int(end.counts[0]), planned.window)
            if ahead is not None and (end.counts[0] or end.counts[1]):
                ahead, self.planner.replans = None, self.planner.replans + 1
            split, snapshots = self._reshape(end.bounds.count, ahead, snapshots)
            if split:  # cells split: new metadata, the plan made ahead made again
                bounds, snapshots = self._metadata(), {}
                if ahead is not None:
                    ahead, self.planner.replans = None, self.planner.replans + 1
            if due_after(self.densify, stop, self.steps, self.setup.settings.batch_size):
                bounds, snapshots = self._densify(stop), {}
            evaluated = self._evaluate_due(stop, bounds, psnr_steps, psnr_values)
            self.progress.update(stop, f"loss {losses[stop - 1]:.4f}")
            if report:
                self._report(stop, losses, psnr_steps, psnr_values, evaluated)
            if self.checkpoint is not None:
                self._save(start, stop, losses, psnr_steps, psnr_values,
                           resumed.wall_time_s + time.perf_counter() - started)
            start = stop
        if resumed.step >= self.steps:  # resumed at the last step: render the held-out view the PNG shows
            self._evaluate(self.steps, bounds)
        self.planner.close()
        self.record.metrics.processor_seconds += time.process_time() - processor_started
        wall = resumed.wall_time_s + time.perf_counter() - started
        return TrainResult(self.steps, self.shard.num_gaussians, wall, np.array(psnr_steps, np.int64),
                           np.array(psnr_values), losses)

    # --- the phases of a window
    def _metadata(self):
        """Every cell's bounds from their owners' metadata (collective; no losses)."""
        t0 = time.perf_counter()
        meta = self.shard.metadata()
        bounds = exchange_metadata(self.comm, meta, self.shard.owner)
        self.record.metrics.comm_seconds += time.perf_counter() - t0
        self.record.metrics.window_end_bytes += meta.nbytes
        return bounds

    def _plan(self, start: int, stop: int, bounds) -> Planned:
        """Plan batches [start, stop) now, from the current metadata."""
        t0 = time.perf_counter()
        planned = self.planner.plan(start, start, stop, bounds, self.shard.owner)
        self.record.planned(planned.seconds, t0, time.perf_counter(), planned.window)
        return planned

    def _plan_next(self, start: int, stop: int, bounds):
        """Start planning the window after [start, stop) in a thread, when the cells keep their Gaussians
        until then (no densification at ``stop``); returns its future or None."""
        if stop >= self.steps or due_after(self.densify, stop, self.steps, self.setup.settings.batch_size):
            return None
        return self.planner.plan_ahead(start, stop, self.planner.window_end(stop), bounds, self._moved(bounds.count))

    def _moved(self, counts: np.ndarray) -> np.ndarray:
        """[K] int64 the cells' owners after the moves that balance ``counts`` [K] (``rebalance``; the same
        on every rank). A plan made ahead is made for these owners, and the window end before it moves
        the cells to them, so a migration keeps the plan."""
        return rebalance(counts, self.shard.owner, self.comm.size, self.options.max_imbalance)

    def _wait(self, future) -> Planned | None:
        """The plan made ahead (waiting for the thread if it is still planning), or None."""
        if future is None:
            return None
        t0 = time.perf_counter()
        planned = future.result()
        self.record.planned(planned.seconds, t0, time.perf_counter(), planned.window)
        return planned

    def _run_window(self, window: Window, reported: bool = False) -> dict:
        """Run the window's program on this rank; returns its image losses {image: loss} (the program is
        dropped; the packed copies of the cells it stepped stay on the shard, ``Shard.blocks``). ``reported``:
        the dashboard's status follows this window (so its spans are kept)."""
        setup, batch_size = self.setup, self.setup.settings.batch_size
        setup.targets.keep(window_cameras(window, self.comm.rank))  # hold only this window's own images
        batches = range(window.start, window.stop)
        lrs = [setup.settings.lrs(setup.extent, b + 1) for b in batches]
        sh_degrees = [setup.active_sh_degree(b + 1) for b in batches]
        program = TrainingSteps(
            window,
            ImageInputs(setup.scene, setup.targets, self.render, self.ssim_weight, self.densify is not None,
                        sh_degrees, self.culling),
            CellInputs(self.shard, self.densify is not None, lrs, batch_size, setup.sh_degree),
            self.staging)
        self.record.held(self.shard.state_bytes() + cached_bytes(window, self.comm.rank, program.columns))
        called = time.perf_counter()
        mode = "bsp" if self.options.mode == "barrier" else "dataflow"
        trace = self.record.tracing or reported
        result = run_dataflow(self.comm, window.plan, program, mode=mode, trace=trace,
                              send_thread=self.options.send_thread)
        self.record.window_run(result, called, time.perf_counter(), window, program.updated)
        self.window_spans = result.spans
        return program.image_losses

    def _violated(self, bad: int, window: Window) -> None:
        """``bad`` Gaussians left the window's margin: count them and widen the next margins."""
        self.violations += bad
        self.planner.widen()
        self.progress.write(f"warning: {bad} Gaussians left the visibility margin in batches "
                            f"{window.start + 1}-{window.stop}; the next window's margin is "
                            f"{self.planner.safety:g}x")

    def _reshape(self, counts: np.ndarray, ahead: Planned | None, snapshots: dict) -> tuple[bool, dict]:
        """Split the cells past ``options.split_above`` Gaussians and move whole cells between ranks
        (``odin_sched.odin.migration``; collective): to the owners of the plan made ahead, ``ahead``'s
        (decided from the metadata it was made from, ``_moved``), or when there is none or cells split, to
        those ``_moved`` gives now. counts: [K] Gaussians per cell (the metadata); snapshots: {batch:
        ``motion_snapshot``} of the owned rows, which travel with their cells. Returns (whether cells
        split, the snapshots of the rows owned after the moves)."""
        t0, cells = time.perf_counter(), self.shard.num_cells
        if self.options.split_above is not None:
            self.shard = split_cells(self.comm, self.shard, counts, self.options.split_above)
        split = self.shard.num_cells != cells
        owner = ahead.window.owner if ahead is not None and not split else self._moved(np.diff(self.shard.indptr))
        moved = int(np.count_nonzero(owner != self.shard.owner))
        if moved:
            carried = snapshot_columns(snapshots, self.shard.opt.ids.shape[0])
            self.shard, carried = migrate(self.comm, self.shard, owner, carried)
            snapshots = snapshots_of_columns(carried, snapshots, self.shard.opt.device)
            self.migrated += moved
        if moved or split:
            self.record.metrics.comm_seconds += time.perf_counter() - t0
        return split, snapshots

    def _densify(self, stop: int):
        """Densification after batch ``stop`` on each owner's Gaussians (``odin_sched.odin.owner_densify``:
        no parameter crosses ranks; new Gaussians join their parent's cell). Returns every cell's bounds
        after it (collective)."""
        setup = self.setup
        self.shard = densify_owned(self.comm, self.shard, stop, self.steps, setup.settings.batch_size, setup.extent,
                                   self.densify, self.seed)
        self.record.held(self.shard.state_bytes())
        return self._metadata()

    def _evaluate_due(self, stop: int, bounds, psnr_steps: list, psnr_values: list) -> bool:
        """Held-out PSNR after batch ``stop`` when due (collective); returns whether it evaluated."""
        if not (stop % self.eval_every == 0 or stop == self.steps):
            return False
        psnr_steps.append(stop)
        psnr_values.append(self._evaluate(stop, bounds))
        self.progress.write(f"step {stop}: held-out PSNR {psnr_values[-1]:.2f} dB, "
                            f"{self.shard.num_gaussians} Gaussians")
        return True

    def _evaluate(self, stop: int, bounds) -> float:
        """Mean held-out PSNR (dB) in camera order, each rank rendering some views (collective)."""
        setup, scene = self.setup, self.setup.scene
        cams = setup.test_ids
        visible = predict_visible_cells(bounds, scene.viewmats[cams], scene.Ks[cams], scene.width, scene.height,
                                        Margin(0.0, 0.0))
        plan, cells = eval_plan(visible, self.shard.owner, self.comm.size)
        program = EvalViews(cams, cells, self.shard, scene, setup.targets, self.render, setup.active_sh_degree(stop),
                            setup.sh_degree, self.staging, self.culling)
        run_dataflow(self.comm, plan, program, mode="bsp" if self.options.mode == "barrier" else "dataflow",
                     send_thread=self.options.send_thread)
        self.view = program.first_view
        rows = self.comm.allgather_rows(np.array(sorted(program.psnr.items()), np.float64).reshape(-1, 2))
        by_view = dict(zip(rows[:, 0].astype(np.int64), rows[:, 1]))
        return float(np.mean([by_view[t] for t in range(len(cams))]))

    def _report(self, step: int, losses: np.ndarray, psnr_steps: list, psnr_values: list, evaluated: bool) -> None:
        """Write the dashboard's status file after a window (collective: rank 0 gathers every rank's
        counters so far and the window's spans, and writes, with the held-out view it rendered when the
        window evaluated)."""
        table = self.comm.gather_rows(self.record.metrics.as_row()[None, :])
        timeline = window_spans(self.comm, self.window_spans)
        if self.comm.rank == 0:
            ranks = {"fields": list(RANK_FIELDS), "rows": table.tolist(),
                     "timeline": {"kinds": list(SPAN_KINDS), "spans": timeline}}
            view = comparison_writer(self.view, self.setup) if evaluated else None
            self.status.update(step, losses, psnr_steps, psnr_values, self.shard.num_gaussians,
                               time.perf_counter() - self.record.started, force=True, view=view, ranks=ranks)

    def _report_due(self, stop: int) -> bool:
        """Whether the window ending at ``stop`` writes the dashboard's status (and so is traced): at
        evaluation points, at the end, else when the status file is due (rank 0 decides at the window's
        start; collective)."""
        if self.status is None:
            return False
        forced = stop % self.eval_every == 0 or stop == self.steps
        return self.comm.bcast(self.status.due(forced) if self.comm.rank == 0 else None)

    def _save(self, start: int, stop: int, losses: np.ndarray, psnr_steps: list, psnr_values: list,
              wall: float) -> None:
        """Hand the checkpointer the state after batch ``stop`` (at every window end); when a checkpoint is
        due since ``start`` every rank writes its owned rows (collective)."""
        self.checkpoint.save(start, TrainState(stop, self.shard.opt, self.shard.accum, losses, psnr_steps,
                                               psnr_values, wall, self.planner.safety, self.violations),
                             rows=self.shard.owned_ids)


def train_distributed(comm, config: TrainConfig, options: OdinOptions, checkpoint=None) -> TrainResult:
    """Train on every rank of ``comm`` (collective) and write the outputs from rank 0.

    ``config``: the run (see ``TrainConfig``), ``options``: Odin's settings, ``checkpoint``: a
    ``TrainCheckpointer`` or None. With ``config.device='cuda'`` every rank trains on its GPU
    (``render_device``) and its payloads cross ranks through the host (``HostStaging``). Returns the
    TrainResult (the same on every rank). Bad settings or input raise the same InputError on every rank.
    """
    extra_outputs = (("timeline", options.timeline), ("schedule_out", options.schedule_out))
    setup, render = set_up(config, checkpoint, comm, extra_outputs,
                           check=lambda setup: check_options(options, comm.size, setup.initial["means"].shape[0],
                                                             thread_multiple(comm)))
    with setup.scene.images:  # the scene file closes however training ends
        return train_from_setup(comm, setup, render, config, options, checkpoint)


def train_from_setup(comm, setup: TrainingSetup, render, config: TrainConfig, options: OdinOptions,
                     checkpoint=None) -> TrainResult:
    """``train_distributed`` after its set-up: ``set_up``'s (setup, render) for ``config`` on this rank."""
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
    table = comm.gather_rows(trainer.record.metrics.as_row()[None, :])  # the totals (peak RSS is taken last)
    spans = comm.allgather(trainer.record.metrics.spans) if options.timeline is not None else None
    labels = comm.allgather(trainer.record.labels) if options.timeline is not None else None
    # the payloads always go through host buffers (the transport sends NumPy arrays): not CUDA-aware
    staged = {"cuda_aware_mpi": False, "bytes_staged": int(sum(comm.allgather(staging.bytes_staged)))} \
        if config.device == "cuda" else {}
    attrs, planner = None, trainer.planner
    if comm.rank == 0:
        totals = dict(zip(RANK_FIELDS, table.sum(axis=0)))
        attrs = {"compute_seconds": totals["compute_seconds"], "comm_seconds": totals["comm_seconds"],
                 "wait_seconds": totals["wait_seconds"], "visibility_violations": trainer.violations,
                 "max_staleness": options.staleness, "stale_reads": planner.stale_reads,
                 "max_staleness_seen": planner.max_staleness_seen, "stale_impact": options.stale_impact,
                 "cells": trainer.num_cells, "window": options.window, "replans": planner.replans,
                 "cells_at_end": trainer.shard.num_cells, "cells_migrated": trainer.migrated,
                 "dependency_edges": planner.dependency_edges,
                 "per_rank_fields": list(RANK_FIELDS), **staged}

    def per_rank() -> dict:
        """/metrics/per_rank with each process's peak resident set taken when its part of the outputs is
        done (rank 0's: every row and the PNG written; collective)."""
        trainer.record.finish()
        return {"per_rank": comm.gather_rows(trainer.record.metrics.as_row()[None, :])}

    # every owner's rows, streamed to rank 0 in bounded pieces; the view was rendered by the last evaluation
    written = write_outputs(comm, setup, params_of(trainer.shard.opt), trainer.shard.opt.ids, result, config,
                            options.mode, comm.size, trainer.view, attrs, late_metrics=per_rank)
    if comm.rank == 0:
        if options.timeline is not None:
            write_chrome_trace(options.timeline, spans, {k: v for part in labels for k, v in part.items()})
        if options.schedule_out is not None:
            write_schedule(options.schedule_out, planner.first.window.steps, planner.first.schedule)
    result.per_rank = comm.bcast(written["per_rank"] if comm.rank == 0 else None, idle=True)
    result.visibility_violations = trainer.violations
    comm.barrier()
    return result
