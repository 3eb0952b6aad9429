"""Where the simulated GPU time of odin and barrier goes, with the planning charged as measured and free.

Issue 20's check: a generated ``city`` (default 1,000,000 Gaussians, 2,000 cameras at 256 x 192), 40
steps, window 10, batch = GPUs, ``h200-ib``, 8 to 128 GPUs. Each mode is simulated twice: with the
profile as ``pregel simulate`` loads it (planning per window as measured by ``benchmarks/plan_time.py``
for this size, only what outlasts the previous window waiting) and with planning free, so that the
window runs alone show what the scheduling does. Per run: steps/s, the ceiling, odin / ceiling, the
bound that keeps the plan's assignment (``SimResult.assigned_ceiling_steps_per_second``: the busiest rank's
time and the heaviest path with each message between ranks charged its transfer) and odin / it, the
GPU-seconds computing, communicating and waiting summed over GPUs, of the waiting those spent on
exposed planning, and two hidden fractions: ``hidden`` = 1 - wait_odin / wait_barrier (the
simulator's ``/hidden_fraction``) and ``exposed`` = 1 - (comm + wait)_odin / (comm + wait)_barrier
(communication and waiting that odin does not expose; planning left out of both), and the cells that
migrated between owners at window ends (the simulator's densification model and the runtime's
``rebalance``, ``odin_sched.sim.window_end.densified_counts``), their bytes and seconds per window. And what
the exposed target asks: the odin steps/s at which ``exposed`` would reach ``TARGET`` (the same compute
and barrier; charged, plus the planning that would then outlast the shorter windows,
``bounds.with_planning``), and the ``exposed`` that a run at the ceiling and at the assigned bound would
have (``bounds.hidden_at``, with odin's planning wait).

With ``--what-if``, odin alone (planning free) as simulated, with the links free, and with the serving
point at an image's end instead (``what_if``). With ``--bound-terms``, which term of the assigned bound binds
in odin's first window (``bound_terms``: the busiest rank's work and its senders' time, the messages each
rank sends, the heaviest path with messages charged and free). ``--seed`` changes the training order and the cost noise
(``simulate``'s seed): the figures move with it (README, issue 20's check). ``--host-sends``: every run with
the sender's time of the messages on a host thread beside the GPU (``CostProfile.host_sends``; the runtime's
``--send-thread``). Run from the repository root: ``python benchmarks/sim_breakdown.py [--gaussians G
--cameras C --profile NAME] [--seed S] [--host-sends] [--what-if | --bound-terms] [P ...]``.
"""
import argparse
import dataclasses
import os

import numpy as np

from odin_sched.odin.depgraph import critical_path
from odin_sched.odin.program import StepMessages
from odin_sched.scenes.sh import DEFAULT_SH_DEGREE
from odin_sched.sim.bounds import busiest_rank, hidden_at, seconds_for_hidden, transfer_path, with_planning
from odin_sched.sim.costmodel import load_profile
from odin_sched.sim.grendel import hidden_vs_grendel
from odin_sched.sim.results import hidden_fraction
from odin_sched.sim.scene import metadata_scene, standing_for
from odin_sched.sim.simulate import scaling, simulate
from odin_sched.sim.window_run import vertex_costs
from odin_sched.training.step import param_columns
from pregel.dataflow import Routes

STEPS, WINDOW = 40, 10
TARGET = 0.82  # issue 20's exposed hidden fraction


def report(label: str, gpus: list, results: dict, planning: dict, profile) -> None:
    print(f"{label}: GPUs | odin st/s | barrier st/s | ceiling st/s | odin / ceiling | assigned bound st/s | "
          "odin / assigned bound | odin / barrier | "
          "compute GPU-s | comm odin / barrier | wait odin / barrier | of it planning | hidden | exposed | "
          "cells moved | migration MB / window | migration ms / window (share of odin's run) | "
          f"odin st/s for exposed {TARGET} | exposed at ceiling | exposed at assigned bound")
    windows = -(-STEPS // WINDOW)
    for i, p in enumerate(gpus):
        o, b = results["odin"][i], results["barrier"][i]
        plan_o, plan_b = planning["odin"][i], planning["barrier"][i]
        exposed = hidden_vs_grendel(o.comm, o.wait - plan_o / p, b.comm, b.wait - plan_b / p)
        compute, barrier_exposed = o.compute.sum(), b.comm.sum() + b.wait.sum() - plan_b
        needed = with_planning(seconds_for_hidden(TARGET, p, compute, barrier_exposed), windows,
                               profile.sharded_planning_seconds(p), profile.warmup_seconds * profile.slowdown(p))
        at = [hidden_at(s, p, compute, plan_o, barrier_exposed) for s in (o.bound_seconds, o.assigned_bound_seconds)]
        print(f"{p:>4} | {o.steps_per_second:8.2f} | {b.steps_per_second:8.2f} | {o.ceiling_steps_per_second:8.2f} "
              f"| {o.steps_per_second / o.ceiling_steps_per_second:.3f} "
              f"| {o.assigned_ceiling_steps_per_second:8.2f} "
              f"| {o.steps_per_second / o.assigned_ceiling_steps_per_second:.3f} "
              f"| {o.steps_per_second / b.steps_per_second:.3f} "
              f"| {o.compute.sum():7.2f} | {o.comm.sum():.2f} / {b.comm.sum():.2f} "
              f"| {o.wait.sum():.2f} / {b.wait.sum():.2f} | {plan_o:.2f} / {plan_b:.2f} "
              f"| {hidden_fraction(o, b):+.3f} | {exposed:+.3f} | {o.migrated_cells} "
              f"| {o.migration_bytes / 1e6 / windows:.1f} | {1e3 * o.migration_seconds / windows:.2f} "
              f"({o.migration_seconds / o.seconds:.3f}) | {STEPS / needed:8.2f} | {at[0]:+.3f} | {at[1]:+.3f}",
              flush=True)


def main(gpus, gaussians, cameras, width, height, name, seed=0, host_sends=False):
    profile = load_profile(name, gaussians, host_sends)
    scene = city_scene(gaussians, cameras, width, height)
    sends = " with host sends" if host_sends else ""
    print(f"city, {gaussians:,} Gaussians, {cameras:,} cameras at {width} x {height}, {STEPS} steps, window "
          f"{WINDOW}, batch = GPUs, {name}{sends}, seed {seed}; planning per window {dict(profile.plan_by_gpus)} s "
          f"(load average {os.getloadavg()[0]:.1f})")
    free = dataclasses.replace(profile, plan_by_gpus=())
    runs = {label: scaling(scene, prof, gpus, STEPS, modes=("odin", "barrier"), windows=(WINDOW,), seed=seed)
            for label, prof in (("planning charged", profile), ("planning free", free))}
    windows = -(-STEPS // WINDOW)
    # the windows' runs do not depend on the planning charge: the difference in waiting is the planning
    waited = {m: [c.wait.sum() - f.wait.sum() for c, f in zip(runs["planning charged"][m], runs["planning free"][m])]
              for m in ("odin", "barrier")}
    report("planning charged", gpus, runs["planning charged"], waited, profile)
    report("planning free", gpus, runs["planning free"], {m: [0.0] * len(gpus) for m in waited}, free)
    print(f"({windows} windows; the first is planned before training starts)")


def what_if(gpus, gaussians, cameras, width, height, name, seed=0, host_sends=False):
    """Odin (planning free) with what limits it taken away one at a time: as simulated, with the links
    free (no latency, bandwidth or sender overhead), and with the serving point at an image's end
    (``forward_share`` 1: cell versions wait for the whole image)."""
    scene = city_scene(gaussians, cameras, width, height)
    base = dataclasses.replace(load_profile(name, gaussians, host_sends), plan_by_gpus=())
    variants = {"as simulated": base,
                "links free": dataclasses.replace(base, latency=0.0, bandwidth=1e18, node_latency=0.0,
                                                  node_bandwidth=1e18, overhead=0.0),
                "serving at image end": dataclasses.replace(base, forward_share=1.0)}
    print("what if (planning free): GPUs | " + " | ".join(f"{v} st/s, / ceiling, / assigned bound" for v in variants))
    for p in gpus:
        runs = [simulate(scene, prof, "odin", p, STEPS, p, window=WINDOW, seed=seed) for prof in variants.values()]
        print(f"{p:>4} | " + " | ".join(f"{r.steps_per_second:.1f}, {r.steps_per_second / r.ceiling_steps_per_second:.3f}, "
                                        f"{r.steps_per_second / r.assigned_ceiling_steps_per_second:.3f}"
                                        for r in runs), flush=True)


def bound_terms(gpus, gaussians, cameras, width, height, name, seed=0, host_sends=False):
    """Which term of the assigned bound (``bounds.assigned_bound``) binds in odin's first window (planning
    free), per GPU count, in milliseconds: the work over the GPUs (the ceiling's term), the busiest rank's
    work, the messages a rank sends (mean and most; an image's gradients go one to each other owner of its
    cells, a cell version's parameters one to each other rank that reads it), the senders' time (mean,
    and the busiest rank's: work plus its messages, ``busiest_rank``) and the heaviest path with each
    message charged its transfer (``transfer_path``) and with messages free."""
    scene = city_scene(gaussians, cameras, width, height)
    profile = dataclasses.replace(load_profile(name, gaussians, host_sends), plan_by_gpus=())
    print("bound terms, first window (ms; planning free): GPUs | work / GPUs | busiest rank's work | messages a rank "
          "sends: gradients mean / most, versions mean / most | senders' time mean | busiest rank (work + sends) "
          "| path charged | path free | binds")
    for p in gpus:
        win = simulate(scene, profile, "odin", p, STEPS, p, window=WINDOW, seed=seed, trace=True).traced
        cost = vertex_costs(win, scene.views, profile, np.random.default_rng([seed, 0]), profile.step_seconds)
        routes = Routes(win.plan, StepMessages(win.steps, win.count, param_columns(DEFAULT_SH_DEGREE)), p)
        sender = routes.group_source_rank[routes.remote]
        image = win.steps.is_image(routes.group_src[routes.remote])
        grads, versions = np.bincount(sender[image], minlength=p), np.bincount(sender[~image], minlength=p)
        busy = busiest_rank(win.plan, routes, cost, profile, p)
        path = transfer_path(win.steps, win.plan, routes, cost, profile, p)
        ms = [1e3 * x for x in (cost.sum() / p, np.bincount(win.plan.rank, cost, p).max(),
                                profile.overhead * (grads + versions).mean(), busy, path, critical_path(win.steps, cost))]
        print(f"{p:>4} | {ms[0]:.1f} | {ms[1]:.1f} | {grads.mean():.0f} / {grads.max()}, {versions.mean():.0f} / "
              f"{versions.max()} | {ms[2]:.2f} | {ms[3]:.1f} | {ms[4]:.1f} | {ms[5]:.1f} | "
              f"{'busiest rank' if busy >= path else 'path'}", flush=True)


def city_scene_parser(description: str) -> argparse.ArgumentParser:
    """The command line of the 1M-city simulator benchmarks: GPU counts, scene size, profile."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("gpus", type=int, nargs="*", default=[8, 16, 32, 64, 128])
    parser.add_argument("--gaussians", type=int, default=1_000_000)
    parser.add_argument("--cameras", type=int, default=2000)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--height", type=int, default=192)
    parser.add_argument("--profile", default="h200-ib")
    return parser


def city_scene(gaussians: int, cameras: int, width: int, height: int):
    """The generated aerial city these benchmarks simulate (metadata only, standing for ``gaussians``)."""
    return standing_for(metadata_scene("city", gaussians, cameras, width, height, 0), gaussians)


if __name__ == "__main__":
    parser = city_scene_parser(__doc__.split("\n")[0])
    instead = parser.add_mutually_exclusive_group()
    instead.add_argument("--what-if", action="store_true", help="odin with the links free and with the serving "
                         "point at an image's end, instead of the breakdown")
    parser.add_argument("--seed", type=int, default=0, help="the training order's and the cost noise's seed "
                        "(simulate's; the README's tables: 0)")
    instead.add_argument("--bound-terms", action="store_true", help="which term of the assigned bound binds in "
                         "odin's first window, instead of the breakdown")
    parser.add_argument("--host-sends", action="store_true", help="a what-if: the sender's time of the messages "
                        "paid by a host thread beside the GPU (CostProfile.host_sends)")
    a = parser.parse_args()
    (what_if if a.what_if else bound_terms if a.bound_terms else main)(a.gpus, a.gaussians, a.cameras, a.width,
                                                                       a.height, a.profile, a.seed, a.host_sends)
