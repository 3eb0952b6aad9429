"""Full-graph GNN inference, whole jobs side by side: ``pregel infer`` at P = 1 and P = 2 against PyG.

One run generates a power-law graph with features (default 1M vertices, 10M edges, 64 features)
and, for each layer kind asked for (``--kinds``, default sage gcn gin gat), a 2-layer model
(64 -> 64 -> 16; GAT with 4 heads of 16 then 4 heads of 4, concatenated; GIN's MLP is
Linear-ReLU-Linear; PyG's random initialisation, the timings do not depend on training), saved with
``vertex_programs.gnn.save_model`` for the engine and as a PyG state dict. Then each method runs as
its own whole process (or ``mpiexec`` job), single-threaded, timed from the outside, in turn, best of
``--repeats``:

* engine P = 1 and P = 2: the ``pregel infer`` command (``python -m pregel.cli infer``): start-up,
  imports, reading the graph, both layers, writing ``/values``;
* PyG sparse CSR: a script that reads the same file with h5py, builds the transposed adjacency
  ``adj_t`` (a ``torch_sparse.SparseTensor`` when torch-sparse is installed, else a
  ``torch.sparse_csr_tensor``; PyG's fastest CPU configuration), runs
  ``conv2(relu(conv1(x, adj_t)), adj_t)`` and writes the output to an HDF5 file;
* PyG ``edge_index``: the same script with ``edge_index`` in place of ``adj_t``;
* (``--layerwise``) PyG layer-wise: the ``inference`` loop of PyG's reddit example, a
  ``NeighborLoader`` with ``num_neighbors=[-1]`` over all vertices (SAGE only).

Reported per method: the whole process's wall seconds, its processor seconds (user + system, summed
over ranks: steadier than wall time on a shared machine), the script's own split (PyG: imports, read,
build, forward, write; engine: load and layers from the result file), peak RSS per rank (``VmHWM``,
read by a wrapper process with ``wait4``) and their sum, and the largest difference of the output to
PyG's ``edge_index`` forward (or sparse CSR when ``edge_index`` is skipped).

``NeighborLoader`` samples with ``pyg-lib`` or ``torch-sparse``; neither has wheels on PyPI for
this torch, so when both are missing the loader is given a sampler whose one-hop, all-neighbour
sampling is a few vectorised torch calls (the same batches: seeds first, then their in-neighbours).

    python benchmarks/gnn_inference.py [--nodes 1000000 --avg-degree 10 --features 64 --kinds sage gcn]
"""

import argparse
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time
import warnings

for _var in ("OMP_NUM_THREADS", "NUMBA_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[_var] = "1"

import numpy as np  # noqa: E402

LOADER_BATCH_SIZE = 4096
SEED = 0


KINDS = ("sage", "gcn", "gin", "gat")
GAT_HEADS = 4


def pyg_layers(kind: str, widths: list):
    """The 2-layer PyG model of ``kind`` (module docstring) with PyG's random initialisation."""
    import torch
    from torch_geometric.nn import GATConv, GCNConv, GINConv, SAGEConv

    def conv(i, o):
        if kind == "sage":
            return SAGEConv(i, o)
        if kind == "gcn":
            return GCNConv(i, o)
        if kind == "gin":
            return GINConv(torch.nn.Sequential(torch.nn.Linear(i, o), torch.nn.ReLU(), torch.nn.Linear(o, o)))
        return GATConv(i, o // GAT_HEADS, heads=GAT_HEADS)

    return [conv(widths[i], widths[i + 1]) for i in range(len(widths) - 1)]


def write_graph_file(path: str, nodes: int, avg_degree: float, features: int, exponent: float) -> None:
    """The benchmark's power-law graph with float32 features, as ``pregel generate`` writes it."""
    from pregel.generate import generate_graph, random_features
    from pregel.graph_io import GraphData, write_graph

    indptr, indices = generate_graph("powerlaw", nodes, avg_degree, seed=SEED, exponent=exponent)
    x = random_features(None, nodes, features, np.random.default_rng(SEED))
    write_graph(path, GraphData(indptr, indices, features=x))


def write_models(folder: str, kind: str, widths: list) -> None:
    """``model.pt`` (the engine's file) and ``pyg.pt`` (PyG state dicts) of one model of ``kind``."""
    import torch

    from vertex_programs.gnn import save_model

    torch.manual_seed(SEED)
    layers = pyg_layers(kind, widths)
    save_model(os.path.join(folder, "model.pt"), layers)
    torch.save({"widths": widths, "states": [layer.state_dict() for layer in layers]},
               os.path.join(folder, "pyg.pt"))


def load_pyg_layers(folder: str, kind: str) -> list:
    """The PyG layers of ``kind`` with the weights ``write_models`` saved in ``folder``/pyg.pt."""
    import torch

    spec = torch.load(os.path.join(folder, "pyg.pt"))
    layers = pyg_layers(kind, spec["widths"])
    for layer, state in zip(layers, spec["states"]):
        layer.load_state_dict(state)
    return layers


def h5_values(path: str) -> np.ndarray:
    import h5py

    with h5py.File(path, "r") as f:
        return f["values"][:]


# ---------------------------------------------------------------- workers (one process each)

def pyg_worker(folder: str, kind: str, adjacency: str) -> None:
    """PyG's full-graph forward as a plain script: imports, h5py read, adjacency (``adjacency``:
    'sparse' builds ``adj_t``, 'edge_index' the [2, E] edge list), forward, write
    ``pyg-sparse.h5`` / ``pyg-full.h5``; prints the split as one JSON line."""
    marks = [time.perf_counter()]
    import h5py
    import torch
    import torch_geometric.typing

    torch.set_num_threads(1)
    marks.append(time.perf_counter())
    with h5py.File(os.path.join(folder, "graph.h5"), "r") as f:
        indptr, indices, x = f["graph/indptr"][:], f["graph/indices"][:], torch.from_numpy(f["nodes/features"][:])
    n = len(indptr) - 1
    marks.append(time.perf_counter())
    if adjacency == "sparse":
        crow, col = _transpose_csr(indptr, indices, n)
        del indptr, indices
        if torch_geometric.typing.WITH_TORCH_SPARSE:
            from torch_sparse import SparseTensor

            adj = SparseTensor(rowptr=torch.from_numpy(crow), col=torch.from_numpy(col), sparse_sizes=(n, n))
        else:
            with warnings.catch_warnings():  # "sparse CSR support is in beta state"
                warnings.simplefilter("ignore", UserWarning)
                adj = torch.sparse_csr_tensor(torch.from_numpy(crow), torch.from_numpy(col),
                                              torch.ones(len(col)), size=(n, n))
        del crow, col
    else:
        src = np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr))
        adj = torch.from_numpy(np.stack([src, indices.astype(np.int64)]))
        del src, indptr, indices
    layers = load_pyg_layers(folder, kind)
    marks.append(time.perf_counter())
    with torch.no_grad():
        for i, conv in enumerate(layers):
            x = conv(x, adj)
            if i < len(layers) - 1:
                x = x.relu()
    marks.append(time.perf_counter())
    name = "pyg-sparse" if adjacency == "sparse" else "pyg-full"
    with h5py.File(os.path.join(folder, f"{name}.h5"), "w") as f:
        f.create_dataset("values", data=x.numpy())
    marks.append(time.perf_counter())
    seconds = np.diff(marks)
    print(json.dumps(dict(zip(("imports", "read", "build", "forward", "write"), seconds.tolist()))))


def _transpose_csr(indptr, indices, n):
    """(crow [N + 1] int64, col [E] int64) of the in-edge CSR (rows = destinations, each row's
    sources ascending) of an out-edge CSR."""
    import scipy.sparse as sp

    a_t = sp.csr_matrix((np.ones(len(indices), np.int8), indices, indptr), shape=(n, n)).T.tocsr()
    return a_t.indptr.astype(np.int64), a_t.indices.astype(np.int64)


def pyg_layerwise_worker(folder: str, kind: str) -> None:
    """PyG layer-wise inference with ``NeighborLoader(num_neighbors=[-1])``, as PyG's reddit
    example's ``inference``; writes ``pyg-layerwise.h5``, prints the split as one JSON line."""
    import h5py
    import torch
    from torch_geometric.data import Data
    from torch_geometric.loader import NeighborLoader

    torch.set_num_threads(1)
    started = time.perf_counter()
    with h5py.File(os.path.join(folder, "graph.h5"), "r") as f:
        indptr, indices, x_all = f["graph/indptr"][:], f["graph/indices"][:], torch.from_numpy(f["nodes/features"][:])
    src = np.repeat(np.arange(len(indptr) - 1, dtype=np.int64), np.diff(indptr))
    edge_index = torch.from_numpy(np.stack([src, indices.astype(np.int64)]))
    layers = load_pyg_layers(folder, kind)
    loaded = time.perf_counter()
    data = Data(edge_index=edge_index, num_nodes=x_all.shape[0])
    data.n_id = torch.arange(x_all.shape[0])
    loader = NeighborLoader(data, input_nodes=None, num_neighbors=[-1], shuffle=False,
                            batch_size=LOADER_BATCH_SIZE, neighbor_sampler=_full_neighbour_sampler(data))
    with torch.no_grad():
        for i, conv in enumerate(layers):
            xs = []
            for batch in loader:
                x = conv(x_all[batch.n_id], batch.edge_index)
                if i < len(layers) - 1:
                    x = x.relu_()
                xs.append(x[:batch.batch_size].clone())  # as .cpu() on a GPU: not a view of x
            x_all = torch.cat(xs, dim=0)
    computed = time.perf_counter()
    with h5py.File(os.path.join(folder, "pyg-layerwise.h5"), "w") as f:
        f.create_dataset("values", data=x_all.numpy())
    print(json.dumps({"read+build": loaded - started, "forward": computed - loaded}))


def _full_neighbour_sampler(data):
    """None (PyG's own sampler) when pyg-lib or torch-sparse is installed, else a ``NeighborSampler``
    whose one-hop, all-neighbour sampling runs in torch."""
    import torch
    import torch_geometric.typing
    from torch_geometric.sampler import NeighborSampler, SamplerOutput

    if torch_geometric.typing.WITH_PYG_LIB or torch_geometric.typing.WITH_TORCH_SPARSE:
        return None

    class TorchFullNeighbourSampler(NeighborSampler):
        def _sample(self, seed, seed_time=None, **kwargs):
            # every in-edge of every seed (CSC positions), seeds first in the relabelled nodes
            start, stop = self.colptr[seed], self.colptr[seed + 1]
            counts = stop - start
            col = torch.repeat_interleave(torch.arange(len(seed)), counts)
            offsets = torch.cumsum(counts, 0) - counts
            edge = torch.arange(int(counts.sum())) - offsets[col] + start[col]
            combined = torch.cat([seed, self.row[edge]])
            unique, inverse = torch.unique(combined, return_inverse=True)
            first = torch.full((len(unique),), len(combined), dtype=torch.long).scatter_reduce_(
                0, inverse, torch.arange(len(combined)), "amin")
            order = torch.argsort(first)
            relabel = torch.empty_like(order)
            relabel[order] = torch.arange(len(order))
            local = relabel[inverse]
            return SamplerOutput(node=unique[order], row=local[len(seed):], col=col, edge=edge,
                                 num_sampled_nodes=[len(seed), len(order) - len(seed)],
                                 num_sampled_edges=[len(edge)])

    with warnings.catch_warnings():  # PyG's advice to install pyg-lib, which PyPI does not have
        warnings.simplefilter("ignore", UserWarning)
        return TorchFullNeighbourSampler(data, num_neighbors=[-1])


WORKERS = {"pyg-full": lambda folder, kind: pyg_worker(folder, kind, "edge_index"),
           "pyg-sparse": lambda folder, kind: pyg_worker(folder, kind, "sparse"),
           "pyg-layerwise": pyg_layerwise_worker}


# ---------------------------------------------------------------- driver

# Runs a command as its child and writes the child's peak RSS (KiB), processor seconds and wall-clock start and end
# (time.time()) to a file of its own in the folder given first (one file a process: the ranks of an mpiexec job
# never share a line of output to be mixed). The child is forked from this small process: one forked from the
# benchmark itself would inherit its peak RSS. (close_fds=False: under mpiexec the rank finds its launcher through
# an inherited descriptor.)
RSS_WRAPPER = ("import os, resource, subprocess, sys, time; started = time.time(); "
               "code = subprocess.call(sys.argv[2:], close_fds=False); ended = time.time(); "
               "u = resource.getrusage(resource.RUSAGE_CHILDREN); "
               "f = open(os.path.join(sys.argv[1], f'usage-{os.getpid()}.txt'), 'w'); "
               "f.write(f'{u.ru_maxrss} {u.ru_utime + u.ru_stime} {started} {ended}'); f.close(); "
               "sys.exit(code)")

# ``pregel infer`` (pregel.cli's main, as ``python -m pregel.cli``) with wall-clock marks (time.time()) of its
# phases, written by each rank to ``marks-<pid>.json`` in the folder given first when the command's work is done:
# the interpreter ready, the command's imports done, then the start and end of the model file's check, the graph's
# load, the engine's run, the gather of the values to rank 0 and the write (functions of the command wrapped in
# place, nothing else changed); rank 0 adds each rank's per-layer compute and communication seconds.
PHASES_CHILD = """
import time
python_ready = time.time()
import json, os, sys
folder, sys.argv = sys.argv[1], ["pregel"] + sys.argv[2:]
import pregel.cli as cli
from pregel.cli.collection import importing
with importing():
    import pregel.job as job
    import vertex_programs.gnn.infer as gnn_infer
marks = {"python": python_ready, "imports": time.time()}


def timed(name, function):
    def wrapper(*args, **kwargs):
        marks.setdefault(name + " start", time.time())
        result = function(*args, **kwargs)
        marks[name + " end"] = time.time()
        return result
    return wrapper


def infer(comm, *args, **kwargs):
    marks["infer start"] = time.time()
    report = run_infer(comm, *args, **kwargs)
    marks["infer end"] = time.time()
    if report.stats_table is not None:
        fields = __import__("pregel.stats", fromlist=["FIELDS"]).FIELDS
        table = report.stats_table
        marks["layers"] = (table[:, :, fields.index("compute_seconds")]
                           + table[:, :, fields.index("comm_seconds")]).tolist()
    with open(os.path.join(folder, f"marks-{os.getpid()}.json"), "w") as f:
        json.dump(dict(marks, rank=comm.rank, parent=os.getppid()), f)
    return report


run_infer = gnn_infer.infer
gnn_infer.infer = infer
gnn_infer.load_checked = timed("model", gnn_infer.load_checked)
for name in ("load_graph", "run", "gather_values", "write_values"):
    setattr(job, name, timed(name, getattr(job, name)))
sys.exit(cli.main())
"""

#: the phases of ``phases``, in order
PHASES = ("start-up", "imports", "MPI + args", "model file", "load", "engine set-up", "layer 1", "layer 2",
          "gather", "write", "wait + rest", "exit", "launcher")


def _launch(folder: str, worker: str, kind: str, ranks: int | None = None, script: str = __file__) -> dict:
    """One whole process (or mpiexec job) of ``worker`` (run as ``script --worker``): wall seconds,
    peak RSS of each process (bytes, one per rank), its processor seconds and its split of the time."""
    usage_folder = tempfile.mkdtemp(prefix="usage-", dir=folder)
    wrapper = [sys.executable, "-c", RSS_WRAPPER, usage_folder]
    if worker == "engine":
        out = os.path.join(folder, f"engine{ranks}.h5")
        mpiexec = shutil.which("mpiexec", path=os.path.dirname(sys.executable)) or "mpiexec"
        command = [mpiexec, "-n", str(ranks)] + wrapper + [
            sys.executable, "-c", PHASES_CHILD, usage_folder, "infer", "--graph", os.path.join(folder, "graph.h5"),
            "--model", os.path.join(folder, "model.pt"), "--out", out, "--quiet"]
    else:
        command = wrapper + [sys.executable, script, "--worker", worker, folder, kind]
    started = time.time()
    done = subprocess.run(command, capture_output=True, text=True)
    ended = time.time()
    wall = ended - started
    files = sorted(os.listdir(usage_folder))
    usage = {name[6:-4]: pathlib.Path(usage_folder, name).read_text().split()
             for name in files if name.startswith("usage-")}
    marks = [json.loads(pathlib.Path(usage_folder, name).read_text()) for name in files if name.startswith("marks-")]
    shutil.rmtree(usage_folder)
    if done.returncode:
        raise RuntimeError(f"{worker} failed: {done.stderr[-3000:]}")
    rss, cpu = [int(u[0]) * 1024 for u in usage.values()], sum(float(u[1]) for u in usage.values())
    if worker != "engine":
        return {"wall": wall, "cpu": cpu, "rss": rss, "split": json.loads(done.stdout.strip().splitlines()[-1])}
    import h5py

    with h5py.File(out, "r") as f:
        split = {"load": float(f.attrs["load_seconds"])}
        split.update({f"layer {i + 1}": float(s) for i, s in enumerate(f.attrs["layer_compute_seconds"])})
        split.update({f"comm {i + 1}": float(s) for i, s in enumerate(f.attrs["layer_comm_seconds"])})
    return {"wall": wall, "cpu": cpu, "rss": rss, "split": split,
            "phases": phases(marks, {int(pid): (float(u[2]), float(u[3])) for pid, u in usage.items()}, started, ended)}


def phases(marks: list, spans: dict, started: float, ended: float) -> list:
    """Per rank (by rank), the seconds of each of ``PHASES`` from the ranks' ``marks`` (PHASES_CHILD),
    the wrappers' (spawn, exit) times ``spans`` by wrapper pid and the job's wall-clock ``started`` /
    ``ended``; each rank's phases add up to the job's wall time."""
    marks = sorted(marks, key=lambda m: m["rank"])
    layers = next(m["layers"] for m in marks if "layers" in m)
    rows = []
    for m in marks:
        spawn, exit_ = spans[m["parent"]]
        span = {name: m.get(f"{name} end", 0.0) - m.get(f"{name} start", 0.0)
                for name in ("model", "load_graph", "run", "gather_values", "write_values")}
        layer = layers[m["rank"]] + [0.0] * (2 - len(layers[m["rank"]]))
        rest = (m["infer end"] - m["model end"] - span["load_graph"] - span["run"] - span["gather_values"]
                - span["write_values"])
        rows.append(dict(zip(PHASES, (
            m["python"] - spawn, m["imports"] - m["python"], m["infer start"] - m["imports"], span["model"],
            span["load_graph"], span["run"] - sum(layer[:2]), layer[0], layer[1], span["gather_values"],
            span["write_values"], rest + (m["model start"] - m["infer start"]), exit_ - m["infer end"],
            (ended - started) - (exit_ - spawn)))))
    return rows


def print_phases(kind: str, results: dict) -> None:
    """The phase table (``PHASES``, seconds) of every engine run in ``results``, one row per rank."""
    engines = {name: r for name, r in results.items() if "phases" in r}
    print(f"{kind}: where the engine's whole job goes (s, per rank; a row adds up to the job's wall time)")
    print(f"  {'run':<14}" + "".join(f"{p:>14}" for p in PHASES) + f"{'total':>9}")
    for name, r in engines.items():
        for rank, row in enumerate(r["phases"]):
            print(f"  {name + ' r' + str(rank):<14}" + "".join(f"{row[p]:>14.3f}" for p in PHASES)
                  + f"{sum(row.values()):>9.2f}")
    print(flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1_000_000)
    parser.add_argument("--avg-degree", type=float, default=10.0)
    parser.add_argument("--features", type=int, default=64)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--classes", type=int, default=16, help="output width of the second layer")
    parser.add_argument("--exponent", type=float, default=2.5, help="power-law degree exponent")
    parser.add_argument("--kinds", nargs="+", default=list(KINDS), choices=KINDS)
    parser.add_argument("--repeats", type=int, default=2, help="runs of each method (best kept)")
    parser.add_argument("--no-edge-index", action="store_true", help="skip PyG's edge_index path")
    parser.add_argument("--layerwise", action="store_true", help="also PyG layer-wise (SAGE)")
    parser.add_argument("--graph", help="an existing graph file to use instead of generating one")
    parser.add_argument("--worker", nargs=3, metavar=("KIND", "FOLDER", "LAYER"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return WORKERS[args.worker[0]](args.worker[1], args.worker[2])
    from pregel.graph_io import read_header

    with tempfile.TemporaryDirectory() as folder:
        graph = os.path.join(folder, "graph.h5")
        started = time.perf_counter()
        if args.graph:
            os.symlink(os.path.abspath(args.graph), graph)
        else:
            write_graph_file(graph, args.nodes, args.avg_degree, args.features, args.exponent)
        header = read_header(graph)
        print(f"2-layer models ({header.num_features} -> {args.hidden} -> {args.classes}) on a graph of "
              f"{header.num_nodes:,} vertices, {header.num_edges:,} edges (ready in "
              f"{time.perf_counter() - started:.0f} s); single-threaded processes, best of "
              f"{args.repeats}, whole processes timed from outside\n", flush=True)
        for kind in args.kinds:
            write_models(folder, kind, [header.num_features, args.hidden, args.classes])
            methods = [("PyG sparse CSR", "pyg-sparse", None), ("engine P=1", "engine", 1),
                       ("engine P=2", "engine", 2)]
            if not args.no_edge_index:
                methods.insert(0, ("PyG edge_index", "pyg-full", None))
            if args.layerwise and kind == "sage":
                methods.insert(2, ("PyG layer-wise NeighborLoader", "pyg-layerwise", None))
            results = run_methods(folder, kind, methods, args.repeats)
            print_table(kind, results)
            print_phases(kind, results)


def run_methods(folder: str, kind: str, methods, repeats: int) -> dict:
    """Each method ``repeats`` times, alternating; the best (shortest wall time) run of each, with
    its output [N, C]."""
    best = {}
    for _ in range(repeats):
        for name, worker, ranks in methods:
            result = _launch(folder, worker, kind, ranks)
            if name not in best or result["wall"] < best[name]["wall"]:
                best[name] = result
    for name, worker, ranks in methods:
        out = os.path.join(folder, f"engine{ranks}.h5" if worker == "engine" else f"{worker}.h5")
        best[name]["output"] = h5_values(out)
    return best


def print_table(kind: str, results: dict) -> None:
    reference_name = "PyG edge_index" if "PyG edge_index" in results else "PyG sparse CSR"
    reference, sparse = results[reference_name]["output"], results["PyG sparse CSR"]["wall"]
    print(f"{kind}: {'method':<30}{'wall s':>8}{'vs sparse':>10}{'CPU s':>7}{'peak RSS MB':>13}"
          f"{'sum RSS MB':>12}{'max |diff|':>11}  split (s)")
    for name, r in results.items():
        diff = float(np.abs(r["output"] - reference).max())
        split = ", ".join(f"{k} {v:.2f}" for k, v in r["split"].items())
        print(f"{'':<{len(kind) + 2}}{name:<30}{r['wall']:>8.2f}{sparse / r['wall']:>9.2f}x{r['cpu']:>7.2f}"
              f"{max(r['rss']) / 2**20:>13,.0f}{sum(r['rss']) / 2**20:>12,.0f}{diff:>11.1e}  {split}")
    print(f"(load average {os.getloadavg()[0]:.1f}; CPU s: user + system seconds of every process of the job)")
    print(flush=True)


if __name__ == "__main__":
    main()
