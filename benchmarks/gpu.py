"""GPU benchmark: the project's CUDA kernels against their GPU peers, one table, ratios side by side.

Run it on a machine with a CUDA GPU (after ``pip install -e '.[gpu]'``, README, GPU):

    python benchmarks/gpu.py            # 1M-vertex / 10M-edge graph, 10k / 100k / 1M Gaussians at 1080p
    python benchmarks/gpu.py --quick    # 100k / 1M graph, 10k / 100k Gaussians
    NUMBA_ENABLE_CUDASIM=1 python benchmarks/gpu.py --smoke   # tiny sizes: checks the script itself
    python benchmarks/gpu.py --sections ecabfd --no-gsplat     # (e) first, gsplat left out

Sections (each a function below):

a. ``gather_reduce`` sum at F = 1 and F = 64 on the power-law graph of ``pregel.generate`` (in-edge
   CSR) against ``torch.sparse.mm`` with a sparse CSR tensor (cuSPARSE), both checked against each other.
b. PageRank, 20 power iterations: the gather kernel (edge weights 1 / out-degree) against the same
   iteration with ``torch.sparse.mm``; the two results are compared.
c. The rasterizer, forward + backward of one 1920 x 1080 image, the project's CUDA kernels
   (``kernels.splat.render`` on CUDA tensors) against gsplat's CUDA rasterizer when it builds
   (gsplat compiles its extension on first use; otherwise the row says why it did not build).
   The two follow different conventions (docs/rasterizer.md), so their images are not compared. On a
   GPU, torch.profiler's tables of one of our steps per count follow (kernels and host calls).
d. Whole jobs on the device, in this process (P = 1): ``pregel infer --device cuda`` (what
   ``vertex_programs.gnn.infer.infer`` runs) of a 2-layer SAGE (64 -> 64 -> 16, PyG's random
   initialisation) on a power-law graph with 64 features, against PyG's full-graph forward on the
   GPU with ``edge_index`` and with a sparse CSR ``adj_t`` (outputs compared); and steps of
   ``pregel train --device cuda`` (``odin_sched.training.train.train``) against the same training on the CPU.
e. Messages posted beside the compute on a GPU rank: ``mpiexec -n 2 pregel train --device cuda --mode odin``
   with and without ``--send-thread``, in alternating rounds on the same scene (both ranks share the one
   GPU, so this checks whether the thread overlaps MPI's host time per message with the device's work,
   not multi-GPU scaling): median milliseconds per image after the first step (from each run's
   ``--timeline``: the first step compiles the CUDA kernels in each process) and of whole runs, each
   run's communication seconds per rank, messages per rank and the largest relative difference of the
   two trained models (not bit for bit: the CUDA backward's atomics). ``pregel simulate --host-sends``
   charges the thread.
f. The InferTurbo-scale projection of a 2-layer SAGE (64 -> 64 -> 16) from (a) at F = 64: edge-layers
   per second per GPU, bytes per edge per rank of the ghost exchange (hash partition, measured on
   the benchmark graph), and what they give for 10 billion vertices / 100 billion edges on 64 and 512
   GPUs, with 25 GB/s InfiniBand per GPU and ``--load-gbps`` of storage per GPU (InferTurbo: 2 hours).

Times are the best of ``--repeats`` after a warm-up, synchronised. Under the simulator or without
torch CUDA the peers run on torch's CPU and gsplat is skipped: those timings mean nothing.
"""

import argparse
import subprocess
import tempfile
import time
import warnings

import numba
import numpy as np
import torch
from numba import cuda

from bench_kernels import in_edge_csr  # a sibling script: benchmarks/ is on the path when run
from render import make_scene
from kernels._device import across
from kernels.gather import gather_reduce
from kernels.splat import render
from pregel.generate import generate_graph
from pregel.partition import HashPartition

INFINIBAND_BYTES_PER_SECOND = 25e9  # 200 Gb/s HDR per GPU
TARGET_VERTICES, TARGET_EDGES = 10e9, 100e9
INFERTURBO_HOURS = 2.0
SAGE_WIDTHS = (64, 16)  # bytes sent per edge follow the narrower side of each layer (README, GNN)
SIZES = {  # nodes, avg degree, feature widths, PageRank iterations, Gaussian counts, width, height, repeats
    "full": (1_000_000, 10, (1, 64), 20, (10_000, 100_000, 1_000_000), 1920, 1080, 10),
    "quick": (100_000, 10, (1, 64), 20, (10_000, 100_000), 1920, 1080, 5),
    "smoke": (200, 3, (1, 4), 2, (200,), 64, 36, 1),
}
JOBS = {  # SAGE graph (nodes, features, hidden, classes); training scene (Gaussians, cameras, size, steps)
    "full": ((1_000_000, 64, 64, 16), (20_000, 8, 256, 20)),
    "quick": ((100_000, 64, 64, 16), (5_000, 8, 128, 10)),
    "smoke": ((200, 8, 8, 4), (40, 3, 16, 2)),
}
SEND_THREAD_RUNS = {  # (e): Gaussians, cameras, image size, steps, cells, rounds
    "full": (200_000, 16, 512, 16, 256, 2),
    "quick": (50_000, 8, 256, 12, 64, 1),
    "smoke": (40, 3, 16, 2, 4, 1),
}


def progress(message: str) -> None:
    print(f"[gpu.py] {message}", flush=True)


class Device:
    """Where the torch peers run (a CUDA GPU, or torch CPU in smoke runs) and how runs are timed; the
    kernels take tensors through ``kernels._device.across``."""

    def __init__(self):
        self.torch_cuda = torch.cuda.is_available()
        self.torch = torch.device("cuda" if self.torch_cuda else "cpu")

    def sync(self) -> None:
        if self.torch_cuda:
            torch.cuda.synchronize()

    def best_seconds(self, fn, repeats: int) -> float:
        """Best wall time of ``fn()`` over ``repeats`` synchronised calls, after one warm-up call."""
        fn()
        best = float("inf")
        for _ in range(repeats):
            self.sync()
            start = time.perf_counter()
            fn()
            self.sync()
            best = min(best, time.perf_counter() - start)
        return best


def load_graph(nodes: int, avg_degree: float):
    """The power-law graph's out-edge CSR and its in-edge CSR (scipy, rows = destinations, int32)."""
    start = time.perf_counter()
    indptr, indices = generate_graph("powerlaw", nodes, avg_degree, seed=0)
    a_in = in_edge_csr(nodes, indptr, indices)
    progress(f"graph: {nodes} vertices, {a_in.nnz} edges, max in-degree {np.diff(a_in.indptr).max()} "
             f"({time.perf_counter() - start:.1f} s)")
    return indptr, indices, a_in


def torch_csr(a_in, values: np.ndarray, device: Device) -> torch.Tensor:
    """The in-edge CSR [N, N] as a torch sparse CSR tensor with ``values`` [E] on the peer's device."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
        return torch.sparse_csr_tensor(torch.from_numpy(a_in.indptr.astype(np.int64)),
                                       torch.from_numpy(a_in.indices.astype(np.int64)),
                                       torch.from_numpy(values), size=a_in.shape,
                                       check_invariants=False).to(device.torch)


def gather_section(a_in, widths, repeats: int, device: Device):
    """(a) rows: gather_reduce sum vs torch.sparse.mm at each F; returns (rows, {F: kernel seconds})."""
    csr = [cuda.to_device(a) for a in (a_in.indptr.astype(np.int64), a_in.indices)]
    a_torch = torch_csr(a_in, np.ones(a_in.nnz, dtype=np.float32), device)
    rows, seconds = [], {}
    for width in widths:
        progress(f"(a) gather_reduce sum, F = {width}")
        x = torch.from_numpy(np.random.default_rng(width).standard_normal((a_in.shape[0], width),
                                                                          dtype=np.float32))
        x = x.to(device.torch)
        x_kernel = across(x)
        ours = across(gather_reduce(*csr, x_kernel, "sum", check=False))
        peer = torch.sparse.mm(a_torch, x)
        error = float((ours - peer).abs().max() / peer.abs().max().clamp_min(1e-30))
        if error > 1e-4:
            raise SystemExit(f"gather_reduce disagrees with torch.sparse.mm at F = {width}: "
                             f"relative {error:.1e}")
        seconds[width] = device.best_seconds(lambda: gather_reduce(*csr, x_kernel, "sum", check=False),
                                             repeats)
        peer_seconds = device.best_seconds(lambda: torch.sparse.mm(a_torch, x), repeats)
        rows.append(("gather sum", f"F = {width}, {a_in.nnz:.3g} edges", 1e3 * seconds[width],
                     1e3 * peer_seconds, f"torch.sparse.mm ({device.torch.type}); max rel diff {error:.1e}"))
    return rows, seconds


def pagerank_section(indptr, indices, a_in, iterations: int, repeats: int, device: Device):
    """(b) rows: PageRank power iterations (20 but in smoke runs), the gather kernel vs torch.sparse.mm."""
    progress(f"(b) PageRank, {iterations} power iterations")
    num_nodes = a_in.shape[0]
    out_degree = np.diff(indptr)
    weights = (1.0 / out_degree[a_in.indices]).astype(np.float32)  # in-edge u -> v carries 1 / outdeg(u)
    dangling = torch.from_numpy(out_degree == 0).to(device.torch)
    csr = [cuda.to_device(a) for a in (a_in.indptr.astype(np.int64), a_in.indices, weights)]
    a_torch = torch_csr(a_in, weights, device)

    def iterate(spmv):
        rank = torch.full((num_nodes,), 1.0 / num_nodes, device=device.torch)
        for _ in range(iterations):
            rank = 0.15 / num_nodes + 0.85 * (spmv(rank) + rank[dangling].sum() / num_nodes)
        return rank

    def ours(rank):
        return across(gather_reduce(csr[0], csr[1], across(rank), "sum", csr[2], check=False))

    def peer(rank):
        return torch.sparse.mm(a_torch, rank[:, None])[:, 0]

    reference = iterate(peer)
    error = float((iterate(ours) - reference).abs().max() / reference.abs().max())
    if error > 1e-4:
        raise SystemExit(f"PageRank with the kernel disagrees with torch.sparse.mm: relative {error:.1e}")
    ours_seconds = device.best_seconds(lambda: iterate(ours), repeats)
    peer_seconds = device.best_seconds(lambda: iterate(peer), repeats)
    return [("PageRank", f"{iterations} iterations", 1e3 * ours_seconds, 1e3 * peer_seconds,
             f"torch.sparse.mm power iteration ({device.torch.type}); max rel diff {error:.1e}")]


def gsplat_step(params, viewmat, K, width, height):
    """Forward + backward of gsplat's CUDA rasterizer on the same scene (activations applied)."""
    from gsplat import rasterization

    leaves = [p.detach().clone().requires_grad_(True) for p in params]
    means, log_scales, quats, opacity_logits, colors = leaves
    image, _, _ = rasterization(means, quats, log_scales.exp(), torch.sigmoid(opacity_logits), colors,
                                viewmat[None], K[None], width, height)
    image.mean().backward()


def render_step(params, viewmat, K, width, height):
    """Forward + backward of the project's rasterizer (CUDA kernels for CUDA tensors)."""
    leaves = [p.detach().clone().requires_grad_(True) for p in params]
    image, _ = render(*leaves, viewmat, K, width, height)
    image.mean().backward()


def rasterizer_section(counts, width: int, height: int, repeats: int, device: Device, with_gsplat: bool):
    """(c) rows: rasterizer forward + backward per Gaussian count, ours vs gsplat (when it builds and
    ``with_gsplat``)."""
    rows = []
    kernels = "CUDA kernels" if device.torch_cuda else "CPU kernels (no torch CUDA)"
    for count in counts:
        progress(f"(c) rasterizer forward + backward, {count} Gaussians at {width} x {height}")
        params, viewmat, K = make_scene(count, height)
        K[0, 2] = width / 2
        params = [p.to(device.torch) for p in params]
        viewmat, K = viewmat.to(device.torch), K.to(device.torch)
        ours = device.best_seconds(lambda: render_step(params, viewmat, K, width, height), repeats)
        peer, note = float("nan"), "gsplat not built: torch.cuda unavailable"
        if device.torch_cuda and not with_gsplat:
            note = "gsplat left out (--no-gsplat)"
        elif device.torch_cuda:
            try:
                peer = device.best_seconds(lambda: gsplat_step(params, viewmat, K, width, height), repeats)
                note = "gsplat 1.5.3 CUDA rasterizer"
            except Exception as error:  # gsplat builds its extension on first use; report why not
                note = f"gsplat not built: {type(error).__name__}: {str(error).splitlines()[0][:80]}"
        rows.append(("rasterizer", f"{count} Gaussians, {width}x{height}", 1e3 * ours, 1e3 * peer,
                     f"{kernels}; {note}"))
        if device.torch_cuda:
            print_kernel_profile(lambda: render_step(params, viewmat, K, width, height), f"{count} Gaussians")
    return rows


def print_kernel_profile(fn, label: str) -> None:
    """Print torch.profiler's table of one ``fn()`` on the GPU: each kernel's device time (numba's
    kernels too: the profiler reads every launch in the process's context) and the host's CUDA calls
    (launches, copies, synchronisations) with their counts."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    averages = prof.key_averages()
    progress(f"(c) profile of one forward + backward, {label}, by device time:")
    print(averages.table(sort_by="self_device_time_total", row_limit=14, max_name_column_width=60), flush=True)
    progress("(c) the same by host time:")
    print(averages.table(sort_by="self_cpu_time_total", row_limit=14, max_name_column_width=60), flush=True)


def ghost_bytes_per_edge(indptr, indices, ranks: int) -> float:
    """Bytes per edge per layer of the SAGE ghost exchange under the hash partition on ``ranks``:
    each (source, remote destination rank) pair sends the source's row once per layer, at the
    narrower width of each layer (summed over the two layers)."""
    sources = np.repeat(np.arange(indptr.shape[0] - 1), np.diff(indptr))
    partition = HashPartition(indptr.shape[0] - 1, ranks)
    owner_dst = partition.owner(indices)
    remote = partition.owner(sources) != owner_dst
    pairs = np.unique(sources[remote] * ranks + owner_dst[remote]).shape[0]
    return pairs / indices.shape[0] * 4 * sum(SAGE_WIDTHS)


def projection_section(indptr, indices, width: int, kernel_seconds: float, num_edges: int, load_gbps: float):
    """(f) rows: the 2-layer SAGE on 10 billion vertices / 100 billion edges on 64 and 512 GPUs, its
    compute rate from the gather's ``kernel_seconds`` at F = ``width`` (64 but in smoke runs)."""
    progress(f"(f) InferTurbo-scale projection from the F = {width} gather")
    edge_layers_per_second = num_edges / kernel_seconds
    rows = []
    for gpus in (64, 512):
        bytes_per_edge = ghost_bytes_per_edge(indptr, indices, gpus)
        compute = len(SAGE_WIDTHS) * TARGET_EDGES / (edge_layers_per_second * gpus)
        exchange = TARGET_EDGES * bytes_per_edge / gpus / INFINIBAND_BYTES_PER_SECOND
        stored = TARGET_EDGES * 8 + TARGET_VERTICES * 4 * SAGE_WIDTHS[0]  # int64 ids, float32 features
        load = stored / gpus / (load_gbps * 1e9) + TARGET_EDGES * 8 / gpus / INFINIBAND_BYTES_PER_SECOND
        terms = {"compute": compute, "exchange": exchange, "load": load}
        total = sum(terms.values())
        rows.append(("projection", f"{gpus} GPUs, 1e10 V / 1e11 E, hours", total / 3600, INFERTURBO_HOURS,
                     f"{edge_layers_per_second:.3g} edge-layers/s/GPU, "
                     f"{bytes_per_edge:.0f} B sent per edge (2 layers); "
                     + ", ".join(f"{k} {v:.0f} s" for k, v in terms.items())
                     + f"; {max(terms, key=terms.get)} dominates"))
    return rows


def sage_section(folder: str, nodes: int, features: int, hidden: int, classes: int, device: Device):
    """(d) rows: ``pregel infer --device cuda`` (whole job at P = 1) against PyG's full-graph forward on
    the GPU, with ``edge_index`` and with a sparse CSR ``adj_t``; outputs compared."""
    from gnn_inference import _transpose_csr, load_pyg_layers, write_graph_file, write_models
    from pregel.comm import Comm
    from pregel.graph_io import read_graph
    from vertex_programs.gnn.infer import infer

    progress(f"(d) 2-layer SAGE inference, {nodes} vertices, {features} features")
    write_graph_file(f"{folder}/graph.h5", nodes, 10, features, 2.2)
    write_models(folder, "sage", [features, hidden, classes])
    started = time.perf_counter()
    report = infer(Comm(), f"{folder}/graph.h5", f"{folder}/model.pt", f"{folder}/scores.h5", device="cuda")
    ours = time.perf_counter() - started
    graph = read_graph(f"{folder}/graph.h5")
    x = torch.from_numpy(graph.features).to(device.torch)
    src = np.repeat(np.arange(graph.num_nodes, dtype=np.int64), np.diff(graph.indptr))
    edge_index = torch.from_numpy(np.stack([src, graph.indices.astype(np.int64)])).to(device.torch)
    crow, col = _transpose_csr(graph.indptr, graph.indices, graph.num_nodes)
    adj_t = torch.sparse_csr_tensor(torch.from_numpy(crow), torch.from_numpy(col), torch.ones(len(col)),
                                    size=(graph.num_nodes, graph.num_nodes)).to(device.torch)
    layers = [layer.to(device.torch) for layer in load_pyg_layers(folder, "sage")]

    def forward(adjacency):
        with torch.no_grad():
            h = layers[1](layers[0](x, adjacency).relu(), adjacency)
        return h

    rows = []
    for name, adjacency in (("edge_index", edge_index), ("sparse CSR adj_t", adj_t)):
        error = float((forward(adjacency).cpu() - torch.from_numpy(report.values)).abs().max())
        peer = device.best_seconds(lambda adjacency=adjacency: forward(adjacency), 3)
        rows.append(("SAGE inference", f"whole job vs PyG forward ({name})", 1e3 * ours, 1e3 * peer,
                     f"PyG on {device.torch.type}; ours: load + layers + write "
                     f"({1e3 * report.result.compute_seconds:.4g} ms layers); max |diff| {error:.1e}"))
    return rows


def training_section(folder: str, gaussians: int, cameras: int, size: int, steps: int):
    """(d) row: steps of ``pregel train --device cuda`` against the same training on the CPU."""
    from odin_sched.scenes.scene_gen import generate_scene
    from odin_sched.scenes.scene_io import write_scene
    from odin_sched.training.train import TrainConfig, train

    progress(f"(d) training, {gaussians} Gaussians, {cameras} cameras at {size}x{size}, {steps} steps")
    scene = f"{folder}/scene.h5"
    write_scene(scene, generate_scene(gaussians, cameras, size, size, seed=0))
    results = {device: train(TrainConfig(scene, steps, f"{folder}/trained_{device}.h5", eval_every=steps,
                                         progress=False, device=device)) for device in ("cuda", "cpu")}
    per_step = {device: r.wall_time_s / steps for device, r in results.items()}
    gap = abs(results["cuda"].losses[-1] - results["cpu"].losses[-1]) / results["cpu"].losses[-1]
    return [("training step", f"{results['cpu'].num_gaussians} Gaussians at {size}x{size}", 1e3 * per_step["cuda"],
             1e3 * per_step["cpu"], f"pregel train on the CPU; last loss rel diff {gap:.1e}")]


def seconds_per_image_after_first_step(trace_path: str, batch_size: int) -> float:
    """Seconds per image of a ``pregel train --timeline`` run from the end of its first step's events to
    the end of its last step's, over all ranks: the first step (which compiles the CUDA kernels in each
    process) and the final evaluation left out."""
    import json
    import re

    with open(trace_path) as f:
        trace = json.load(f)
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    ends = {}  # step -> latest end (microseconds) of its events on any rank
    for event in events:
        match = re.search(r"\bstep (\d+)", event.get("name", ""))
        if event.get("ph") == "X" and match:
            step = int(match.group(1))
            ends[step] = max(ends.get(step, 0.0), event["ts"] + event["dur"])
    last = max(ends)
    return (ends[last] - ends[1]) * 1e-6 / (batch_size * (last - 1))


def send_thread_section(folder: str, gaussians: int, cameras: int, size: int, steps: int, cells: int,
                        rounds: int):
    """(e) row: odin at P = 2 on the device with its messages posted by a thread beside the compute
    (``pregel train --send-thread``) against posted inline, ``rounds`` alternating pairs of runs; times
    per image after the first step (``seconds_per_image_after_first_step``), whole runs in the notes."""
    from odin_scale import MPIEXEC, PREGEL, per_rank, read_run  # a sibling script; it sets one thread a rank
    from odin_sched.scenes.scene_gen import generate_scene
    from odin_sched.scenes.scene_io import read_scene, write_scene

    progress(f"(e) odin P = 2 on the device, {gaussians} Gaussians, {cameras} cameras at {size}x{size}, "
             f"{steps} steps, {cells} cells, {rounds} round(s), with and without --send-thread")
    scene = f"{folder}/send_thread_scene.h5"
    write_scene(scene, generate_scene(gaussians, cameras, size, size, seed=0))
    steady, whole, columns, models = {False: [], True: []}, {False: [], True: []}, {}, {}
    for _ in range(rounds):
        for thread in (False, True):
            out, trace = f"{folder}/send_thread_{thread}.h5", f"{folder}/send_thread_{thread}.json"
            subprocess.run([MPIEXEC, "-n", "2", PREGEL, "train", "--scene", scene, "--steps", str(steps),
                            "--batch-size", "2", "--mode", "odin", "--device", "cuda", "--cells", str(cells),
                            "--eval-every", str(steps), "--seed", "0", "--out", out, "--timeline", trace]
                           + ["--send-thread"] * thread, check=True)
            run = read_run(out)
            steady[thread].append(seconds_per_image_after_first_step(trace, 2))
            whole[thread].append(1.0 / (2 * run["attrs"]["steps_per_second"]))
            columns[thread] = run["columns"]
            trained = read_scene(out, lazy_images=True)
            trained.images.close()
            models[thread] = trained.gaussians()  # every parameter array, the SH coefficients included
    gap = max(float(np.max(np.abs(models[True][name] - models[False][name])
                           / np.maximum(np.abs(models[False][name]), 1e-6))) for name in models[False])
    return [("send thread", f"odin P=2 on one GPU, ms per image after step 1, {gaussians} Gaussians at "
             f"{size}x{size}", 1e3 * float(np.median(steady[True])), 1e3 * float(np.median(steady[False])),
             f"posted inline (medians of {rounds}); whole runs {1e3 * float(np.median(whole[True])):.4g} / "
             f"{1e3 * float(np.median(whole[False])):.4g} ms per image; last round: comm s/rank "
             f"{per_rank(columns[True], 'comm_seconds', fmt='{:.3g}')} with the thread, "
             f"{per_rank(columns[False], 'comm_seconds', fmt='{:.3g}')} inline; messages/rank "
             f"{per_rank(columns[True], 'messages_sent')}; models' largest rel diff {gap:.1e}")]


def print_table(rows) -> None:
    header = ("section", "case", "ours", "peer", "ours / peer", "peer and notes")
    lines = [header] + [(s, c, f"{o:.4g}", f"{p:.4g}", f"{o / p:.2f}" if p == p else "-", n)
                        for s, c, o, p, n in rows]
    widths = [max(len(line[i]) for line in lines) for i in range(5)]
    print("\ntimes in ms (projection: hours)")
    for k, line in enumerate(lines):
        print("  ".join(cell.ljust(w) for cell, w in zip(line, widths)) + "  " + line[5])
        if k == 0:
            print("-" * (sum(widths) + 2 * 5 + len("peer and notes")))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="smaller graph and scenes")
    size.add_argument("--smoke", action="store_true", help="tiny sizes (for the simulator)")
    parser.add_argument("--load-gbps", type=float, default=2.0,
                        help="storage read bandwidth per GPU for the projection's load term, GB/s")
    parser.add_argument("--sections", default="abcdef",
                        help="the sections to run, in this order (letters of the list above; f needs a)")
    parser.add_argument("--no-gsplat", action="store_true",
                        help="leave gsplat out of (c) (its first use builds its CUDA extension: minutes)")
    args = parser.parse_args(argv)
    if set(args.sections) - set("abcdef") or len(set(args.sections)) != len(args.sections):
        parser.error(f"--sections takes distinct letters of abcdef, not {args.sections!r}")
    if "f" in args.sections and "a" not in args.sections.split("f")[0]:
        parser.error("--sections: f projects from a's gather, so a must come before f")
    preset = "smoke" if args.smoke else "quick" if args.quick else "full"
    nodes, avg_degree, widths, iterations, counts, width, height, repeats = SIZES[preset]
    graph_sizes, scene_sizes = JOBS[preset]
    device = Device()
    gpu = "Numba CUDA simulator" if numba.config.ENABLE_CUDASIM else cuda.get_current_device().name
    progress(f"kernels on: {gpu}; torch peers on: {device.torch}")

    graph = load_graph(nodes, avg_degree) if set(args.sections) & set("abf") else None
    gather_seconds = {}
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for section in args.sections:
            started = time.perf_counter()
            if section == "a":
                new_rows, gather_seconds = gather_section(graph[2], widths, repeats, device)
            elif section == "b":
                new_rows = pagerank_section(*graph, iterations, repeats, device)
            elif section == "c":
                new_rows = rasterizer_section(counts, width, height, repeats, device, not args.no_gsplat)
            elif section == "d":
                new_rows = sage_section(folder, *graph_sizes, device) + training_section(folder, *scene_sizes)
            elif section == "e":
                new_rows = send_thread_section(folder, *SEND_THREAD_RUNS[preset])
            else:
                new_rows = projection_section(graph[0], graph[1], widths[-1], gather_seconds[widths[-1]],
                                              graph[2].nnz, args.load_gbps)
            for row in new_rows:  # each row as it comes, so that a run stopped later keeps it
                progress(f"({section}) {row[0]}, {row[1]}: ours {row[2]:.4g}, peer {row[3]:.4g}; {row[4]}")
            progress(f"({section}) took {time.perf_counter() - started:.1f} s")
            rows += new_rows
    print_table(rows)


if __name__ == "__main__":
    main()
