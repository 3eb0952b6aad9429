"""Run the dataflow test programs on the DAGs of FOLDER/dags.npz at this job's size, in every mode.

Usage: mpiexec -n P python -m mpi4py tests/mpi_scripts/run_dataflow.py FOLDER
       mpiexec -n 2 python -m mpi4py tests/mpi_scripts/run_dataflow.py FOLDER fail|fail-thread

Writes FOLDER/dataflow_P.npz on rank 0: for each DAG and mode the values, inputs and fire times of
every vertex and each rank's statistics, and FOLDER/trace_P_MODE.json (Chrome traces of the random
DAG). Modes: dataflow, bsp, and dataflow-thread (dataflow with ``send_thread``). At P = 2 also the "hold"
DAG in dataflow mode with each of HOLD_SHARES. ``fail``: vertex 2 on rank 1 raises in ``fire`` while rank 0
waits for its message (``fail-thread``: with ``send_thread``).
"""

import math
import os
import sys
import time

import numpy as np

from pregel.comm import Comm
from pregel.dataflow import DataflowPlan, DataflowProgram, run_dataflow, write_chrome_trace
from pregel.graph_io import GraphData

#: seconds that vertex 0 (on rank 0) sleeps in the "slow" case: long, so that a loaded machine still
#: tells a rank that waits for it from one that does not
SLOW_SECONDS = 2.0
#: the "hold" DAG (P = 2): rank 1 fires vertex 2 (sequence 0; it sleeps HOLD_FIRE_SECONDS), then holds vertex 3
#: (sequence 2) back while vertex 1 (sequence 1) waits for rank 0's vertex 0, which sleeps SLOW_SECONDS; each
#: of HOLD_SHARES lets vertex 3 go after that share of HOLD_FIRE_SECONDS, or never (inf)
HOLD_FIRE_SECONDS, HOLD_SHARES = 0.2, (math.inf, 0.0, 1.0, 20.0)
STATS = ("fired", "compute_seconds", "comm_seconds", "wait_seconds", "messages_sent", "bytes_sent",
         "messages_received", "bytes_received", "elapsed_seconds", "let_go")


def coefficients(u: int, k: int) -> np.ndarray:
    return ((u * 7 + np.arange(k) * 3) % 11 - 5) / 10


class Values(DataflowProgram):
    """value[v] = tanh(weight[v] + 0.3 * sum over inputs of sum_i payload[i] * (i + 1)), the inputs
    in ascending source order; a broadcasting v (v % 3 == 0) sends value * coefficients(v, v % 4),
    a per-edge v sends value * scale(v, d) * coefficients(v, (v + 2d) % 5) to each d."""

    def __init__(self, slow: dict | None = None, fail: int = -1):
        self.slow, self.fail = slow or {}, fail
        self.values, self.inputs, self.times = {}, {}, {}

    def payload_size(self, src, dst):
        return np.where(src % 3 == 0, src % 4, (src + 2 * dst) % 5)

    def broadcasts(self, vertices):
        return vertices % 3 == 0

    def fire(self, ctx, vertex, inputs):
        start = time.monotonic()
        if vertex == self.fail:
            raise RuntimeError(f"deliberate failure in fire of vertex {vertex} on rank {ctx.rank}")
        time.sleep(self.slow.get(vertex, 0.0))
        acc = ((vertex * 13) % 17 - 8) / 8
        for u in sorted(inputs):
            p = inputs[u].astype(np.float64)
            acc += 0.3 * (p * (np.arange(len(p)) + 1)).sum()
        x = np.tanh(acc)
        self.values[vertex] = x
        self.inputs[vertex] = [(u, len(p)) for u, p in sorted(inputs.items())]
        graph = ctx.plan.graph
        outs = graph.indices[graph.indptr[vertex]:graph.indptr[vertex + 1]].tolist()
        self.times[vertex] = (start, time.monotonic(), ctx.rank, len(self.times))
        if not outs:
            return None
        if vertex % 3 == 0:
            return (x * coefficients(vertex, vertex % 4)).astype(np.float32)
        return {d: (x * ((vertex + 2 * d) % 5 + 1) / 5 * coefficients(vertex, (vertex + 2 * d) % 5))
                .astype(np.float32) for d in outs}


def plan_of(dags, name: str, size: int) -> DataflowPlan:
    graph = GraphData(dags[f"{name}/indptr"], dags[f"{name}/indices"])
    rank = dags[f"{name}/rank_{size}"] if f"{name}/rank_{size}" in dags else dags[f"{name}/rank"] % size
    return DataflowPlan(graph, rank.astype(np.int64), dags[f"{name}/priority"], dags[f"{name}/phase"])


def run_case(comm, plan, program, mode, trace=False):
    """Run ``program`` in ``mode`` (dataflow-thread: dataflow with its sends posted by a thread of their own)."""
    result = run_dataflow(comm, plan, program, mode=mode.split("-")[0], trace=trace,
                          send_thread=mode == "dataflow-thread")
    everyone = comm.allgather((program.values, program.inputs, program.times, result))
    if comm.rank != 0:
        return None, everyone
    n = plan.graph.num_nodes
    values, times = np.full(n, np.nan), np.full((n, 4), np.nan)
    inputs = np.empty(n, dtype=object)
    for vals, ins, tims, _ in everyone:
        for v, x in vals.items():
            values[v], inputs[v], times[v] = x, ins[v], tims[v]
    stats = {k: np.array([getattr(r, k) for *_, r in everyone], dtype=float) for k in STATS}
    return (values, inputs, times, stats), everyone


def main(folder, fail=None):
    comm = Comm()
    dags = dict(np.load(os.path.join(folder, "dags.npz")))
    if fail:
        run_dataflow(comm, plan_of(dags, "slow", comm.size), Values(fail=2), send_thread=fail == "fail-thread")
        return
    out = {}
    cases = ["random", "wide", "priority"] + (["slow"] if comm.size == 2 else [])
    for name in cases:
        plan = plan_of(dags, name, comm.size)
        for mode in ("dataflow", "bsp", "dataflow-thread"):
            slow = {0: SLOW_SECONDS} if name == "slow" else None
            gathered, everyone = run_case(comm, plan, Values(slow), mode, trace=name == "random")
            if comm.rank != 0:
                continue
            values, inputs, times, stats = gathered
            out[f"{name}/{mode}/values"] = values
            out[f"{name}/{mode}/inputs"] = inputs
            out[f"{name}/{mode}/times"] = times
            for key, column in stats.items():
                out[f"{name}/{mode}/{key}"] = column
            if name == "random":
                labels = {v: f"v{v}" for v in range(0, plan.graph.num_nodes, 7)}
                write_chrome_trace(os.path.join(folder, f"trace_{comm.size}_{mode}.json"),
                                   [r.spans for *_, r in everyone], labels)
    for share in HOLD_SHARES if comm.size == 2 else ():
        graph = GraphData(np.array([0, 1, 1, 1, 1]), np.array([1]))
        plan = DataflowPlan(graph, np.array([0, 1, 1, 1]), np.array([0.0, 1.0, 3.0, 2.0]), np.array([0, 1, 0, 0]),
                            np.array([-1, 1, 0, 2]), 0, share)
        gathered, _ = run_case(comm, plan, Values({0: SLOW_SECONDS, 2: HOLD_FIRE_SECONDS}), "dataflow")
        if comm.rank == 0:
            out[f"hold/{share}/times"] = gathered[2]  # [vertex, (start, end, rank, index of the fire there)]
            out[f"hold/{share}/let_go"] = gathered[3]["let_go"]  # per rank
    if comm.rank == 0:
        np.savez(os.path.join(folder, f"dataflow_{comm.size}.npz"), **out)


if __name__ == "__main__":
    main(sys.argv[1], fail=sys.argv[2] if len(sys.argv) > 2 else None)
