"""Forward + backward time per image: Numba CPU splatting kernels vs the dense torch reference.

Single-threaded on both sides (NUMBA_NUM_THREADS=1, torch.set_num_threads(1)), 256 x 256 images with
10k and 100k Gaussians, plus the training-loop size (128 x 128, 3k Gaussians, kernels only). The
reference is dense (every pixel against every visible Gaussian, in checkpointed pixel chunks), so it
runs once per size; the kernels are timed as the best of several runs after a warm-up (JIT compile
excluded). Run: python benchmarks/render.py [--reference-max G]
"""

import os

for _var in ("NUMBA_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import ctypes  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402

from kernels.splat import render  # noqa: E402
from kernels.splat.reference import _render  # noqa: E402


def make_scene(count, size, seed=0):
    """``count`` Gaussians in a 4 x 4 x 3 box 3-6 units in front of the camera, a few pixels wide."""
    gen = torch.Generator().manual_seed(seed)
    means = (torch.rand(count, 3, generator=gen) - 0.5) * torch.tensor([4.0, 4.0, 3.0]) + torch.tensor([0.0, 0.0, 4.5])
    scales = torch.randn(count, 3, generator=gen) * 0.3 - 3.6 - 0.5 * torch.log10(torch.tensor(count / 1e4))
    quats = torch.randn(count, 4, generator=gen)
    opacities = torch.randn(count, generator=gen)
    colors = torch.rand(count, 3, generator=gen)
    focal = 1.2 * size
    K = torch.tensor([[focal, 0.0, size / 2], [0.0, focal, size / 2], [0.0, 0.0, 1.0]])
    return [means, scales, quats, opacities, colors], torch.eye(4), K


def step(fn, params, viewmat, K, size):
    """One forward + backward; returns (seconds, image)."""
    leaves = [p.clone().requires_grad_(True) for p in params]
    start = time.perf_counter()
    image, _ = fn(*leaves, viewmat, K, size, size)
    image.mean().backward()
    return time.perf_counter() - start, image.detach()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference-max", type=int, default=100_000,
                        help="largest Gaussian count to run the (slow) torch reference on")
    args = parser.parse_args()
    torch.set_num_threads(1)
    # The reference allocates and frees many ~16 MB chunk tensors; glibc's adaptive mmap threshold
    # then serves them from a heap that fragments and grows by ~100 MB per chunk (over 20 GB at
    # 100k Gaussians). A fixed 1 MiB threshold returns them to the system on free.
    ctypes.CDLL("libc.so.6").mallopt(-3, 1 << 20)  # M_MMAP_THRESHOLD
    step(render, *make_scene(500, 64), 64)  # JIT warm-up

    rows = []
    for count, size, repeats in ((10_000, 256, 5), (100_000, 256, 3), (3_000, 128, 10)):
        params, viewmat, K = make_scene(count, size)
        kernel_s, image = min(step(render, params, viewmat, K, size) for _ in range(repeats))
        ref_s = diff = None
        if size == 256 and count <= args.reference_max:
            ref_s, ref_image = step(_render, params, viewmat, K, size)
            diff = float((image - ref_image).abs().max())
        rows.append((count, size, kernel_s, repeats, ref_s, diff))

    print(f"{'Gaussians':>9} {'image':>7} {'kernels ms':>11} {'reference ms':>13} {'speed-up':>9} {'max |diff|':>11}")
    for count, size, kernel_s, repeats, ref_s, diff in rows:
        ref = f"{ref_s * 1e3:13.0f}" if ref_s is not None else f"{'-':>13}"
        speed = f"{ref_s / kernel_s:8.0f}x" if ref_s is not None else f"{'-':>9}"
        err = f"{diff:11.1e}" if diff is not None else f"{'-':>11}"
        print(f"{count:>9} {size:>3}x{size:<3} {kernel_s * 1e3:11.1f} {ref} {speed} {err}")
    print("kernels: best of 5/3/10 runs after a JIT warm-up; reference: one run (dense, checkpointed chunks);"
          " forward + backward of mean(image); 1 thread each")


if __name__ == "__main__":
    main()
