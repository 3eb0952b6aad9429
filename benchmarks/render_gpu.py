"""The CUDA rasterizer on a real GPU: agreement with the CPU kernels, and forward+backward time.

Needs a CUDA device (run on a GPU machine). For scenes of 10k and 100k Gaussians at 256 × 256 it
renders on the CPU kernels and on the CUDA kernels, compares images and the five gradients, and
times CUDA forward+backward (best of 20 after a warm-up, synchronised).

    python benchmarks/render_gpu.py
"""

import time

import torch  # noqa: E402

from render import make_scene  # noqa: E402  (a sibling script: benchmarks/ is on the path when run)
from kernels.splat import render  # noqa: E402

NAMES = ("means", "scales", "quats", "opacities", "colors")


def forward_backward(params, viewmat, K, size):
    """Image and the five gradients of mean(image), for tensors on any device."""
    leaves = [p.detach().clone().requires_grad_(True) for p in params]
    image, _ = render(*leaves, viewmat, K, size, size)
    image.mean().backward()
    return image.detach(), [leaf.grad for leaf in leaves]


def main():
    assert torch.cuda.is_available(), "needs a CUDA device"
    print(f"device: {torch.cuda.get_device_name()}")
    print(f"{'Gaussians':>9} {'image':>8} {'cuda ms':>9} {'max |image diff|':>17} {'max rel grad diff':>18}")
    for count in (10_000, 100_000):
        size = 256
        params, viewmat, K = make_scene(count, size)
        cpu_image, cpu_grads = forward_backward(params, viewmat, K, size)
        gpu = [p.cuda() for p in params]
        gpu_view, gpu_K = viewmat.cuda(), K.cuda()
        forward_backward(gpu, gpu_view, gpu_K, size)  # warm-up (compiles the kernels)
        best = float("inf")
        for _ in range(20):
            torch.cuda.synchronize()
            started = time.perf_counter()
            gpu_image, gpu_grads = forward_backward(gpu, gpu_view, gpu_K, size)
            torch.cuda.synchronize()
            best = min(best, time.perf_counter() - started)
        image_diff = (gpu_image.cpu() - cpu_image).abs().max().item()
        rel = max(((g.cpu() - c).abs().max() / c.abs().max().clamp_min(1e-12)).item()
                  for g, c in zip(gpu_grads, cpu_grads))
        print(f"{count:>9} {size}x{size} {1000 * best:>9.2f} {image_diff:>17.2e} {rel:>18.2e}")


if __name__ == "__main__":
    main()
