"""What view-dependent colour costs: the SH stage alone and a whole render, per degree.

Single-threaded (NUMBA_NUM_THREADS=1, torch.set_num_threads(1)): ``sh_to_colors`` forward + backward
on 100k Gaussians, and forward + backward of ``render`` on the 100k-Gaussian 256 x 256 scene of
benchmarks/render.py with RGB colours and with SH coefficients of degree 0..3. Best of 5 runs after
a JIT warm-up. Run: python benchmarks/sh.py
"""

import os

for _var in ("NUMBA_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import sys  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from render import make_scene, step  # noqa: E402

from kernels.splat import render  # noqa: E402
from kernels.splat.sh import num_bases, sh_to_colors, sh_to_colors_backward  # noqa: E402

COUNT, SIZE, REPEATS = 100_000, 256, 5


def sh_stage_seconds(means, coeffs, degree) -> float:
    """Best time of the SH stage's forward + backward (CPU kernels)."""
    campos, v = np.zeros(3), np.ones((len(means), 3), np.float32)
    best = float("inf")
    for _ in range(REPEATS):
        start = time.perf_counter()
        sh_to_colors(means, coeffs, campos, degree)
        sh_to_colors_backward(means, coeffs, campos, degree, v)
        best = min(best, time.perf_counter() - start)
    return best


def main():
    torch.set_num_threads(1)
    params, viewmat, K = make_scene(COUNT, SIZE)
    gen = torch.Generator().manual_seed(1)
    coeffs = torch.randn(COUNT, 16, 3, generator=gen) * 0.3
    means = params[0].numpy()
    for degree in range(4):  # JIT warm-up
        sh_stage_seconds(means[:100], coeffs[:100].numpy(), degree)
        step(lambda *a: render(*a, sh_degree=degree), params[:4] + [coeffs[:, :num_bases(degree)].contiguous()],
             viewmat, K, 64)
    print(f"{'colour':>8} {'SH stage ms':>12} {'render fwd+bwd ms':>18}")
    rgb = min(step(render, params, viewmat, K, SIZE)[0] for _ in range(REPEATS))
    print(f"{'RGB':>8} {'-':>12} {rgb * 1e3:18.1f}")
    for degree in range(4):
        sh = coeffs[:, :num_bases(degree)].contiguous()
        stage = sh_stage_seconds(means, sh.numpy(), degree)
        total = min(step(lambda *a: render(*a, sh_degree=degree), params[:4] + [sh], viewmat, K, SIZE)[0]
                    for _ in range(REPEATS))
        print(f"{'SH ' + str(degree):>8} {stage * 1e3:12.1f} {total * 1e3:18.1f}")
    print(f"{COUNT:,} Gaussians, {SIZE} x {SIZE}, best of {REPEATS} after a JIT warm-up, 1 thread")


if __name__ == "__main__":
    main()
