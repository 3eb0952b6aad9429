"""Hub strategies at P = 4: per-rank load with partial gather and shadow nodes on, each alone, and off.

One run generates a power-law graph with heavy hubs (default 1M vertices, 10M edges, exponent
2.0, 16 features) and a random 2-layer GraphSAGE (16 -> 16 -> 16), then one ``mpiexec -n 4`` job
loads the graph and runs the model (one superstep per layer) for each partitioner (range and
hash by default) and hub setting: both strategies on, partial gather alone, shadow nodes alone,
both off — at the automatic threshold, then with both on at every ``--thresholds`` value. For
each it prints, per layer and rank, edges processed, messages and bytes sent, compute and
communication seconds, with the imbalance max/mean of each column; then a summary of the
imbalance of edges processed and the largest difference of each run's output to the first's.

    .venv/bin/python benchmarks/hubs.py [--nodes 1000000 --avg-degree 10 --exponent 2.0 --thresholds 50,20]
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

for _var in ("OMP_NUM_THREADS", "NUMBA_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[_var] = "1"

import numpy as np  # noqa: E402

RANKS = 4
SEED = 0
SETTINGS = (("both on", True, True), ("partial gather only", True, False),
            ("shadow nodes only", False, True), ("both off", False, False))


def worker(folder: str, partitioners: list[str], thresholds: list[int]) -> None:
    """Inside ``mpiexec -n 4``: every partitioner and setting in turn; rank 0 prints one JSON line
    per run."""
    from pregel.comm import Comm
    from pregel.dgraph import HubOptions
    from pregel.stats import FIELDS
    from vertex_programs.gnn.infer import format_per_rank, infer

    edges = FIELDS.index("edges_processed")
    comm = Comm()
    runs = [(name, HubOptions(partial, shadow)) for name, partial, shadow in SETTINGS]
    runs += [(f"both on, threshold {t}", HubOptions(threshold=t)) for t in thresholds]
    runs = [(partitioner, name, hubs) for partitioner in partitioners for name, hubs in runs]
    warm = os.path.join(folder, "warm")  # loads the compiled kernels before anything is timed
    infer(comm, os.path.join(warm, "graph.h5"), os.path.join(warm, "model.pt"), None)
    reference = None
    for partitioner, name, hubs in runs:
        report = infer(comm, os.path.join(folder, "graph.h5"), os.path.join(folder, "model.pt"),
                       os.path.join(folder, "out.h5"), partitioner=partitioner, hubs=hubs)
        if comm.rank != 0:
            continue
        reference = report.values if reference is None else reference
        table = report.stats_table
        per_rank = table[:, :, edges].sum(axis=1)
        print(json.dumps({"partitioner": partitioner, "name": name, "table": format_per_rank(table),
                          "threshold": report.graph.hub_threshold,
                          "in_hubs": len(report.graph.in_hubs),
                          "imbalance": float(per_rank.max() / per_rank.mean()),
                          "max_diff": float(np.abs(report.values - reference).max())}), flush=True)


def write_inputs(folder: str, nodes: int, avg_degree: float, exponent: float, features: int) -> str:
    """The graph file and a random SAGE model in ``folder``; returns a line describing them."""
    import torch
    from torch_geometric.nn import SAGEConv

    from pregel.generate import generate_graph, random_features
    from pregel.graph_io import GraphData, write_graph
    from vertex_programs.gnn import save_model

    indptr, indices = generate_graph("powerlaw", nodes, avg_degree, seed=SEED, exponent=exponent)
    x = random_features(None, nodes, features, np.random.default_rng(SEED))
    write_graph(os.path.join(folder, "graph.h5"), GraphData(indptr, indices, features=x))
    torch.manual_seed(SEED)
    save_model(os.path.join(folder, "model.pt"), [SAGEConv(features, features), SAGEConv(features, features)])
    in_degree = np.bincount(indices, minlength=nodes)
    out_degree = np.diff(indptr)
    return (f"power-law graph: {nodes:,} vertices, {len(indices):,} edges, exponent {exponent}; "
            f"largest in-degree {in_degree.max():,}, largest out-degree {out_degree.max():,}; "
            f"2-layer GraphSAGE {features} -> {features} -> {features}; P = {RANKS}\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1_000_000)
    parser.add_argument("--avg-degree", type=float, default=10.0)
    parser.add_argument("--exponent", type=float, default=2.0)
    parser.add_argument("--features", type=int, default=16)
    parser.add_argument("--partitions", default="range,hash", help="comma-separated partitioners")
    parser.add_argument("--thresholds", default="",
                        help="comma-separated hub thresholds to try with both strategies on")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    thresholds = [int(t) for t in args.thresholds.split(",") if t]
    partitioners = [p for p in args.partitions.split(",") if p]
    if args.worker:
        return worker(args.worker, partitioners, thresholds)

    mpiexec = shutil.which("mpiexec", path=os.path.dirname(sys.executable)) or "mpiexec"
    with tempfile.TemporaryDirectory() as folder:
        print(write_inputs(folder, args.nodes, args.avg_degree, args.exponent, args.features), flush=True)
        os.mkdir(os.path.join(folder, "warm"))
        write_inputs(os.path.join(folder, "warm"), 1000, args.avg_degree, args.exponent, args.features)
        process = subprocess.Popen([mpiexec, "-n", str(RANKS), sys.executable, "-m", "mpi4py", __file__,
                                    "--worker", folder, "--partitions", args.partitions,
                                    "--thresholds", args.thresholds],
                                   stdout=subprocess.PIPE, text=True)
        summary = []
        for line in process.stdout:
            if not line.startswith("{"):
                continue
            run = json.loads(line)
            summary.append(run)
            print(f"== {run['partitioner']} partition, {run['name']} "
                  f"(hub threshold {run['threshold']:g}, {run['in_hubs']} in-hubs)")
            print(run["table"] + "\n", flush=True)
        if process.wait() != 0:
            sys.exit(f"the mpiexec job failed with status {process.returncode}")
    print(f"{'partition':<11}{'setting':<28}{'threshold':>10}{'in-hubs':>9}{'edges max/mean':>16}"
          f"{'max |diff|':>12}")
    for run in summary:
        print(f"{run['partitioner']:<11}{run['name']:<28}{run['threshold']:>10g}{run['in_hubs']:>9}"
              f"{run['imbalance']:>16.3f}{run['max_diff']:>12.1e}")


if __name__ == "__main__":
    main()
