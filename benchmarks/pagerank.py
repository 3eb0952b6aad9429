"""PageRank throughput: the engine at P = 1 and P = 2 against scipy.sparse and networkx.

One run generates a power-law graph (default 1M vertices, 10M edges), then times 20 PageRank
supersteps of the engine (each P in its own ``mpiexec`` job, after a one-superstep warm-up that
loads the compiled kernels), 20 power iterations of scipy.sparse SpMV with the same update, and
``networkx.pagerank`` for 20 iterations on a 100k-edge graph of the same kind (per edge, since it
takes minutes at full size). Single-threaded everywhere. Prints edges/second and ratios, and the
engine's per-superstep split between compute and communication.

The end-to-end rows time whole processes, as a user runs them: ``pregel run pagerank --max-iter 20``
(start-up, load, 20 supersteps, write; ``--tol`` tiny so that all 20 run) against a plain h5py +
scipy script doing the same job (read the file, build the transposed CSR, 20 iterations, write
``/values``), run alternately ``--repeat`` times; medians of wall time, of each phase, and of the
peak RSS of each process (``getrusage`` of a small parent).

    .venv/bin/python benchmarks/pagerank.py [--nodes 1000000 --avg-degree 10] [--repeat 3]
    .venv/bin/python benchmarks/pagerank.py --end-to-end-only --graph g.h5
"""

import argparse
import json
import os
import statistics
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


SCRIPT = r"""
import json, os, resource, sys, time
started = time.perf_counter()
import h5py, numpy as np, scipy.sparse as sp
imported = time.perf_counter()
with h5py.File(sys.argv[1], "r") as f:
    indptr, indices = f["graph/indptr"][:], f["graph/indices"][:]
n = len(indptr) - 1
a_t = sp.csr_matrix((np.ones(len(indices)), indices, indptr), shape=(n, n)).T.tocsr()
out_degree = np.diff(indptr)
inverse = np.where(out_degree > 0, 1.0 / np.maximum(out_degree, 1), 0.0)
dangling = out_degree == 0
loaded = time.perf_counter()
x = np.full(n, 1.0 / n)
for _ in range(20):
    x = 0.85 * (a_t @ (x * inverse) + x[dangling].sum() / n) + 0.15 / n
computed = time.perf_counter()
with h5py.File(sys.argv[2], "w") as f:
    f.create_dataset("values", data=x)
print(json.dumps({"start": imported - started, "load": loaded - imported, "compute": computed - loaded,
                  "write": time.perf_counter() - computed}))
"""


# Runs a command as its child and prints the child's peak RSS (KiB) last on stderr. The child is
# forked from this small process: a child forked from the benchmark itself would inherit its peak
# RSS (Linux keeps the larger of the forking process's and the new program's).
_RSS_WRAPPER = ("import resource, subprocess, sys; code = subprocess.call(sys.argv[1:]); "
                "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr); "
                "sys.exit(code)")


def _peak_rss(command: list) -> tuple[float, int, str]:
    """(wall seconds, peak RSS in bytes, stdout) of ``command`` run as a separate process."""
    started = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", _RSS_WRAPPER] + command, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if out.returncode:
        raise RuntimeError(f"{' '.join(command[:4])} failed: {out.stderr[-2000:]}")
    return wall, int(out.stderr.strip().splitlines()[-1]) * 1024, out.stdout


def end_to_end(graph_path: str, folder: str, repeat: int, ranks: int = 1) -> dict:
    """Whole ``pregel run pagerank`` processes against the h5py + scipy script, alternately;
    returns per-run lists of wall seconds, phases and peak RSS of each."""
    import h5py

    script = os.path.join(folder, "scipy_pagerank.py")
    with open(script, "w") as f:
        f.write(SCRIPT)
    pregel = [sys.executable, "-m", "pregel.cli"]
    if ranks > 1:
        mpiexec = shutil.which("mpiexec", path=os.path.dirname(sys.executable)) or "mpiexec"
        pregel = [mpiexec, "-n", str(ranks)] + pregel
    runs = {"engine": [], "script": []}
    for _ in range(repeat):
        out = os.path.join(folder, "engine.h5")
        wall, rss, _ = _peak_rss(pregel + ["run", "pagerank", "--graph", graph_path, "--out", out,
                                           "--max-iter", str(ITERATIONS), "--tol", "1e-300", "--quiet"])
        with h5py.File(out, "r") as f:
            table = f["stats/per_superstep"][:]  # [ranks, supersteps, fields]
            steps = table[:, :, 0] + table[:, :, 1]
            engine_values = f["values"][:]
            runs["engine"].append({"wall": wall, "rss": rss, "load": float(f.attrs["load_seconds"]),
                                   "compute": float(f.attrs["compute_seconds"]),
                                   "first": float(steps[:, 0].max()),
                                   "steady": float(np.median(steps[:, 1:].max(axis=0)))})
        out = os.path.join(folder, "script.h5")
        wall, rss, stdout = _peak_rss([sys.executable, script, graph_path, out])
        runs["script"].append({"wall": wall, "rss": rss, **json.loads(stdout)})
        with h5py.File(out, "r") as f:
            assert np.abs(f["values"][:] - engine_values).sum() < 1e-9, "engine and script disagree"
    return runs


def print_end_to_end(runs: dict, edges: int, ranks: int) -> None:
    """The end-to-end table: medians over the runs, and the ratios the targets are about."""
    def med(side, key):
        return statistics.median(r[key] for r in runs[side])

    print(f"\nend to end, {len(runs['engine'])} alternating runs each (medians), load average "
          f"{os.getloadavg()[0]:.2f}; pregel at P={ranks}")
    print(f"{'':<34}{'pregel run':>12}{'h5py+scipy':>12}{'ratio':>8}")
    per_iteration = 1000 * med("script", "compute") / ITERATIONS
    rows = [("whole command (s)", med("engine", "wall"), med("script", "wall")),
            ("load: read + build (s)", med("engine", "load"), med("script", "load")),
            ("20 iterations (s)", med("engine", "compute"), med("script", "compute")),
            ("one iteration, first (ms)", 1000 * med("engine", "first"), per_iteration),
            ("one iteration, steady (ms)", 1000 * med("engine", "steady"), per_iteration),
            ("peak RSS (MB)", med("engine", "rss") / 2**20, med("script", "rss") / 2**20),
            ("peak RSS per edge (bytes)", med("engine", "rss") / edges, med("script", "rss") / edges)]
    for name, mine, theirs in rows:
        print(f"{name:<34}{mine:>12.3f}{theirs:>12.3f}{mine / theirs:>8.2f}")
    best = {side: min(r["wall"] for r in runs[side]) for side in runs}
    print(f"{'whole command, best run (s)':<34}{best['engine']:>12.3f}{best['script']:>12.3f}"
          f"{best['engine'] / best['script']:>8.2f}")
    rest = med("engine", "wall") - med("engine", "load") - med("engine", "compute")
    print(f"pregel outside load and loop (start-up, write, exit): {rest:.2f} s; script start-up "
          f"{med('script', 'start'):.2f} s, write {med('script', 'write'):.2f} s")


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


def _generate(folder: str, nodes: int, avg_degree: float):
    """The benchmark's power-law graph written to ``folder``; (path, indptr, indices)."""
    from pregel.generate import generate_graph
    from pregel.graph_io import GraphData, write_graph

    indptr, indices = generate_graph("powerlaw", nodes, avg_degree, seed=0)
    path = os.path.join(folder, "g.h5")
    write_graph(path, GraphData(indptr, indices))
    return path, indptr, indices


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1_000_000)
    parser.add_argument("--avg-degree", type=float, default=10.0)
    parser.add_argument("--networkx-edges", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3, help="end-to-end runs of each side")
    parser.add_argument("--ranks", type=int, default=1, help="pregel's ranks in the end-to-end rows")
    parser.add_argument("--end-to-end-only", action="store_true", help="only the end-to-end rows")
    parser.add_argument("--graph", help="an existing graph file (default: generate one)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return engine_worker(args.worker)
    if args.end_to_end_only:
        with tempfile.TemporaryDirectory() as folder:
            path = args.graph or _generate(folder, args.nodes, args.avg_degree)[0]
            import h5py

            with h5py.File(path, "r") as f:
                edges = int(f.attrs["num_edges"])
            print_end_to_end(end_to_end(path, folder, args.repeat, args.ranks), edges, args.ranks)
        return None

    with tempfile.TemporaryDirectory() as folder:
        path, indptr, indices = _generate(folder, args.nodes, args.avg_degree)
        edges = len(indices)
        runs = end_to_end(path, folder, args.repeat, args.ranks)
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
    print_end_to_end(runs, edges, args.ranks)
    print("\nengine per-superstep split (mean over the 20 supersteps, per rank):")
    print(f"{'P':>3}{'rank':>6}{'compute ms':>12}{'comm ms':>10}{'MB sent':>10}")
    for p, info in engines.items():
        for rank in range(p):
            print(f"{p:>3}{rank:>6}{1000 * info['compute'][rank] / ITERATIONS:>12.1f}"
                  f"{1000 * info['comm'][rank] / ITERATIONS:>10.1f}{info['bytes_sent'][rank] / 2**20 / ITERATIONS:>10.2f}")


if __name__ == "__main__":
    main()
