"""``pregel infer`` with its ghost rows whole and a slice of columns at a time (``--ghost-memory``), whole jobs.

For each number of ranks and each round, in turn: the code before (``--baseline DIR``, a checkout, when
given), this checkout with the default bound, then with each ``--bounds`` MiB. Each run is a whole
``mpiexec -n P python -m pregel.cli infer`` job timed from the outside; the peak RSS of every rank comes
from a wrapper process per rank (``gnn_inference.RSS_WRAPPER``), the layers' compute and communication
seconds from the result file, and every output is compared with the first run's at that P, bit for bit
(across P the sums may add in another order: the hub threshold depends on P). Prints one
line per run, then a table of ranges per (P, configuration): the README's "Ghost rows a slice of columns
at a time".

    python benchmarks/ghost_memory.py --graph g.h5 --model m.pt [--ranks 2,3,4] [--bounds 512,256]
        [--rounds 2] [--baseline OLD_CHECKOUT]

``g.h5`` needs ``/nodes/features`` (``pregel generate ... --features 64``); ``m.pt`` is a model file of
``vertex_programs.gnn.save_model`` (``benchmarks/gnn_inference.py`` writes one beside its graph).
"""

import argparse
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

for _var in ("OMP_NUM_THREADS", "NUMBA_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[_var] = "1"

import h5py  # noqa: E402
import numpy as np  # noqa: E402
from gnn_inference import RSS_WRAPPER  # noqa: E402  (sibling)

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(checkout: str, ranks: int, graph: str, model: str, extra: list, folder: str) -> dict:
    """One whole ``pregel infer`` job from ``checkout``: wall s, peak RSS per rank (MB), the result file's
    load and per-layer (compute, communication) seconds, and its /values."""
    usage = tempfile.mkdtemp(prefix="usage-", dir=folder)
    out = os.path.join(folder, "values.h5")
    mpiexec = shutil.which("mpiexec", path=os.path.dirname(sys.executable)) or "mpiexec"
    command = [mpiexec, "-n", str(ranks), sys.executable, "-c", RSS_WRAPPER, usage, sys.executable, "-m",
               "pregel.cli", "infer", "--graph", graph, "--model", model, "--out", out, "--quiet"] + extra
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=checkout))
    wall = time.perf_counter() - started
    if done.returncode:
        raise RuntimeError(f"pregel infer failed: {done.stderr[-3000:]}")
    rss = [int(p.read_text().split()[0]) >> 10 for p in pathlib.Path(usage).glob("usage-*.txt")]
    shutil.rmtree(usage)
    with h5py.File(out, "r") as f:
        return {"wall": wall, "rss": rss, "load": float(f.attrs["load_seconds"]),
                "layers": list(zip(f.attrs["layer_compute_seconds"], f.attrs["layer_comm_seconds"])),
                "values": f["values"][:]}


def span(values, fmt: str) -> str:
    low, high = min(values), max(values)
    return fmt.format(low) if fmt.format(low) == fmt.format(high) else f"{fmt.format(low)}–{fmt.format(high)}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--graph", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--ranks", default="2,3,4", help="comma-separated numbers of ranks")
    parser.add_argument("--bounds", default="512,256", help="comma-separated --ghost-memory values, MiB")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--baseline", metavar="DIR", help="also run `pregel infer` from this checkout")
    args = parser.parse_args()
    configurations = ([("before", os.path.abspath(args.baseline), [])] if args.baseline else [])
    configurations += [("after, default", HERE, [])]
    configurations += [(f"--ghost-memory {b}", HERE, ["--ghost-memory", b]) for b in args.bounds.split(",")]
    rows = {}
    with tempfile.TemporaryDirectory() as folder:
        for ranks in (int(r) for r in args.ranks.split(",")):
            reference = None
            for round_ in range(args.rounds):
                for name, checkout, extra in configurations:
                    result = run(checkout, ranks, os.path.abspath(args.graph), os.path.abspath(args.model), extra,
                                 folder)
                    values = result.pop("values")  # [N, C]: only the first run's is kept
                    reference = values if reference is None else reference
                    equal = np.array_equal(values, reference)
                    del values
                    layers = ", ".join(f"{c:.1f}+{m:.1f}" for c, m in result["layers"])
                    print(f"P={ranks} round {round_} {name}: whole {result['wall']:.2f} s, load {result['load']:.2f} s,"
                          f" layers (compute+comm) {layers}, peak MB a rank {max(result['rss']):,}-"
                          f"{min(result['rss']):,}, equal {equal}", flush=True)
                    if not equal:
                        raise SystemExit("the outputs differ")
                    rows.setdefault((ranks, name), []).append(result)
    print("\n| P | configuration | whole s | peak MB a rank |\n| --- | --- | --- | --- |")
    for (ranks, name), results in rows.items():
        print(f"| {ranks} | {name} | {span([r['wall'] for r in results], '{:.2f}')} | "
              f"{span([v for r in results for v in r['rss']], '{:,}')} |")


if __name__ == "__main__":
    main()
