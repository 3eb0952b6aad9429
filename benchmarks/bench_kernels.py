"""Benchmark: gather_reduce 'sum' against scipy.sparse and torch, single-threaded.

On a power-law graph from ``pregel.generate`` (default 1M vertices, 10M edges) this times the
in-edge gather ``out[v] = sum over in-edges (u, v) of x[u]`` with F = 1 and F = 64 features
(float32) for:

* ``numba``            kernels.gather.gather_reduce(indptr, indices, x, 'sum')
* ``numba+weights``    the same with weights = A.data (reads the edge values as scipy does)
* ``scipy``            A @ x with A the in-edge scipy.sparse.csr_matrix
* ``torch.sparse.mm``  torch.sparse.mm(A_csr, x) with a torch sparse CSR tensor
* ``torch.index_add_`` out.index_add_(0, dst, x[src])

All on one thread (NUMBA_NUM_THREADS = OMP_NUM_THREADS = 1, torch.set_num_threads(1)), the
warm-up (JIT compile) excluded; the methods run in interleaved rounds (so load from other processes
hits them alike) and each keeps its best of ``--repeats``. Every result is checked against scipy.
The last column is each method's time over numba's (unweighted): above 1 means numba is faster.

With ``--gpu`` (a CUDA GPU) it instead times the CUDA kernel against torch.sparse.mm (cuSPARSE) on
the GPU, inputs already on the device, synchronised after each call.

    python benchmarks/bench_kernels.py                      # 1M vertices, 10M edges
    python benchmarks/bench_kernels.py --nodes 100000       # a quick run
"""

import os

for _var in ("NUMBA_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import scipy.sparse as sp  # noqa: E402
import torch  # noqa: E402

from kernels.gather import gather_reduce  # noqa: E402
from pregel.generate import generate_graph  # noqa: E402


def timed(fn, sync) -> float:
    """Seconds for one call of ``fn`` (``sync`` waits for a GPU to finish)."""
    start = time.perf_counter()
    fn()
    sync()
    return time.perf_counter() - start


def in_edge_csr(num_nodes: int, indptr: np.ndarray, indices: np.ndarray) -> sp.csr_matrix:
    """The in-edge CSR (rows = destinations, columns = sources) of an out-edge CSR, all ones."""
    out_edges = sp.csr_matrix((np.ones(indices.shape[0], dtype=np.float32), indices, indptr),
                              shape=(num_nodes, num_nodes))
    return out_edges.T.tocsr()


def cpu_methods(a_in: sp.csr_matrix):
    """name -> function(x [N] or [N, F] NumPy) -> NumPy result, for each CPU method timed."""
    indptr, indices, weights = a_in.indptr, a_in.indices, a_in.data
    a_torch = torch.sparse_csr_tensor(torch.from_numpy(indptr.astype(np.int64)),
                                      torch.from_numpy(indices.astype(np.int64)),
                                      torch.from_numpy(weights), size=a_in.shape,
                                      check_invariants=False)
    dst = torch.from_numpy(np.repeat(np.arange(a_in.shape[0]), np.diff(indptr)))
    src = torch.from_numpy(indices.astype(np.int64))

    def as_2d(x):
        return torch.from_numpy(x.reshape(x.shape[0], -1))

    def index_add(x):
        xt = as_2d(x)
        out = torch.zeros_like(xt).index_add_(0, dst, xt[src])
        return out.numpy().reshape(x.shape)

    return {
        "numba": lambda x: gather_reduce(indptr, indices, x, "sum", check=False),
        "numba+weights": lambda x: gather_reduce(indptr, indices, x, "sum", weights, check=False),
        "scipy": lambda x: a_in @ x,
        "torch.sparse.mm": lambda x: torch.sparse.mm(a_torch, as_2d(x)).numpy().reshape(x.shape),
        "torch.index_add_": index_add,
    }


def gpu_methods(a_in: sp.csr_matrix):
    """name -> function(x device array) -> device result, for the GPU methods (inputs on the GPU)."""
    from numba import cuda

    indptr, indices, weights = (cuda.to_device(a) for a in (a_in.indptr, a_in.indices, a_in.data))
    a_torch = torch.sparse_csr_tensor(torch.from_numpy(a_in.indptr.astype(np.int64)),
                                      torch.from_numpy(a_in.indices.astype(np.int64)),
                                      torch.from_numpy(a_in.data), size=a_in.shape,
                                      check_invariants=False).cuda()

    def sparse_mm(x):
        xt = torch.as_tensor(x, device="cuda")
        return torch.sparse.mm(a_torch, xt.reshape(xt.shape[0], -1)).reshape(xt.shape)

    return {
        "numba": lambda x: gather_reduce(indptr, indices, x, "sum", check=False),
        "numba+weights": lambda x: gather_reduce(indptr, indices, x, "sum", weights, check=False),
        "torch.sparse.mm": sparse_mm,
    }


def to_host(result) -> np.ndarray:
    """A method's result as a NumPy array (copied from the GPU if need be)."""
    if isinstance(result, torch.Tensor):
        return result.cpu().numpy()
    return result.copy_to_host() if hasattr(result, "copy_to_host") else np.asarray(result)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=1_000_000, help="number of vertices")
    parser.add_argument("--avg-degree", type=float, default=10.0, help="mean out-degree")
    parser.add_argument("--features", type=int, nargs="+", default=[1, 64], help="feature widths F")
    parser.add_argument("--repeats", type=int, default=5, help="timed rounds (best kept)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--gpu", action="store_true", help="time the CUDA kernel on a GPU instead")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)

    start = time.perf_counter()
    indptr, indices = generate_graph("powerlaw", args.nodes, args.avg_degree, seed=args.seed)
    a_in = in_edge_csr(args.nodes, indptr, indices)
    num_edges = a_in.nnz
    print(f"graph: powerlaw, {args.nodes} vertices, {num_edges} edges, max in-degree "
          f"{np.diff(a_in.indptr).max()}, max out-degree {np.diff(indptr).max()}, "
          f"index dtype {a_in.indices.dtype} (setup {time.perf_counter() - start:.1f} s)")
    if args.gpu:
        from numba import cuda

        funcs, sync = gpu_methods(a_in), cuda.synchronize
        print(f"GPU: {cuda.get_current_device().name}; best of {args.repeats} after a warm-up")
    else:
        funcs, sync = cpu_methods(a_in), (lambda: None)
        print(f"threads: numba {os.environ['NUMBA_NUM_THREADS']}, torch {torch.get_num_threads()}; "
              f"best of {args.repeats} interleaved rounds after a warm-up")

    rng = np.random.default_rng(args.seed)
    header = f"{'method':<18} {'F':>3} {'seconds':>9} {'edges/s':>10} {'t / t_numba':>12}"
    print(header)
    print("-" * len(header))
    summary = []
    for width in args.features:
        shape = (args.nodes,) if width == 1 else (args.nodes, width)
        x = rng.standard_normal(shape).astype(np.float32)
        reference = a_in @ x
        scale = float(np.abs(reference).max())
        x_in = cuda.to_device(x) if args.gpu else x
        for name, fn in funcs.items():  # warm-up (JIT compile) and check
            result = to_host(fn(x_in))
            if not np.allclose(result, reference, rtol=1e-4, atol=1e-5 * scale):
                raise SystemExit(f"{name} (F={width}) disagrees with scipy: max difference "
                                 f"{np.abs(result - reference).max()}")
        del result
        times = {name: float("inf") for name in funcs}
        for _ in range(args.repeats):
            for name, fn in funcs.items():
                times[name] = min(times[name], timed(lambda: fn(x_in), sync))
        for name, seconds in times.items():
            print(f"{name:<18} {width:>3} {seconds:>9.4f} {num_edges / seconds:>10.3g} "
                  f"{seconds / times['numba']:>12.2f}", flush=True)
        torch_best = min((name for name in times if name.startswith("torch")), key=times.get)
        versus_scipy = "" if args.gpu else (
            f"{times['scipy'] / times['numba']:.2f}x scipy "
            f"({times['scipy'] / times['numba+weights']:.2f}x with weights) and ")
        summary.append(f"F={width}: numba is {versus_scipy}{times[torch_best] / times['numba']:.2f}x "
                       f"the faster torch variant, {torch_best}")
    print("all results agree with scipy (rtol 1e-4)")
    for line in summary:
        print(line)


if __name__ == "__main__":
    main()
