"""Frontier programs (bfs, sssp, wcc): whole ``pregel run`` jobs at P = 1 and P = 2 against scipy.sparse.csgraph.

On one graph file (``--graph``, or a power-law graph generated with ``pregel generate --kind powerlaw
--nodes N --avg-degree D --seed 0``, default 1M vertices, 10M edges), each algorithm of ``--algorithms``
runs as the whole command a user runs, timed from outside: ``pregel run ALG --graph G --out OUT
--partition PART --stats --quiet`` (``--source S`` for bfs and sssp; PART from ``--partition``, default
range; ``--delta D`` for sssp and ``--hub-threshold D`` when given) on one rank and under ``mpiexec -n P`` for each P of
``--ranks``, against a plain h5py + scipy script doing the same job as one process (read the file's CSR,
build the matrix, compute, write ``/values``): ``shortest_path(method='D', unweighted=True)`` hop counts
for bfs (-1 where unreachable, as pregel writes), ``dijkstra`` with the file's weights (1.0 without
``/graph/weights``) for sssp, ``connected_components(directed=True, connection='weak')`` for wcc, each
component labelled by its smallest vertex id (as pregel's wcc).
Single-threaded everywhere. Runs alternate (scipy, then each P, for each algorithm) ``--repeat`` times.

Reported per algorithm and method, medians over the runs: supersteps, wall seconds of the whole
process, its load (read + build) and compute seconds (pregel: from its printed summary line; scipy:
the script's own clock), and peak RSS per process: each rank's from ``/usr/bin/time -f %M`` around
it (the largest over ranks), or where ``/usr/bin/time`` is missing the largest process of the job
from ``getrusage`` of a small parent. Every engine output is compared with scipy's, exactly (bfs and
wcc are integers; sssp sums the same float64 distances along the same paths); the script exits with
status 1 if any differs.

    .venv/bin/python benchmarks/frontier.py [--nodes 1000000 --avg-degree 10] [--repeat 3]
    .venv/bin/python benchmarks/frontier.py --graph g.h5 --algorithms bfs,wcc --ranks 1,2,3 --json out.json
"""

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

for _var in ("OMP_NUM_THREADS", "NUMBA_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[_var] = "1"

import h5py  # noqa: E402
import numpy as np  # noqa: E402

from pagerank import _peak_rss  # noqa: E402  (sibling)

ALGORITHMS = ("bfs", "sssp", "wcc")
SCIPY = "scipy.sparse.csgraph"
#: ``/usr/bin/time`` around each rank gives every rank's peak RSS; without it, ``_peak_rss``
TIME = "/usr/bin/time" if os.access("/usr/bin/time", os.X_OK) else None
#: pregel run's summary line: ``N supersteps (why), load X s, compute Y s -> OUT``
SUMMARY = re.compile(r"^(\d+) supersteps \(.*\), load ([\d.]+) s, compute ([\d.]+) s -> ", re.MULTILINE)

SCRIPT = r"""
import json, sys, time
started = time.perf_counter()
import h5py, numpy as np, scipy.sparse as sp
from scipy.sparse import csgraph
imported = time.perf_counter()
graph, out, algorithm, source = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
with h5py.File(graph, "r") as f:
    indptr, indices = f["graph/indptr"][:], f["graph/indices"][:]
    weighted = algorithm == "sssp" and "weights" in f["graph"]
    weights = f["graph/weights"][:] if weighted else np.ones(len(indices))
n = len(indptr) - 1
a = sp.csr_matrix((weights, indices, indptr), shape=(n, n))
loaded = time.perf_counter()
if algorithm == "bfs":
    hops = csgraph.shortest_path(a, method="D", unweighted=True, indices=source)
    values = np.where(np.isinf(hops), -1, hops).astype(np.int64)
elif algorithm == "sssp":
    values = csgraph.dijkstra(a, indices=source)
else:
    labels = csgraph.connected_components(a, directed=True, connection="weak")[1]
    values = np.unique(labels, return_index=True)[1][labels].astype(np.int64)  # a component's first vertex
computed = time.perf_counter()
with h5py.File(out, "w") as f:
    f.create_dataset("values", data=values)
print(json.dumps({"start": imported - started, "load": loaded - imported, "compute": computed - loaded,
                  "write": time.perf_counter() - computed}))
"""


def _launcher(ranks: int) -> list:
    """``mpiexec -n P`` for P > 1; nothing for one rank (pregel runs without mpiexec as a single rank)."""
    if ranks == 1:
        return []
    return [shutil.which("mpiexec", path=os.path.dirname(sys.executable)) or "mpiexec", "-n", str(ranks)]


def run_timed(command: list, ranks: int = 1) -> tuple[float, list, str]:
    """(wall seconds, peak RSS in bytes of each rank, stdout) of ``command`` run as one whole job on
    ``ranks`` ranks (without ``/usr/bin/time``: one figure, the job's largest process)."""
    if TIME is None:
        wall, rss, stdout = _peak_rss(_launcher(ranks) + command)
        return wall, [rss], stdout
    with tempfile.NamedTemporaryFile("r", suffix=".rss") as report:  # appended to by every rank's time
        started = time.perf_counter()
        out = subprocess.run(_launcher(ranks) + [TIME, "-a", "-o", report.name, "-f", "rss_kb %M"] + command,
                             capture_output=True, text=True)
        wall = time.perf_counter() - started
        lines = report.read().splitlines()
    if out.returncode:
        raise RuntimeError(f"{' '.join(command[:5])} failed: {out.stderr[-2000:]}")
    rss = [int(line.split()[1]) * 1024 for line in lines if re.fullmatch(r"rss_kb \d+", line)]
    if len(rss) != ranks:
        raise RuntimeError(f"{len(rss)} peak RSS reports from {ranks} ranks: {lines}")
    return wall, rss, out.stdout


def _values(path: str) -> np.ndarray:
    with h5py.File(path, "r") as f:
        return f["values"][:]


def run_scipy(script: str, graph: str, out: str, algorithm: str, source: int) -> dict:
    """One whole run of the h5py + scipy script: wall, phases (its own clock) and peak RSS."""
    wall, rss, stdout = run_timed([sys.executable, script, graph, out, algorithm, str(source)])
    return {"wall": wall, "rss": rss, **json.loads(stdout.strip().splitlines()[-1])}


def run_engine(graph: str, out: str, algorithm: str, source: int, ranks: int, partition: str,
               delta: float | None = None, hub_threshold: int | None = None) -> dict:
    """One whole ``pregel run`` job on ``ranks`` ranks with the ``partition`` partitioner (and sssp's
    ``--delta`` and the ``--hub-threshold``, unless None): wall, peak RSS of each rank, and supersteps, load and compute seconds
    from its summary line."""
    command = [sys.executable, "-m", "pregel.cli", "run", algorithm, "--graph", graph, "--out", out,
               "--partition", partition, "--stats", "--quiet"] + (["--source", str(source)] if algorithm != "wcc" else [])
    if algorithm == "sssp" and delta is not None:
        command += ["--delta", str(delta)]
    if hub_threshold is not None:
        command += ["--hub-threshold", str(hub_threshold)]
    wall, rss, stdout = run_timed(command, ranks)
    summary = SUMMARY.search(stdout)
    if summary is None:
        raise RuntimeError(f"no summary line in pregel run's output: {stdout[-2000:]}")
    return {"wall": wall, "rss": rss, "supersteps": int(summary[1]), "load": float(summary[2]),
            "compute": float(summary[3])}


def measure(graph: str, folder: str, algorithms: list, ranks: list, source: int, repeat: int, partition: str,
            delta: float | None = None, hub_threshold: int | None = None) -> dict:
    """{algorithm: {method: [one dict per run]}}, runs alternating; each engine run's ``equal`` says
    whether its ``/values`` equal those of scipy's run just before."""
    script = os.path.join(folder, "scipy_frontier.py")
    with open(script, "w") as f:
        f.write(SCRIPT)
    runs = {algorithm: {SCIPY: [], **{f"engine P={p}": [] for p in ranks}} for algorithm in algorithms}
    for _ in range(repeat):
        for algorithm in algorithms:
            out = os.path.join(folder, f"{algorithm}_scipy.h5")
            runs[algorithm][SCIPY].append(run_scipy(script, graph, out, algorithm, source))
            reference = _values(out)
            for p in ranks:
                out = os.path.join(folder, f"{algorithm}_engine{p}.h5")
                run = run_engine(graph, out, algorithm, source, p, partition, delta, hub_threshold)
                run["equal"] = bool(np.array_equal(_values(out), reference))
                runs[algorithm][f"engine P={p}"].append(run)
    return runs


def medians(runs: list) -> dict:
    """The medians over ``runs`` of wall, load, compute, supersteps and the largest rank's peak RSS;
    ``equal``: every run equal to scipy (None for scipy's own rows)."""
    row = {key: statistics.median(run[key] for run in runs) for key in ("wall", "load", "compute")}
    row["rss"] = statistics.median(max(run["rss"]) for run in runs)
    row["supersteps"] = statistics.median(run["supersteps"] for run in runs) if "supersteps" in runs[0] else None
    row["equal"] = all(run["equal"] for run in runs) if "equal" in runs[0] else None
    return row


def print_table(table: dict) -> None:
    """The markdown table of ``{algorithm: {method: medians}}``."""
    rss = "peak RSS MB per rank (max)" if TIME else "peak RSS MB (largest process, getrusage)"
    print(f"| algorithm | method | supersteps | wall s | load s | compute s | {rss} | equal to scipy |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | --- |")
    for algorithm, methods in table.items():
        for method, row in methods.items():
            steps = "" if row["supersteps"] is None else f"{row['supersteps']:g}"
            equal = "reference" if row["equal"] is None else ("yes" if row["equal"] else "**NO**")
            print(f"| {algorithm} | {method} | {steps} | {row['wall']:.2f} | {row['load']:.2f} | "
                  f"{row['compute']:.2f} | {row['rss'] / 2**20:,.0f} | {equal} |")


def generate(folder: str, nodes: int, avg_degree: float, weights: bool) -> str:
    """The benchmark's power-law graph, written by ``pregel generate`` into ``folder``; its path."""
    path = os.path.join(folder, "g.h5")
    subprocess.run([sys.executable, "-m", "pregel.cli", "generate", "--kind", "powerlaw", "--nodes", str(nodes),
                    "--avg-degree", str(avg_degree), "--seed", "0", "--out", path]
                   + (["--weights"] if weights else []), check=True, capture_output=True)
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--graph", help="an HDF5 graph file as `pregel generate` writes (default: generate one)")
    parser.add_argument("--nodes", type=int, default=1_000_000, help="generated graph's vertices")
    parser.add_argument("--avg-degree", type=float, default=10.0, help="generated graph's mean out-degree")
    parser.add_argument("--weights", action="store_true", help="generated graph with random weights in (0, 1]")
    parser.add_argument("--algorithms", default=",".join(ALGORITHMS), help="comma-separated, of bfs, sssp, wcc")
    parser.add_argument("--ranks", default="1,2", help="comma-separated numbers of pregel ranks")
    parser.add_argument("--source", type=int, default=0, help="bfs and sssp source vertex")
    parser.add_argument("--partition", choices=("range", "hash"), default="range", help="pregel's partitioner")
    parser.add_argument("--delta", type=float, help="sssp's --delta (default: pregel's)")
    parser.add_argument("--hub-threshold", type=int, help="pregel's --hub-threshold (default: pregel's)")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each method (medians reported)")
    parser.add_argument("--json", help="write the raw numbers of every run to this file")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder (graph and outputs)")
    args = parser.parse_args()
    algorithms = args.algorithms.split(",")
    if not set(algorithms) <= set(ALGORITHMS):
        parser.error(f"--algorithms: choose from {', '.join(ALGORITHMS)}")
    ranks = [int(p) for p in args.ranks.split(",")]

    folder = tempfile.mkdtemp(prefix="frontier-")
    try:
        graph = args.graph or generate(folder, args.nodes, args.avg_degree, args.weights)
        with h5py.File(graph, "r") as f:
            nodes, edges, weighted = int(f.attrs["num_nodes"]), int(f.attrs["num_edges"]), "weights" in f["graph"]
            start, stop = f["graph/indptr"][args.source:args.source + 2]
        runs = measure(graph, folder, algorithms, ranks, args.source, args.repeat, args.partition, args.delta,
                       args.hub_threshold)
    finally:
        if args.keep:
            print(f"kept {folder}")
        else:
            shutil.rmtree(folder)

    table = {algorithm: {method: medians(r) for method, r in methods.items()} for algorithm, methods in runs.items()}
    graph = args.graph or f"power-law graph (pregel generate --seed 0{' --weights' if args.weights else ''})"
    print(f"{graph}: {nodes:,} vertices, {edges:,} edges, {'weighted' if weighted else 'unweighted'}; "
          f"source {args.source} (out-degree {stop - start}); {args.partition} partition; "
          f"{'' if args.delta is None else f'sssp --delta {args.delta}; '}"
          f"{'' if args.hub_threshold is None else f'--hub-threshold {args.hub_threshold}; '}medians of {args.repeat} run(s); "
          f"load average {os.getloadavg()[0]:.2f}\n")
    print_table(table)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"graph": graph, "nodes": nodes, "edges": edges, "weighted": weighted, "source": args.source,
                       "partition": args.partition, "delta": args.delta, "hub_threshold": args.hub_threshold,
                       "rss_from": TIME or "getrusage", "runs": runs, "medians": table}, f, indent=1)
    differ = [f"{a} {m}" for a, methods in table.items() for m, row in methods.items() if row["equal"] is False]
    if differ:
        print(f"\noutputs differ from scipy's: {', '.join(differ)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
