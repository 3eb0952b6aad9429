"""The superstep exchange between ranks on one machine: seconds and GB/s of a GNN layer's messages.

Under ``mpiexec -n P``: loads a graph file (hub strategies as ``pregel infer`` uses them), then
times, after a barrier, ``pregel.exchange.exchange`` of every owned vertex's row of ``--width``
float32 values (a GNN layer's exchange: each row goes once to every rank that holds it as a ghost),
and a bare ``Alltoallv`` of the same byte counts between preallocated buffers (what MPI itself
reaches). Best of ``--repeat``. GB/s counts the bytes a rank sends plus those it receives, per
second of the slowest rank. Rank 0 prints one line per measurement and a closing summary.

    mpiexec -n 2 python benchmarks/exchange.py g.h5 [--width 64] [--repeat 5]
"""

import argparse
import os
import time

for _var in ("OMP_NUM_THREADS", "NUMBA_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[_var] = "1"

import numpy as np  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("graph")
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    from pregel.comm import Comm
    from pregel.dgraph import load_graph
    from pregel.exchange import Outgoing, exchange
    from pregel.memory import keep_freed_memory

    keep_freed_memory()  # as the pregel command does
    comm = Comm()
    graph = load_graph(comm, args.graph, features=False)
    rows = np.random.default_rng(comm.rank).random((graph.num_local, args.width), dtype=np.float32)
    out = Outgoing(rows, None, np.zeros(0, np.int64), np.zeros((0, args.width), np.float32), None)
    timings = {"exchange": [], "bare Alltoallv": []}
    moved = 0
    for _ in range(args.repeat):
        comm.barrier()
        started = time.perf_counter()
        incoming = exchange(graph, out, with_counts=False)
        timings["exchange"].append(max(comm.allgather(time.perf_counter() - started)))
        moved = incoming.bytes_sent + incoming.bytes_received
        send_bytes = graph.send_counts * args.width * 4
        recv_bytes = graph.ghost_counts * args.width * 4
        send, received = np.empty(int(send_bytes.sum()), np.uint8), np.empty(int(recv_bytes.sum()), np.uint8)
        send[:] = 1
        received[:] = 0
        comm.barrier()
        started = time.perf_counter()
        comm.alltoallv_bytes(send, send_bytes, received, recv_bytes)
        timings["bare Alltoallv"].append(max(comm.allgather(time.perf_counter() - started)))
    moved_all = comm.allgather(moved)
    if comm.rank == 0:
        print(f"P = {comm.size}, rows of {args.width} float32, per rank sent + received "
              f"{', '.join(f'{m / 1e6:,.0f} MB' for m in moved_all)}; best of {args.repeat}; "
              f"load average {os.getloadavg()[0]:.1f}")
        for name, seconds in timings.items():
            best = min(seconds)
            print(f"  {name:<16}{best:8.3f} s  {max(moved_all) / best / 1e9:6.2f} GB/s per rank")


if __name__ == "__main__":
    main()
