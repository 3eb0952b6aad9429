"""A lower bound on a planned window's run that keeps the plan's assignment: what no schedule of the window's
steps, with each vertex on the rank the plan gives it and each message as the runtime sends it, can beat.

The simulator's ceiling (``SimResult.ceiling_steps_per_second``) takes per window the larger of the work over
the processors and the heaviest path with messages free. With the assignment fixed two more things hold for
every schedule: a rank runs its own vertices one after another (and pays the sender's time of its messages),
and an edge between two ranks cannot be crossed faster than its message's transfer: the sender's time for
one message (the runtime sends each of a vertex's messages once its own sender's time is paid, so the
first to go waits for no other), then the link's latency and the message's bytes over its bandwidth (no
queueing).
``assigned_bound`` is the larger of the busiest rank's time and the heaviest path with those edges charged.
"""
import numpy as np

from pregel.dataflow import Routes


def longest_path(cost: np.ndarray, src: np.ndarray, dst: np.ndarray, weight: np.ndarray, phase: np.ndarray) -> float:
    """The heaviest path of a DAG whose every edge goes to a later phase: the sum of its vertices' ``cost``
    [N] and its edges' ``weight`` [E] (edges ``src`` [E] -> ``dst`` [E]; ``phase`` [N] int). A dynamic
    program over the phases, vectorised per phase. 0.0 for no vertices."""
    cost = np.asarray(cost, np.float64)
    src, dst, phase = np.asarray(src, np.int64), np.asarray(dst, np.int64), np.asarray(phase, np.int64)
    if np.any(phase[src] >= phase[dst]):
        raise ValueError("longest_path: an edge does not go to a later phase")
    order = np.argsort(phase[src], kind="stable")
    src, dst, weight = src[order], dst[order], np.asarray(weight, np.float64)[order]
    finish = cost.copy()  # heaviest path ending at each vertex, its own cost included
    reach = np.zeros(len(cost))  # heaviest path into each vertex, edges included
    bounds = np.flatnonzero(np.diff(phase[src], prepend=-np.inf, append=np.inf) != 0)
    for lo, hi in zip(bounds[:-1], bounds[1:]):  # edges leaving one phase: their sources are final
        np.maximum.at(reach, dst[lo:hi], finish[src[lo:hi]] + weight[lo:hi])
        done = np.unique(dst[lo:hi])
        finish[done] = cost[done] + reach[done]
    return float(finish.max(initial=0.0))


def message_seconds(routes: Routes, profile, group: np.ndarray) -> np.ndarray:
    """[m] least seconds from a vertex's end to the arrival of its messages ``group`` [m] (remote groups of
    ``routes``): the sender's time for one message (``profile.overhead``: each message leaves once its own
    is paid, as the simulator and the runtime send, ``Firing.route``; sent first, it waits for no other),
    the link's latency and the message's float32 bytes over its bandwidth."""
    latency, bandwidth = profile.link(routes.group_source_rank[group], routes.group_rank[group])
    return profile.overhead + latency + 4.0 * routes.group_size[group] / np.asarray(bandwidth, np.float64)


def busiest_rank(plan, routes: Routes, cost: np.ndarray, profile, gpus: int) -> float:
    """Seconds of the busiest of ``gpus`` ranks in a planned window: the ``cost`` [N] of the vertices the
    plan (``DataflowPlan``, rank [N]) puts on it plus ``profile.overhead`` per message it sends
    (``routes``' remote groups); with ``profile.host_sends`` the larger of the two (the host pays the
    sender's time beside the GPU)."""
    sent = profile.overhead * np.bincount(routes.group_source_rank[routes.remote], minlength=gpus)
    work = np.bincount(plan.rank, cost, gpus)
    return float((np.maximum(work, sent) if profile.host_sends else work + sent).max(initial=0.0))


def transfer_path(steps, plan, routes: Routes, cost: np.ndarray, profile, gpus: int) -> float:
    """The heaviest path of a planned window's step graph ``steps`` (its dependencies only, not the plan's
    same-rank ordering edges; the initial versions' edges only where the plan keeps them) with vertex
    ``cost`` [N] and each edge between two of the ``gpus`` ranks (plan.rank [N]) charged
    ``message_seconds`` of the message (``routes``' group) that carries it."""
    rank, g = plan.rank, steps.graph
    src = np.repeat(np.arange(g.num_nodes, dtype=np.int64), np.diff(g.indptr))
    dst = np.asarray(g.indices, np.int64)
    carried = np.zeros(g.num_nodes, bool)  # the plan's sources: vertices with out-edges in its graph
    carried[routes.group_src] = True
    keep = carried[src]
    src, dst = src[keep], dst[keep]
    weight = np.zeros(len(src))
    remote = rank[src] != rank[dst]
    keys = routes.group_src * gpus + routes.group_rank  # ascending: groups are by (source, rank)
    group = np.searchsorted(keys, src[remote] * gpus + rank[dst[remote]])
    weight[remote] = message_seconds(routes, profile, group)
    return longest_path(cost, src, dst, weight, plan.phase)


def assigned_bound(steps, plan, routes: Routes, cost: np.ndarray, profile, gpus: int) -> float:
    """Seconds no schedule of a planned window with its assignment can beat: the larger of
    ``busiest_rank`` and ``transfer_path`` (same arguments; ``cost`` [N] seconds per vertex)."""
    return max(busiest_rank(plan, routes, cost, profile, gpus), transfer_path(steps, plan, routes, cost, profile, gpus))


def hidden_at(seconds: float, gpus: int, compute: float, planning: float, baseline_exposed: float) -> float:
    """The exposed hidden fraction (1 - odin's communication and waiting / the baseline's
    ``baseline_exposed``, GPU-seconds, planning left out of both; the baseline is barrier or Grendel) of a
    run of ``seconds`` on ``gpus`` GPUs that computes ``compute`` GPU-seconds and waits ``planning``
    GPU-seconds on exposed planning: every GPU-second of the run not computing or planning is
    communication or waiting. At a bound's seconds, the most any schedule that long could hide."""
    return 1.0 - (gpus * seconds - compute - planning) / baseline_exposed


def seconds_for_hidden(hidden: float, gpus: int, compute: float, barrier_exposed: float) -> float:
    """The longest run (seconds, planning free) whose exposed hidden fraction is at least ``hidden``
    (``hidden_at`` solved for its seconds, planning 0)."""
    return (compute + (1.0 - hidden) * barrier_exposed) / gpus


def with_planning(seconds: float, windows: int, planning: float, warmup: float) -> float:
    """A planning-free run of ``seconds`` (``warmup`` of it once at the start, the rest in ``windows``
    equal windows) with ``planning`` seconds per window planned while the previous window runs, the
    first before training starts, as ``simulate`` charges it: each later window waits for what of its
    planning outlasts the window before."""
    window = (seconds - warmup) / windows
    return seconds + (windows - 1) * max(0.0, planning - window)
