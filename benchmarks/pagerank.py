"""PageRank throughput: the engine at P = 1 and P = 2 against scipy.sparse and networkx.

One run generates a power-law graph (default 1M vertices, 10M edges), then times 20 PageRank
supersteps of the engine (each P in its own ``mpiexec`` job, after a one-superstep warm-up that
loads the compiled kernels), 20 power iterations of scipy.sparse SpMV with the same update, and
``networkx.pagerank`` for 20 iterations on a 100k-edge graph of the same kind (per edge, since it
takes minutes at full size). Single-threaded everywhere. Prints edges/second and ratios, and the
engine's per-superstep split between compute and communication.

    .venv/bin/python benchmarks/pagerank.py [--nodes 1000000 --avg-degree 10]
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

for _var in ("OMP_NUM_THREADS", "NUMBA_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[_var] = "1"

import numpy as np  # noqa: E402

ITERATIONS = 20


def engine_worker(graph_path: str) -> None:
    """Inside mpiexec: load, warm up, time 20 supersteps; rank 0 prints one JSON line."""
    from pregel.comm import Comm
    from pregel.dgraph import load_graph
    from pregel.engine import run
    from pregel.job import gather_values
    from vertex_programs import PageRank

    comm = Comm()
    graph = load_graph(comm, graph_path)
    run(graph, PageRank(max_iter=1))
    comm.barrier()
    result = run(graph, PageRank(tol=1e-300, max_iter=ITERATIONS))
    values = gather_values(graph, result.values)
    compute = comm.allgather(sum(s.compute_seconds for s in result.stats))
    communicate = comm.allgather(sum(s.comm_seconds for s in result.stats))
    sent = comm.allgather(sum(s.bytes_sent for s in result.stats))
    if comm.rank == 0:
        np.save(graph_path + f".engine{comm.size}.npy", values)
        print(json.dumps({"seconds": result.compute_seconds, "compute": compute,
                          "comm": communicate, "bytes_sent": sent}))


def run_engine(graph_path: str, ranks: int) -> dict:
    mpiexec = shutil.which("mpiexec", path=os.path.dirname(sys.executable)) or "mpiexec"
    out = subprocess.run([mpiexec, "-n", str(ranks), sys.executable, "-m", "mpi4py", __file__,
                          "--worker", graph_path], check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def scipy_pagerank(indptr, indices, alpha=0.85):
    """20 power iterations x ← α(Aᵀ D⁻¹ x + dangling/N) + (1−α)/N with a CSR SpMV; (x, seconds)."""
    import scipy.sparse as sp

    n = len(indptr) - 1
    a = sp.csr_matrix((np.ones(len(indices)), indices, indptr), shape=(n, n))
    a_t = a.T.tocsr()
    out_degree = np.diff(indptr)
    inverse = np.where(out_degree > 0, 1.0 / np.maximum(out_degree, 1), 0.0)
    dangling = out_degree == 0
    x = np.full(n, 1.0 / n)
    started = time.perf_counter()
    for _ in range(ITERATIONS):
        x = alpha * (a_t @ (x * inverse) + x[dangling].sum() / n) + (1 - alpha) / n
    return x, time.perf_counter() - started


def networkx_pagerank(num_nodes, avg_degree):
    """20 iterations of ``networkx.pagerank`` (since networkx 3 a scipy SpMV after converting
    the graph to a matrix; the conversion is included) and of networkx's pure-Python power
    iteration ``_pagerank_python``; returns (edges, scipy-backed seconds, pure-Python seconds)."""
    import networkx as nx
    from networkx.algorithms.link_analysis.pagerank_alg import _pagerank_python

    from pregel.convert import to_networkx
    from pregel.generate import generate_graph
    from pregel.graph_io import GraphData

    indptr, indices = generate_graph("powerlaw", num_nodes, avg_degree, seed=1)
    graph = to_networkx(GraphData(indptr, indices))
    seconds = []
    for implementation in (nx.pagerank, _pagerank_python):
        started = time.perf_counter()
        try:
            implementation(graph, max_iter=ITERATIONS, tol=1e-300)
        except nx.PowerIterationFailedConvergence:
            pass  # expected: the 20 iterations ran
        seconds.append(time.perf_counter() - started)
    return len(indices), *seconds


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1_000_000)
    parser.add_argument("--avg-degree", type=float, default=10.0)
    parser.add_argument("--networkx-edges", type=int, default=100_000)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return engine_worker(args.worker)

    from pregel.generate import generate_graph
    from pregel.graph_io import GraphData, write_graph

    indptr, indices = generate_graph("powerlaw", args.nodes, args.avg_degree, seed=0)
    edges = len(indices)
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "g.h5")
        write_graph(path, GraphData(indptr, indices))
        reference, scipy_seconds = scipy_pagerank(indptr, indices)
        engines = {p: run_engine(path, p) for p in (1, 2)}
        for p, info in engines.items():
            values = np.load(path + f".engine{p}.npy")
            assert np.abs(values - reference).sum() < 1e-9, "engine and scipy disagree"
    nx_edges, nx_seconds, nx_python_seconds = networkx_pagerank(
        args.networkx_edges // int(args.avg_degree), args.avg_degree)

    scipy_rate = edges * ITERATIONS / scipy_seconds
    print(f"PageRank, {ITERATIONS} iterations, power-law graph {args.nodes:,} vertices / {edges:,} edges "
          f"(networkx: {nx_edges:,} edges), single-threaded ranks\n")
    print(f"{'method':<30}{'seconds':>9}{'edges/s':>15}{'vs scipy':>10}{'vs nx':>8}{'vs nx-python':>14}")
    nx_rate = nx_edges * ITERATIONS / nx_seconds
    nx_python_rate = nx_edges * ITERATIONS / nx_python_seconds
    for name, seconds, rate in ([("scipy.sparse SpMV", scipy_seconds, scipy_rate)]
                                + [(f"engine P={p}", e["seconds"], edges * ITERATIONS / e["seconds"])
                                   for p, e in engines.items()]
                                + [("networkx.pagerank (scipy)", nx_seconds, nx_rate),
                                   ("networkx _pagerank_python", nx_python_seconds, nx_python_rate)]):
        print(f"{name:<30}{seconds:>9.3f}{rate:>15,.0f}{rate / scipy_rate:>10.2f}"
              f"{rate / nx_rate:>8.1f}{rate / nx_python_rate:>14.1f}")
    print("\nengine per-superstep split (mean over the 20 supersteps, per rank):")
    print(f"{'P':>3}{'rank':>6}{'compute ms':>12}{'comm ms':>10}{'MB sent':>10}")
    for p, info in engines.items():
        for rank in range(p):
            print(f"{p:>3}{rank:>6}{1000 * info['compute'][rank] / ITERATIONS:>12.1f}"
                  f"{1000 * info['comm'][rank] / ITERATIONS:>10.1f}{info['bytes_sent'][rank] / 2**20 / ITERATIONS:>10.2f}")


if __name__ == "__main__":
    main()
