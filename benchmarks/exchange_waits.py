"""A ``pregel`` command with each superstep's exchange split into waiting for the other ranks and the exchange.

Runs the command given after ``--`` (``infer``, ``run``, ...) in this process, with a barrier before
every exchange of the host data path (``pregel.superstep.HostPath.exchange``; with ``--alltoallv``
before ``--``, the ``Alltoallv`` exchange instead of the shared-memory window): the seconds a rank
waits there are the imbalance (the other ranks still computing), the seconds after it the exchange
itself. Only this benchmark adds the barrier; the command's own figures then count the exchange
without the wait. At exit each rank prints, in one write to stderr, one line per superstep
``rank R superstep S: waited W s, exchange X s by WAY, MB sent + received M, resident MB before R``
(WAY: ``window`` or ``Alltoallv``, the way the exchange took) and
``rank R peak RSS MB M`` (``VmHWM``).

    mpiexec -n 2 python benchmarks/exchange_waits.py [--alltoallv] -- infer --graph g.h5 --model m.pt --out o.h5 --quiet
"""

import atexit
import os
import sys
import time

for _var in ("OMP_NUM_THREADS", "NUMBA_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[_var] = "1"


def main():
    from pregel import cli, superstep
    from pregel.exchange import exchange
    from pregel.memory import peak_rss_bytes

    shared, lines = "--alltoallv" not in sys.argv[:sys.argv.index("--")], []

    def timed(path, out):
        comm = path.graph.comm
        resident = _resident_mb()
        waited = time.perf_counter()
        comm.barrier()
        started = time.perf_counter()
        incoming = exchange(path.graph, out, with_counts=path.superstep.with_counts, shared=shared)
        done = time.perf_counter()
        moved = (incoming.bytes_sent + incoming.bytes_received) / 1e6
        lines.append(f"rank {comm.rank} superstep {len(lines)}: waited {started - waited:.3f} s, "
                     f"exchange {done - started:.3f} s by {'Alltoallv' if incoming.ext is not None else 'window'}, "
                     f"MB sent + received {moved:,.0f}, "
                     f"resident MB before {resident:,.0f}\n")
        return incoming

    superstep.HostPath.exchange = timed
    rank = lambda: lines[0].split()[1] if lines else "?"  # noqa: E731
    atexit.register(lambda: os.write(2, ("".join(lines) + f"rank {rank()} peak RSS MB "
                                         f"{peak_rss_bytes() / 1e6:,.0f}\n").encode()))
    sys.argv = ["pregel"] + sys.argv[sys.argv.index("--") + 1:]
    return cli.main()


def _resident_mb() -> float:
    """This process's resident size now (``VmRSS``), MB."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1e3


if __name__ == "__main__":
    sys.exit(main())
