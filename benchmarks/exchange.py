"""The superstep exchange between ranks on one machine: seconds and GB/s of a GNN layer's messages.

Under ``mpiexec -n P``: loads a graph file (hub strategies as ``pregel infer`` uses them), then
times ``pregel.exchange.exchange`` of every owned vertex's row of ``--width`` float32 values (a GNN
layer's exchange: each row goes once to every rank that holds it as a ghost), both ways:

* through the shared-memory window (``pregel.shared_rows``: the sender takes the rows straight into
  the receiver's segment), the default when all ranks are on one machine;
* by ``Alltoallv`` (``exchange(..., shared=False)``), split into its parts, each timed on its own
  right after: packing (``np.take`` of the sent rows in plan order), the transfer (a bare
  ``Alltoallv`` of the packed rows into a receive buffer already written once) and the rest
  (the whole exchange less those two: the header, the receive buffer's first touches, the direct
  messages' ``Alltoallv``).

Before each measurement every rank waits at a barrier; the seconds it waits there (the other rank
still busy with the previous step) are reported as "waiting" and are not part of any exchange
figure. For scale, "memory copy" is one rank copying the same bytes from one array to another (the
machine's memory speed for this size). GB/s counts the bytes a rank sends plus those it receives,
per second of the slowest rank; each figure is the best of ``--repeat``, the two ways alternating.
The first shared exchange also allocates the window; its seconds are printed apart.

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
    parser.add_argument("--ways", nargs="+", default=["shared window", "Alltoallv exchange"],
                        choices=["shared window", "Alltoallv exchange"], help="which exchanges to time")
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
    send_bytes, recv_bytes = graph.send_counts * rows[:1].nbytes, graph.ghost_counts * rows[:1].nbytes
    received, copy_to = np.zeros(int(recv_bytes.sum()), np.uint8), None

    def timed(step) -> float:
        """Seconds of ``step()`` on the slowest rank, after a barrier whose wait is recorded."""
        waited = time.perf_counter()
        comm.barrier()
        started = time.perf_counter()
        timings["waiting"].append(max(comm.allgather(started - waited)))
        step()
        return max(comm.allgather(time.perf_counter() - started))

    def shared():
        exchange(graph, out, with_counts=False).ghost_values.sum()  # read the rows, as a gather would

    def alltoallv():
        nonlocal packed
        exchange(graph, out, with_counts=False, shared=False).ghost_values.sum()
        packed = None

    def pack():
        nonlocal packed
        packed = np.take(rows, graph.send_index, axis=0)

    def copy():
        nonlocal copy_to
        copy_to = np.empty_like(received) if copy_to is None else copy_to
        np.copyto(copy_to, received)

    packed = None
    ways = {"shared window": shared, "Alltoallv exchange": alltoallv}
    ways = {name: ways[name] for name in args.ways}
    timings = {name: [] for name in ("waiting", *ways, "pack", "transfer", "memory copy")}
    for _ in range(args.repeat):
        for name, step in ways.items():
            timings[name].append(timed(step))
        timings["pack"].append(timed(pack))
        timings["transfer"].append(timed(lambda: comm.alltoallv_bytes(packed.reshape(-1).view(np.uint8), send_bytes,
                                                                       received, recv_bytes)))
        packed = None
        timings["memory copy"].append(timed(copy))
    moved = comm.allgather(int(send_bytes.sum() + recv_bytes.sum()))
    resident = comm.allgather(_resident())
    if comm.rank == 0:
        best = {name: min(seconds) for name, seconds in timings.items()}
        first = {name: seconds[0] for name, seconds in timings.items()}
        parts = ["pack", "transfer"]
        if "Alltoallv exchange" in ways:
            parts.append("rest of the Alltoallv exchange")
            for d in (best, first):
                d[parts[-1]] = d["Alltoallv exchange"] - d["pack"] - d["transfer"]
        print(f"P = {comm.size}, rows of {args.width} float32, per rank sent + received "
              f"{', '.join(f'{m / 1e6:,.0f} MB' for m in moved)}; first and best of {args.repeat}; "
              f"load average {os.getloadavg()[0]:.1f}")
        for name in (*ways, *parts):
            print(f"  {name:<32}first {first[name]:7.3f} s {max(moved) / first[name] / 1e9:6.2f} GB/s, best "
                  f"{best[name]:7.3f} s {max(moved) / best[name] / 1e9:6.2f} GB/s per rank (sent + received)")
        copied = received.nbytes
        print(f"  {'memory copy':<32}best {best['memory copy']:7.3f} s {copied / best['memory copy'] / 1e9:6.2f} "
              f"GB/s copied (the received bytes, within one rank)")
        print(f"  {'waiting at the barrier before':<32}best {best['waiting']:.3f} s, worst "
              f"{max(timings['waiting']):.3f} s")
        print("  resident MB at the end, per rank (of it shared):",
              ", ".join(f"{rss / 2**20:,.0f} ({shm / 2**20:,.0f})" for rss, shm in resident))


def _resident() -> tuple:
    """(VmRSS, RssShmem) of this process in bytes."""
    fields = dict(line.split(":", 1) for line in open("/proc/self/status"))
    return tuple(int(fields[name].split()[0]) * 1024 for name in ("VmRSS", "RssShmem"))


if __name__ == "__main__":
    main()
