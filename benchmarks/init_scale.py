"""Initialisation at real sizes: the k-d-tree initial scales (``odin_sched.scenes.knn``) and the whole
``pregel train`` command from a large SfM-like point cloud.

1. ``init_gaussians`` on clouds of 200,000 and 2,000,000 points (each in a fresh process): time and
   the process's peak RSS.
2. ``pregel train --steps 4`` on a scene whose ``/init`` cloud has 2,000,000 points (start-up,
   initialisation, 4 steps, write), against the same command started from a PLY of the same initial
   Gaussians (``--init-ply``): wall time and peak RSS of each command (targets: <= 1.5x and <= 1.3x).

The clouds are the ground-truth means of a generated scene, each repeated with Gaussian jitter of
a tenth of the mean ground-truth scale, as a dense SfM cloud clusters on surfaces. Single-threaded.
Heavy (several GB): run under the shared lock::

    flock /tmp/heavy.lock python benchmarks/init_scale.py [--work DIR] [--sizes 200000 2000000]
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

for _var in ("OMP_NUM_THREADS", "NUMBA_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[_var] = "1"

import numpy as np  # noqa: E402

INIT_CHILD = """
import sys, time, numpy as np, torch
torch.set_num_threads(1)
from odin_sched.training.train import init_gaussians
cloud = np.load(sys.argv[1])
t0 = time.perf_counter()
init_gaussians(cloud["means"], cloud["colors"])
print(time.perf_counter() - t0)
"""


def cloud(base_means: np.ndarray, spread: float, points: int, seed: int = 0) -> tuple:
    """``points`` points [P, 3] float32 jittered around ``base_means`` and their colours [P, 3]."""
    rng = np.random.default_rng(seed)
    pick = rng.integers(0, len(base_means), points)
    means = base_means[pick] + rng.normal(0.0, spread, (points, 3))
    return means.astype(np.float32), rng.uniform(0, 1, (points, 3)).astype(np.float32)


def run_child(cmd: list) -> tuple:
    """Run ``cmd``; returns (wall seconds, peak RSS in bytes of that process, stdout)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    out, err = proc.stdout.read(), proc.stderr.read()
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{err[-2000:]}")
    return wall, usage.ru_maxrss * 1024, out  # ru_maxrss is in KiB on Linux


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--work", default=None, help="folder for the scene and PLY (default: a temporary one)")
    parser.add_argument("--sizes", type=int, nargs="+", default=[200_000, 2_000_000])
    parser.add_argument("--train-points", type=int, default=2_000_000)
    args = parser.parse_args()
    from odin_sched.scenes.ply import write_ply
    from odin_sched.scenes.scene_gen import generate_scene
    from odin_sched.scenes.scene_io import write_scene
    from odin_sched.scenes.sh import SH_PARAMS, joined_sh
    from odin_sched.training.train import init_gaussians

    work = args.work or tempfile.mkdtemp(prefix="init_scale_")
    os.makedirs(work, exist_ok=True)
    scene = generate_scene(4000, 8, 64, 64, seed=0)
    spread = 0.1 * float(np.exp(scene.scales).mean())
    print("| points | init time (s) | init process peak RSS (GB) |\n|---:|---:|---:|")
    for size in args.sizes:
        path = os.path.join(work, f"cloud_{size}.npz")
        means, colors = cloud(scene.means, spread, size)
        np.savez(path, means=means, colors=colors)
        wall, rss, out = run_child([sys.executable, "-c", INIT_CHILD, path])
        print(f"| {size:,} | {float(out.split()[-1]):.2f} | {rss / 1e9:.2f} |", flush=True)
        os.remove(path)

    means, colors = cloud(scene.means, spread, args.train_points)
    scene.init_means, scene.init_colors = means, colors
    scene_path, ply_path = os.path.join(work, "big.h5"), os.path.join(work, "big.ply")
    for path in (scene_path, ply_path):
        if os.path.exists(path):
            os.remove(path)
    write_scene(scene_path, scene)
    gaussians = {k: v.numpy() for k, v in init_gaussians(means, colors).items()}
    write_ply(ply_path, **{k: v for k, v in gaussians.items() if k not in SH_PARAMS}, sh=joined_sh(gaussians))
    del means, colors
    pregel = os.path.join(os.path.dirname(sys.executable), "pregel")
    rows = {}
    for label, extra in (("from the point cloud", []), ("from a PLY of the same Gaussians", ["--init-ply", ply_path])):
        out = os.path.join(work, "out.h5")
        for stale in (out, os.path.join(work, "out.png")):
            if os.path.exists(stale):
                os.remove(stale)
        rows[label] = run_child([pregel, "train", "--scene", scene_path, "--steps", "4", "--out", out,
                                 *extra])[:2]
    print(f"\n`pregel train --steps 4` with {args.train_points:,} initial Gaussians (start-up, initialisation, "
          f"4 steps, write)\n\n| start | wall (s) | peak RSS (GB) |\n|---|---:|---:|")
    for label, (wall, rss) in rows.items():
        print(f"| {label} | {wall:.1f} | {rss / 1e9:.2f} |")
    (w_cloud, r_cloud), (w_ply, r_ply) = rows.values()
    print(f"\nratio cloud / PLY: time {w_cloud / w_ply:.2f}x (target <= 1.5x), "
          f"peak RSS {r_cloud / r_ply:.2f}x (target <= 1.3x)")


if __name__ == "__main__":
    main()
