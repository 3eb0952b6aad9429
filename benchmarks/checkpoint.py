"""Checkpoint overhead of PageRank: seconds per checkpoint and bytes per vertex.

Run on every rank of a job (one line per checkpoint and a summary on rank 0)::

    .venv/bin/pregel generate --kind powerlaw --nodes 1000000 --avg-degree 10 --out g.h5
    mpiexec -n P .venv/bin/python benchmarks/checkpoint.py g.h5 [--supersteps 10 --every 2]

PageRank runs ``--supersteps`` supersteps with a checkpoint every ``--every`` into a fresh
temporary folder beside the graph; each checkpoint's wall time is the time of the collective
``Checkpointer.save`` on rank 0 (parts serialised, hashed, written with fsync on every rank, the
manifest and the clean-up), compared with the mean superstep time of the same run.
"""

import argparse
import os
import shutil
import tempfile
import time

for _var in ("OMP_NUM_THREADS", "NUMBA_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[_var] = "1"

from pregel.checkpoint import Checkpointer, graph_identity
from pregel.comm import Comm
from pregel.dgraph import load_graph
from pregel.engine import run
from vertex_programs import PageRank


class TimedCheckpointer(Checkpointer):
    """A ``Checkpointer`` that records the wall time of each ``save`` and its folder's size."""

    seconds: list
    sizes: list

    def save(self, graph, superstep, *args):
        self.comm.barrier()
        started = time.perf_counter()
        super().save(graph, superstep, *args)
        self.seconds.append(time.perf_counter() - started)
        step_dir = self.directory / f"step-{superstep:09d}"
        self.sizes.append(sum(p.stat().st_size for p in step_dir.iterdir()))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("graph")
    parser.add_argument("--supersteps", type=int, default=10)
    parser.add_argument("--every", type=int, default=2)
    args = parser.parse_args()
    comm = Comm()
    folder = None
    if comm.rank == 0:
        folder = tempfile.mkdtemp(prefix="ckpt-bench-", dir=os.path.dirname(os.path.abspath(args.graph)))
    folder = comm.bcast(folder)
    try:
        program = PageRank(tol=1e-12, max_iter=args.supersteps)
        identity = {"graph": graph_identity(args.graph), "program": {"algorithm": "pagerank"}}
        checkpoint = TimedCheckpointer(comm, identity, "range", os.path.join(folder, "ck"), args.every)
        checkpoint.seconds, checkpoint.sizes = [], []
        graph = load_graph(comm, args.graph)
        result = run(graph, program, checkpoint=checkpoint)
        if comm.rank == 0:
            compute = sum(s.compute_seconds + s.comm_seconds for s in result.stats) / result.supersteps
            for k, (seconds, size) in enumerate(zip(checkpoint.seconds, checkpoint.sizes)):
                print(f"checkpoint {k + 1}: {seconds:.3f} s, {size:,} bytes")
            mean = sum(checkpoint.seconds) / len(checkpoint.seconds)
            per_vertex = checkpoint.sizes[-1] / graph.num_nodes
            print(f"P={comm.size} N={graph.num_nodes:,} E={graph.num_edges:,}: {mean:.3f} s per checkpoint "
                  f"(mean of {len(checkpoint.seconds)}), {per_vertex:.1f} bytes per vertex, "
                  f"superstep {compute:.3f} s (rank 0)")
    finally:
        comm.barrier()
        if comm.rank == 0:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
