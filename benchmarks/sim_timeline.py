"""Why odin waits: a per-vertex timeline of one simulated window and where its waiting comes from.

Simulates odin (``pregel simulate``'s code, planning free) on a generated ``city`` (default 1,000,000
Gaussians, 2,000 cameras at 256 x 192, ``h200-ib``, window 10, batch = GPUs) with the first window
traced, and splits every hop of the step graph's remote chain image -> cell version -> image into
  * gradient transit: an image's gradient message from its end to its arrival at the cell's owner
    (latency, bytes / bandwidth and the queue of the two links);
  * owner delay: from the last gradient's arrival to the version's start (the owner was busy with an
    image: a rank fires one vertex at a time, and serves cell versions only at an image's serving point,
    between its forward and backward pass);
  * version transit: the version's broadcast from its end to each reader's arrival.
It prints the window's makespan against its bounds (the heaviest path with messages free, the ceiling's,
and the busiest rank's work), the waiting per rank, those delays, and the waits before images by the
input that came last. Run from the repository root:
``python benchmarks/sim_timeline.py [--gaussians G --cameras C --profile NAME] [P ...]``.
"""
import dataclasses

import numpy as np

from odin_sched.odin.depgraph import critical_path
from odin_sched.sim.costmodel import load_profile
from odin_sched.sim.simulate import simulate
from sim_breakdown import city_scene, city_scene_parser  # benchmarks/, the script's own folder

WINDOW = 10


def timeline(run) -> dict:
    """The first window's delays of a traced ``SimResult`` (odin): arrays of seconds, see the module."""
    win, steps = run.traced, run.traced.steps
    num = steps.num_vertices
    start, end, cost = np.full(num, np.nan), np.full(num, np.nan), np.zeros(num)
    for spans in run.spans:
        for kind, t0, t1, v in spans:
            if kind == "compute":  # an image computes in two spans, around its serving point
                start[v], end[v] = np.fmin(start[v], t0), t1
                cost[v] += t1 - t0
    rank = win.plan.rank
    arrived = {(int(r), int(u)): t for r, u, t in run.arrivals}
    g = win.plan.graph
    src = np.repeat(np.arange(g.num_nodes), np.diff(g.indptr))
    dst = np.asarray(g.indices)
    # when each edge's input was there for its destination: at once on one rank, else the message's arrival
    there = np.array([end[u] if rank[u] == rank[v] else arrived.get((int(rank[v]), int(u)), np.nan)
                      for u, v in zip(src.tolist(), dst.tolist())])  # a diagnostic, not a hot path
    ready = np.zeros(num)
    np.maximum.at(ready, dst, np.nan_to_num(there))
    versions = np.flatnonzero(~steps.is_image(np.arange(num)) & (win.plan.phase >= 0))
    remote = rank[src] != rank[dst]
    from_image = steps.is_image(src)
    return {"makespan": float(np.nanmax(end)), "path": critical_path(steps, cost),
            "busiest": float(np.bincount(rank, cost).max()),
            "wait": np.array([sum(t1 - t0 for kind, t0, t1, _ in spans if kind == "wait") for spans in run.spans]),
            "owner_delay": start[versions] - ready[versions],
            "gradient_transit": (there - end[src])[remote & from_image],
            "version_transit": (there - end[src])[remote & ~from_image & ~np.isnan(there)],
            "image_wait_remote": _late_inputs(start, end, there, src, dst, rank, steps)}


def _late_inputs(start, end, there, src, dst, rank, steps) -> tuple:
    """(seconds images waited for an input from another rank, for one from their own rank): the wait of
    an image is from its rank's previous end to its start, charged to the input that came last."""
    last = np.full(len(start), -1)
    order = np.argsort(np.nan_to_num(there), kind="stable")
    last[dst[order]] = src[order]  # the latest input of each vertex
    remote = local = 0.0
    for r in np.unique(rank).tolist():
        mine = np.flatnonzero(rank == r)
        busy = 0.0
        for v in mine[np.argsort(start[mine])].tolist():  # one rank's vertices in firing order (a diagnostic)
            gap = start[v] - busy
            if gap > 1e-9 and v < steps.num_images and last[v] >= 0:
                if rank[last[v]] != r:
                    remote += gap
                else:
                    local += gap
            busy = max(busy, end[v])
    return remote, local


def main(gpus, gaussians, cameras, width, height, name):
    profile = dataclasses.replace(load_profile(name, gaussians), plan_by_gpus=())
    scene = city_scene(gaussians, cameras, width, height)
    print(f"city, {gaussians:,} Gaussians, {cameras:,} cameras at {width} x {height}, window {WINDOW}, batch = GPUs, "
          f"{name}, the first window traced (ms)")
    print("GPUs | makespan | heaviest path (messages free) | busiest rank's work | wait per rank mean / max | "
          "gradient transit mean / p90 | owner delay mean / p90 | version transit mean / p90 | "
          "image waits on remote / own inputs (GPU-ms)")
    for p in gpus:
        t = timeline(simulate(scene, profile, "odin", p, WINDOW, p, window=WINDOW, trace=True))

        def ms(x):
            return f"{1e3 * np.mean(x):.2f} / {1e3 * np.percentile(x, 90):.2f}" if len(x) else "-"

        print(f"{p:>4} | {1e3 * t['makespan']:.1f} | {1e3 * t['path']:.1f} | {1e3 * t['busiest']:.1f} | "
              f"{1e3 * t['wait'].mean():.1f} / {1e3 * t['wait'].max():.1f} | {ms(t['gradient_transit'])} | "
              f"{ms(t['owner_delay'])} | {ms(t['version_transit'])} | "
              f"{1e3 * t['image_wait_remote'][0]:.0f} / {1e3 * t['image_wait_remote'][1]:.0f}", flush=True)


if __name__ == "__main__":
    a = city_scene_parser(__doc__.split("\n")[0]).parse_args()
    main(a.gpus, a.gaussians, a.cameras, a.width, a.height, a.profile)
