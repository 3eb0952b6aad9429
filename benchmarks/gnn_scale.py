"""GNN inference at 100M edges: ``pregel infer`` at P = 2 against PyG on one process, whole jobs.

The graph (default 10M vertices, 100M edges, 64 float32 features, power law; ``--graph PATH``, made
with ``pregel generate`` when the file does not exist and reused afterwards) is scored with 2-layer
models (64 -> 64 -> 16; SAGE, and GAT with 4 heads, as ``gnn_inference.py``) by, one at a time:

* the engine at P = ``--ranks`` (default 2): ``mpiexec -n P pregel infer``, start-up to the result file;
* the engine at P = 1 (``--no-p1`` skips it): its output must equal P = 2's within 1e-5;
* PyG sparse CSR: a single-process script that reads the file, builds ``adj_t``, runs both layers
  and writes the output (``gnn_inference.pyg_worker``);
* PyG ``edge_index`` (``--no-edge-index`` skips it): the same script on the [2, E] edge list;
* a sample check: ``--sample`` random vertices (default 1,000) scored by PyG on their 2-hop
  subgraph (``torch_geometric.utils.k_hop_subgraph``), against the engine's rows at P = 2.

Before each job the graph file is read through once, untimed, so that every method finds it in the
page cache. Every job runs under an address-space cap (``--cap-gb`` per job, RLIMIT_AS, split evenly over the
processes of an ``mpiexec`` job), so a method that does not fit fails with a MemoryError (reported
with its time and peak RSS) instead of the kernel's OOM killer; a run starts only when
``/proc/meminfo`` shows ``--min-free-gb`` available.
Reported per method: wall and CPU seconds, peak RSS per process and summed, bytes of peak RSS per
edge, the split of the time; for the engine, each layer's exchange: MB moved between processes (sum
over ranks), its seconds (slowest rank, waiting included) and the resulting GB/s.

    flock /tmp/heavy.lock timeout 3600 python benchmarks/gnn_scale.py --graph /tmp/g100m.h5
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

for _var in ("OMP_NUM_THREADS", "NUMBA_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[_var] = "1"

import numpy as np  # noqa: E402

from pregel.memory import available_memory  # noqa: E402
from gnn_inference import _launch, h5_values, load_pyg_layers, pyg_worker, write_models  # noqa: E402  (sibling)

KINDS = ("sage", "gat")
SEED = 0


def warm_page_cache(path: str, block: int = 64 << 20) -> None:
    """Read ``path`` through once (untimed), so that every method reads the graph from the page
    cache rather than the first one paying for the disk."""
    buffer = bytearray(block)
    with open(path, "rb", buffering=0) as f:
        while f.readinto(buffer):
            pass


def available_gb() -> float:
    """GB of memory the kernel says is available (``MemAvailable``)."""
    return available_memory() / 2**30


# ---------------------------------------------------------------- workers (one process each)

def capped_pyg_worker(folder: str, kind: str, adjacency: str) -> None:
    """PyG's script (``adjacency``: 'sparse' or 'edge_index'); one JSON line with ``failed`` (and the
    seconds until then) when the address-space cap stops it."""
    started = time.perf_counter()
    try:
        pyg_worker(folder, kind, adjacency)
    except (MemoryError, RuntimeError) as err:  # torch's allocator raises RuntimeError
        if not isinstance(err, MemoryError) and "memory" not in str(err).lower():
            raise
        print(json.dumps({"failed": f"{type(err).__name__}: {str(err).splitlines()[0][:120]}",
                          "seconds": time.perf_counter() - started}))


def sample_worker(folder: str, kind: str) -> None:
    """PyG's forward on the 2-hop subgraph of ``sample`` random vertices against the engine's rows
    (``engine{ranks}.h5``); one JSON line: vertices, subgraph size, max |diff|."""
    import h5py
    import torch
    from torch_geometric.utils import k_hop_subgraph

    torch.set_num_threads(1)
    spec = json.loads(open(os.path.join(folder, "sample.json")).read())
    with h5py.File(os.path.join(folder, "graph.h5"), "r") as f:
        indptr, indices = f["graph/indptr"][:], f["graph/indices"][:]
        features = f["nodes/features"][:]
        n = len(indptr) - 1
        seeds = np.sort(np.random.default_rng(SEED).choice(n, size=spec["sample"], replace=False))
        src = np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr))
        edge_index = torch.from_numpy(np.stack([src, indices.astype(np.int64)]))
        del src, indices, indptr
        subset, sub_edges, mapping, _ = k_hop_subgraph(torch.from_numpy(seeds), 2, edge_index,
                                                       relabel_nodes=True, num_nodes=n)
        del edge_index
    x = torch.from_numpy(features[subset.numpy()])
    del features
    with torch.no_grad():
        layers = load_pyg_layers(folder, kind)
        for i, conv in enumerate(layers):
            x = conv(x, sub_edges)
            if i < len(layers) - 1:
                x = x.relu()
    expected = x[mapping].numpy()
    with h5py.File(os.path.join(folder, spec["engine"]), "r") as f:
        got = f["values"][seeds]
    print(json.dumps({"vertices": len(seeds), "subgraph_vertices": len(subset),
                      "subgraph_edges": int(sub_edges.shape[1]), "max_diff": float(np.abs(got - expected).max())}))


WORKERS = {"pyg-sparse": lambda folder, kind: capped_pyg_worker(folder, kind, "sparse"),
           "pyg-full": lambda folder, kind: capped_pyg_worker(folder, kind, "edge_index"),
           "sample": sample_worker}


# ---------------------------------------------------------------- driver

def run(folder: str, name: str, worker: str, kind: str, ranks, cap_gb: float, min_free_gb: float) -> dict:
    """One whole job after checking the free memory; its measurements (``_launch``), or the failure."""
    free = available_gb()
    if free < min_free_gb:
        raise SystemExit(f"{name}: only {free:.1f} GB of memory available, {min_free_gb} GB needed; "
                         f"try again when the machine is quieter")
    script = __file__ if worker in WORKERS else None
    cap = int(cap_gb * 2**30 / (ranks or 1))
    hard = resource.getrlimit(resource.RLIMIT_AS)[1]
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))  # the soft limit: inherited by the job's processes
    warm_page_cache(os.path.join(folder, "graph.h5"))
    print(f"  {name} ({free:.0f} GB available, load average {os.getloadavg()[0]:.1f}) ...", flush=True)
    try:
        result = _launch(folder, worker, kind, ranks, **({"script": script} if script else {}))
    except RuntimeError as err:  # a failed job: its last line of error output
        lines = str(err).strip().splitlines()
        print(f"  {name} failed: {lines[-1] if lines else err}", flush=True)
        return {"wall": float("nan"), "cpu": float("nan"), "rss": [0], "split": {"failed": lines[-1] if lines else ""}}
    if worker == "engine":
        import h5py

        with h5py.File(os.path.join(folder, f"engine{ranks}.h5"), "r") as f:
            result["exchange"] = [(int(b), float(s)) for b, s in
                                  zip(f.attrs["layer_bytes_sent"], f.attrs["layer_comm_seconds"])]
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--graph", help="graph file (generated there if it does not exist); required")
    parser.add_argument("--nodes", type=int, default=10_000_000)
    parser.add_argument("--avg-degree", type=float, default=10.0)
    parser.add_argument("--features", type=int, default=64)
    parser.add_argument("--kinds", nargs="+", default=list(KINDS), choices=KINDS)
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--no-p1", action="store_true", help="skip the engine at P = 1")
    parser.add_argument("--no-edge-index", action="store_true", help="skip PyG's edge_index path")
    parser.add_argument("--no-sparse", action="store_true", help="skip PyG's sparse-CSR path")
    parser.add_argument("--sample", type=int, default=1000, help="vertices checked on their 2-hop subgraphs")
    parser.add_argument("--cap-gb", type=float, default=20.0, help="address-space cap of every job")
    parser.add_argument("--min-free-gb", type=float, default=16.0, help="available memory a run waits for")
    parser.add_argument("--worker", nargs=3, metavar=("KIND", "FOLDER", "LAYER"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return WORKERS[args.worker[0]](args.worker[1], args.worker[2])
    from pregel.graph_io import read_header

    if not args.graph:
        parser.error("--graph is required")
    if not os.path.exists(args.graph):
        print(f"generating {args.graph} ...", flush=True)
        subprocess.run([sys.executable, "-m", "pregel.cli", "generate", "--kind", "powerlaw", "--nodes",
                        str(args.nodes), "--avg-degree", str(args.avg_degree), "--features",
                        str(args.features), "--seed", str(SEED), "--out", args.graph], check=True)
    header = read_header(args.graph)
    print(f"2-layer models ({header.num_features} -> 64 -> 16) on {args.graph}: {header.num_nodes:,} vertices, "
          f"{header.num_edges:,} edges; one run of each method, single-threaded processes, whole jobs timed "
          f"from outside; address space capped at {args.cap_gb:g} GB per job\n", flush=True)
    with tempfile.TemporaryDirectory(dir=os.path.dirname(os.path.abspath(args.graph))) as folder:
        os.symlink(os.path.abspath(args.graph), os.path.join(folder, "graph.h5"))
        for kind in args.kinds:
            write_models(folder, kind, [header.num_features, 64, 16])
            methods = [(f"engine P={args.ranks}", "engine", args.ranks)]
            methods += [] if args.no_sparse else [("PyG sparse CSR", "pyg-sparse", None)]
            methods += [] if args.no_p1 else [("engine P=1", "engine", 1)]
            methods += [] if args.no_edge_index else [("PyG edge_index", "pyg-full", None)]
            print(f"{kind}:", flush=True)
            results = {name: run(folder, name, worker, kind, ranks, args.cap_gb, args.min_free_gb)
                       for name, worker, ranks in methods}
            sample = None
            if args.sample:
                with open(os.path.join(folder, "sample.json"), "w") as f:
                    json.dump({"sample": args.sample, "engine": f"engine{args.ranks}.h5"}, f)
                sample = run(folder, f"sample of {args.sample}", "sample", kind, None, args.cap_gb,
                             args.min_free_gb)
            report(kind, folder, results, sample, header.num_edges, args.ranks)


def report(kind: str, folder: str, results: dict, sample, num_edges: int, ranks: int) -> None:
    """The table of one layer kind, each engine layer's exchange, and the equality checks."""
    sparse = results.get("PyG sparse CSR")
    sparse_ok = sparse is not None and "failed" not in sparse["split"]
    print(f"{kind}: {'method':<18}{'wall s':>8}{'vs sparse':>10}{'CPU s':>8}{'peak RSS MB':>17}{'sum MB':>8}"
          f"{'B/edge':>8}  split (s)")
    for name, r in results.items():
        speed = f"{sparse['wall'] / r['wall']:>9.2f}x" if sparse_ok and "failed" not in r["split"] else f"{'':>10}"
        split = ", ".join(f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}" for k, v in r["split"].items())
        per_rank = " + ".join(f"{b / 2**20:,.0f}" for b in r["rss"])
        print(f"{'':<{len(kind) + 2}}{name:<18}{r['wall']:>8.1f}{speed}{r['cpu']:>8.1f}{per_rank:>17}"
              f"{sum(r['rss']) / 2**20:>8,.0f}{sum(r['rss']) / num_edges:>8.0f}  {split}")
    for name, r in results.items():
        for layer, (nbytes, seconds) in enumerate(r.get("exchange", [])):
            if nbytes:
                print(f"  {name} layer {layer + 1} exchange: {nbytes / 2**20:,.0f} MB between processes in "
                      f"{seconds:.2f} s (slowest rank, waiting included): {nbytes / seconds / 1e9:.2f} GB/s")
    values = {name: h5_values(os.path.join(folder, f"engine{r}.h5" if w == "engine" else f"{w}.h5"))
              for name, w, r in [(f"engine P={ranks}", "engine", ranks), ("engine P=1", "engine", 1),
                                 ("PyG sparse CSR", "pyg-sparse", None)]
              if name in results and "failed" not in results[name]["split"]}
    engine = values.get(f"engine P={ranks}")
    for name, other in values.items():
        if name != f"engine P={ranks}" and engine is not None:
            print(f"  max |engine P={ranks} - {name}| = {float(np.abs(engine - other).max()):.1e}")
    if sample is not None and "failed" not in sample["split"]:
        s = sample["split"]
        print(f"  {s['vertices']:,} random vertices against PyG on their 2-hop subgraph ({s['subgraph_vertices']:,} "
              f"vertices, {s['subgraph_edges']:,} edges): max |diff| = {s['max_diff']:.1e}")
    print(f"(load average {os.getloadavg()[0]:.1f})\n", flush=True)


if __name__ == "__main__":
    main()
