"""The optimizer step of Gaussian training at a real model size: the one-pass Adam kernel against the torch
expression it replaced and torch's own Adam, side by side in one run.

A model of ``--gaussians`` Gaussians (default 2,000,000) with SH degree 3 (59 float32 numbers each:
means 3, log-scales 3, quaternions 4, opacity 1, SH 48) and warm moments; each method steps the rows of a
visible fraction (``--visible``, default 1.0 and 0.5: a random mask) with given gradients, 3 times after a
warm-up, each method in a fresh process (single-threaded). Methods:

* ``kernel``: ``VisibleAdam.step_rows`` (``kernels.adam.adam_rows``, the Numba kernel, in place);
* ``torch expression``: the same step through the kernel's torch twin ``kernels.adam._adam_rows`` (the
  expression ``step_rows`` ran before: gathers, about fifteen whole-array passes, scatters);
* ``torch.optim.Adam`` (``foreach=False``, ``foreach=True``, ``fused=True``): dense over every row, as the
  reference 3DGS trainer steps (its default optimizer); its parameters' ``.grad`` are every row's
  gradient, so it runs only at ``--visible 1``.

Reported per method: median seconds a step and the process's peak RSS during the steps above its RSS
before them (the steps' temporaries; Linux's ``clear_refs`` resets the peak after the warm-up). Run::

    python benchmarks/adam.py [--gaussians 2000000] [--visible 1.0 0.5]
"""
import argparse
import os
import subprocess
import sys

for _var in ("OMP_NUM_THREADS", "NUMBA_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[_var] = "1"

CHILD = """
import statistics, sys, time
import torch
torch.set_num_threads(1)
from odin_sched.training.optim import VisibleAdam, default_lrs
import odin_sched.training.optim as optim
from kernels.adam import _adam_rows

method, g, visible = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
tails = {"means": (3,), "scales": (3,), "quats": (4,), "opacities": (), "sh0": (1, 3), "shN": (15, 3)}
gen = torch.Generator().manual_seed(0)
params = {k: torch.randn((g,) + t, generator=gen) for k, t in tails.items()}
rows = torch.nonzero(torch.rand(g, generator=gen) < visible).squeeze(1)
grads = {k: torch.randn((len(rows),) + t, generator=gen) for k, t in tails.items()}
lrs = default_lrs(3.0)
if method.startswith("torch.optim"):
    flags = {"foreach=False": dict(foreach=False), "foreach=True": dict(foreach=True),
             "fused=True": dict(fused=True)}[method.split(" ", 1)[1]]
    leaves = {k: v.requires_grad_(True) for k, v in params.items()}
    for k in leaves:
        leaves[k].grad = grads[k]
    opt = torch.optim.Adam([{"params": [leaves[k]], "lr": lrs[k]} for k in tails], eps=1e-15, **flags)
    step = opt.step
else:
    if method == "torch expression":
        optim.adam_rows = lambda param, *rest: _adam_rows(param.detach(), *rest)
    opt = VisibleAdam(params, lrs, copy=False)
    step = lambda: opt.step_rows(rows, grads)
def peak_kib():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM"))
with torch.no_grad():
    step()  # warm-up: moments non-zero (torch's Adam makes its state here), kernels compiled or loaded
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # the peak so far forgotten: what follows measures the steps' own temporaries
made = peak_kib()
times = []
for _ in range(3):
    start = time.perf_counter()
    with torch.no_grad():
        step()
    times.append(time.perf_counter() - start)
extra = peak_kib() - made
print(statistics.median(times), extra / 1024)
"""

METHODS = ["kernel", "torch expression", "torch.optim.Adam foreach=False", "torch.optim.Adam foreach=True",
           "torch.optim.Adam fused=True"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gaussians", type=int, default=2_000_000)
    parser.add_argument("--visible", type=float, nargs="+", default=[1.0, 0.5])
    args = parser.parse_args()
    print(f"{args.gaussians:,} Gaussians, SH degree 3 (59 numbers each), single-threaded\n")
    print("| method | visible | s a step | peak RSS above the state (MB) |\n| --- | --- | --- | --- |")
    for visible in args.visible:
        for method in METHODS:
            if method.startswith("torch.optim") and visible < 1:
                continue
            out = subprocess.run([sys.executable, "-c", CHILD, method, str(args.gaussians), str(visible)],
                                 capture_output=True, text=True)
            if out.returncode:
                raise SystemExit(f"{method} failed:\n{out.stderr[-2000:]}")
            seconds, extra = (float(x) for x in out.stdout.split())
            print(f"| {method} | {visible:g} | {seconds:.3f} | {extra:,.0f} |", flush=True)


if __name__ == "__main__":
    main()
