"""Full-graph GNN inference: the engine at P = 1 and P = 2 against PyG layer-wise and full-graph inference.

One run generates a power-law graph with features (default 1M vertices, 10M edges, 64 features),
builds a 2-layer GraphSAGE (hidden width 64, PyG's random initialisation: the timings do not
depend on training) and saves it twice: with ``vertex_programs.gnn.save_model`` for the engine
and as a PyG state dict. Then each method runs in its own process, single-threaded:

* engine P = 1 and P = 2: ``vertex_programs.gnn.infer.infer`` (what ``pregel infer`` runs) in its
  own ``mpiexec`` job, after an untimed run on a 1,000-vertex graph in the same processes (it
  compiles the kernels or loads them from numba's disk cache: a fixed cost per process);
* PyG layer-wise: the ``inference`` loop of PyG's reddit / ogbn-products examples — a
  ``NeighborLoader`` with ``num_neighbors=[-1]`` over all vertices, every layer over every batch
  before the next layer;
* PyG full graph: ``conv2(relu(conv1(x, edge_index)), edge_index)`` on the whole graph;
* PyG full graph, sparse CSR: the same with the transposed adjacency ``adj_t`` in place of
  ``edge_index`` (a ``torch_sparse.SparseTensor`` when torch-sparse is installed, else a
  ``torch.sparse_csr_tensor``), PyG's fastest CPU configuration: the convs aggregate with one
  sparse-matrix product instead of gathering a message per edge and scattering it back.

Each process reads the graph file itself. Reported per method: load seconds (file to memory; for
the engine, building the distributed graph), forward seconds (the layers; for the engine, the
superstep loop), total seconds (load + forward; for the engine, the whole ``infer`` call, which
also checks the inputs, gathers ``/values`` on rank 0 and writes the result file; PyG writes
nothing), peak RSS (``VmHWM``; for P = 2 the max and the sum over ranks), and the largest
difference of the output to the full-graph forward pass; then the engine's per-layer split.

``NeighborLoader`` samples with ``pyg-lib`` or ``torch-sparse``; neither has wheels on PyPI for
this torch, so when both are missing the loader is given a sampler whose one-hop, all-neighbour
sampling is a few vectorised torch calls (the same batches: seeds first, then their in-neighbours).

    .venv/bin/python benchmarks/gnn_inference.py [--nodes 1000000 --avg-degree 10 --features 64]
"""

import argparse
import json
import os
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


def peak_rss_bytes() -> int:
    """This process's peak resident set size (VmHWM)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


# ---------------------------------------------------------------- workers (one process each)

def engine_worker(folder: str) -> None:
    """Inside mpiexec: ``infer`` on the tiny graph of ``folder/warm`` (loads the compiled kernels),
    then, timed, on the folder's graph and model; rank 0 prints one JSON line."""
    from pregel.comm import Comm
    from pregel.stats import FIELDS
    from vertex_programs.gnn.infer import infer

    comm = Comm()
    warm = os.path.join(folder, "warm")
    started = time.perf_counter()
    infer(comm, os.path.join(warm, "graph.h5"), os.path.join(warm, "model.pt"),
          os.path.join(warm, f"engine{comm.size}.h5"))
    warm_seconds = time.perf_counter() - started
    comm.barrier()
    started = time.perf_counter()
    report = infer(comm, os.path.join(folder, "graph.h5"), os.path.join(folder, "model.pt"),
                   os.path.join(folder, f"engine{comm.size}.h5"))
    seconds = time.perf_counter() - started
    rss = comm.allgather(peak_rss_bytes())
    if comm.rank == 0:
        table = report.stats_table
        print(json.dumps({"load": report.load_seconds, "compute": report.result.compute_seconds,
                          "total": seconds, "rss": rss, "warm_up": warm_seconds,
                          "layers": {name: table[:, :, FIELDS.index(name)].tolist()
                                     for name in ("compute_seconds", "comm_seconds", "bytes_sent")}}))


def _pyg_inputs(folder: str):
    """(x [N, F], edge_index [2, E], the 2 SAGE layers with the saved weights, load seconds)."""
    import torch

    from pregel.graph_io import read_graph

    torch.set_num_threads(1)
    started = time.perf_counter()
    graph = read_graph(os.path.join(folder, "graph.h5"))
    src = np.repeat(np.arange(graph.num_nodes, dtype=np.int64), np.diff(graph.indptr))
    edge_index = torch.from_numpy(np.stack([src, graph.indices.astype(np.int64)]))
    x = torch.from_numpy(graph.features)
    del graph, src
    load_seconds = time.perf_counter() - started
    return x, edge_index, _sage_layers(torch.load(os.path.join(folder, "pyg.pt"))), load_seconds


def _sage_layers(spec: dict):
    from torch_geometric.nn import SAGEConv

    layers = [SAGEConv(spec["widths"][i], spec["widths"][i + 1]) for i in range(len(spec["widths"]) - 1)]
    for layer, state in zip(layers, spec["states"]):
        layer.load_state_dict(state)
    return layers


def pyg_full_worker(folder: str) -> None:
    """PyG's full-graph forward pass on one process; prints one JSON line, saves the output."""
    x, edge_index, layers, load_seconds = _pyg_inputs(folder)
    _pyg_forward(folder, "pyg_full", layers, x, edge_index, load_seconds)


def _pyg_forward(folder: str, name: str, layers, x, adjacency, load_seconds: float, **extra) -> None:
    """Run the SAGE layers (ReLU between them) over ``adjacency`` (edge_index or a sparse adj_t), save
    the output as NAME.npy and print one JSON line with the timings, peak RSS and ``extra``."""
    import torch

    started = time.perf_counter()
    with torch.no_grad():
        for i, conv in enumerate(layers):
            x = conv(x, adjacency)
            if i < len(layers) - 1:
                x = x.relu()
    seconds = time.perf_counter() - started
    np.save(os.path.join(folder, f"{name}.npy"), x.numpy())
    print(json.dumps({"load": load_seconds, "compute": seconds, "total": load_seconds + seconds,
                      "rss": [peak_rss_bytes()], **extra}))


def pyg_sparse_worker(folder: str) -> None:
    """PyG's full-graph forward pass with the adjacency as a sparse CSR matrix ``adj_t`` (rows
    are destinations), built at load time; prints one JSON line, saves the output."""
    import torch
    import torch_geometric.typing

    from pregel.graph_io import read_graph

    torch.set_num_threads(1)
    started = time.perf_counter()
    graph = read_graph(os.path.join(folder, "graph.h5"))
    crow, col = _transpose_csr(graph.indptr, graph.indices, graph.num_nodes)
    n = graph.num_nodes
    if torch_geometric.typing.WITH_TORCH_SPARSE:
        from torch_sparse import SparseTensor

        adj_t = SparseTensor(rowptr=torch.from_numpy(crow), col=torch.from_numpy(col), sparse_sizes=(n, n))
    else:
        adj_t = torch.sparse_csr_tensor(torch.from_numpy(crow), torch.from_numpy(col),
                                        torch.ones(len(col)), size=(n, n))
    x = torch.from_numpy(graph.features)
    del graph
    load_seconds = time.perf_counter() - started
    layers = _sage_layers(torch.load(os.path.join(folder, "pyg.pt")))
    kind = "SparseTensor" if torch_geometric.typing.WITH_TORCH_SPARSE else "torch.sparse_csr_tensor"
    _pyg_forward(folder, "pyg_sparse", layers, x, adj_t, load_seconds, kind=kind)


def _transpose_csr(indptr, indices, n):
    """(crow [N + 1] int64, col [E] int64) of the in-edge CSR (rows = destinations, each row's
    sources ascending) of an out-edge CSR."""
    import scipy.sparse as sp

    a_t = sp.csr_matrix((np.ones(len(indices), np.int8), indices, indptr), shape=(n, n)).T.tocsr()
    return a_t.indptr.astype(np.int64), a_t.indices.astype(np.int64)


def pyg_layerwise_worker(folder: str) -> None:
    """PyG layer-wise inference with ``NeighborLoader(num_neighbors=[-1])``, as PyG's reddit
    example's ``inference``; prints one JSON line, saves the output."""
    import torch
    from torch_geometric.data import Data
    from torch_geometric.loader import NeighborLoader

    x_all, edge_index, layers, load_seconds = _pyg_inputs(folder)
    started = time.perf_counter()
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
    seconds = time.perf_counter() - started
    np.save(os.path.join(folder, "pyg_layerwise.npy"), x_all.numpy())
    print(json.dumps({"load": load_seconds, "compute": seconds, "total": load_seconds + seconds,
                      "rss": [peak_rss_bytes()]}))


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


WORKERS = {"engine": engine_worker, "pyg-full": pyg_full_worker, "pyg-sparse": pyg_sparse_worker,
           "pyg-layerwise": pyg_layerwise_worker}


# ---------------------------------------------------------------- driver

def _launch(folder: str, worker: str, ranks: int | None = None) -> dict:
    command = [sys.executable, __file__, "--worker", worker, folder]
    if ranks is not None:
        mpiexec = shutil.which("mpiexec", path=os.path.dirname(sys.executable)) or "mpiexec"
        command = [mpiexec, "-n", str(ranks), sys.executable, "-m", "mpi4py"] + command[1:]
    out = subprocess.run(command, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def write_inputs(folder: str, nodes: int, avg_degree: float, features: int, hidden: int, classes: int,
                 exponent: float) -> int:
    """The graph file and both model files in ``folder``; returns the number of edges."""
    import torch
    from torch_geometric.nn import SAGEConv

    from pregel.generate import generate_graph, random_features
    from pregel.graph_io import GraphData, write_graph
    from vertex_programs.gnn import save_model

    indptr, indices = generate_graph("powerlaw", nodes, avg_degree, seed=SEED, exponent=exponent)
    x = random_features(None, nodes, features, np.random.default_rng(SEED))
    write_graph(os.path.join(folder, "graph.h5"), GraphData(indptr, indices, features=x))
    torch.manual_seed(SEED)
    widths = [features, hidden, classes]
    layers = [SAGEConv(widths[i], widths[i + 1]) for i in range(2)]
    save_model(os.path.join(folder, "model.pt"), layers)
    torch.save({"widths": widths, "states": [layer.state_dict() for layer in layers]},
               os.path.join(folder, "pyg.pt"))
    return len(indices)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1_000_000)
    parser.add_argument("--avg-degree", type=float, default=10.0)
    parser.add_argument("--features", type=int, default=64)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--classes", type=int, default=16, help="output width of the second layer")
    parser.add_argument("--exponent", type=float, default=2.5, help="power-law degree exponent")
    parser.add_argument("--worker", nargs=2, metavar=("KIND", "FOLDER"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return WORKERS[args.worker[0]](args.worker[1])

    import h5py

    with tempfile.TemporaryDirectory() as folder:
        os.mkdir(os.path.join(folder, "warm"))
        write_inputs(os.path.join(folder, "warm"), 1000, 5, args.features, args.hidden, args.classes,
                     args.exponent)
        started = time.perf_counter()
        edges = write_inputs(folder, args.nodes, args.avg_degree, args.features, args.hidden, args.classes,
                             args.exponent)
        print(f"2-layer GraphSAGE ({args.features} -> {args.hidden} -> {args.classes}, mean) on a power-law "
              f"graph: {args.nodes:,} vertices, {edges:,} edges "
              f"(written in {time.perf_counter() - started:.0f} s); "
              "single-threaded processes\n", flush=True)
        results = {}
        for name, worker, ranks in (("PyG full graph", "pyg-full", None),
                                    ("PyG full graph, sparse CSR", "pyg-sparse", None),
                                    ("PyG layer-wise NeighborLoader", "pyg-layerwise", None),
                                    ("engine P=1", "engine", 1), ("engine P=2", "engine", 2)):
            results[name] = _launch(folder, worker, ranks)
            if worker == "engine":
                with h5py.File(os.path.join(folder, f"engine{ranks}.h5")) as f:
                    results[name]["output"] = f["values"][:]
            else:
                results[name]["output"] = np.load(os.path.join(folder, worker.replace("-", "_") + ".npy"))
    reference = results["PyG full graph"]
    print(f"{'method':<32}{'load s':>8}{'forward s':>11}{'total s':>9}{'total vs full':>15}"
          f"{'peak RSS MB':>13}{'sum RSS MB':>12}{'max |diff|':>12}")
    for name, r in results.items():
        diff = float(np.abs(r["output"] - reference["output"]).max())
        print(f"{name:<32}{r['load']:>8.2f}{r['compute']:>11.2f}{r['total']:>9.2f}"
              f"{r['total'] / reference['total']:>15.2f}{max(r['rss']) / 2**20:>13,.0f}"
              f"{sum(r['rss']) / 2**20:>12,.0f}{diff:>12.2e}")
    print(f"(sparse CSR baseline: adj_t is a {results['PyG full graph, sparse CSR']['kind']})")
    print("\nengine per layer and rank (compute s / communication s / MB sent); the untimed warm-up "
          "on a 1,000-vertex graph took " + ", ".join(f"{r['warm_up']:.2f} s ({name})"
                                                   for name, r in results.items() if "warm_up" in r))
    for name, r in results.items():
        if "layers" not in r:
            continue
        layers = r["layers"]
        for rank, (compute, comm, sent) in enumerate(zip(layers["compute_seconds"], layers["comm_seconds"],
                                                         layers["bytes_sent"])):
            print(f"  {name}, rank {rank}: " + "; ".join(
                f"layer {i + 1} {c:.2f} / {m:.2f} / {b / 2**20:.1f}"
                for i, (c, m, b) in enumerate(zip(compute, comm, sent))))


if __name__ == "__main__":
    main()
