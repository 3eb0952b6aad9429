"""One real capture end to end: photos -> ``pregel sfm`` -> ``pregel train`` (1,500 steps) -> ``pregel
render``, with and without densification, against the same training run of the code before the
reference schedule (``--old PATH``: a checkout of it, run read-only with PYTHONPATH=PATH).

The scene comes from ``pregel sfm`` on the photos (default: the five photos in tests/data/cour_carree,
every 8th held out) or from ``--scene`` (e.g. a ``pregel convert-colmap`` output). Each run's
trained Gaussians are rendered at every training and held-out camera here (the same rasterizer for
all runs) and compared with the photos: mean PSNR (dB) over the training views and over the held-out
views, and the number of Gaussians. Each run is single-threaded; ``--jobs`` runs go at once (their
wall times then share the machine). Run::

    flock /tmp/heavy.lock python benchmarks/real_capture.py --work DIR [--old /work/main] [--steps 1500] [--jobs 2]
"""
import argparse
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

for _var in ("OMP_NUM_THREADS", "NUMBA_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[_var] = "1"

import numpy as np  # noqa: E402
import torch  # noqa: E402

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PHOTOS = os.path.join(HERE, "tests", "data", "cour_carree")


def pregel(code: str, *args) -> float:
    """Run ``pregel ARGS`` with the package at ``code`` first on the path; returns the wall seconds."""
    env = dict(os.environ, PYTHONPATH=code)
    exe = os.path.join(os.path.dirname(sys.executable), "pregel")
    t0 = time.perf_counter()
    done = subprocess.run([exe, *map(str, args)], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"pregel {' '.join(map(str, args))} failed:\n{done.stderr[-3000:]}")
    return time.perf_counter() - t0


@torch.no_grad()
def view_psnr(trained_path) -> tuple:
    """(training-view PSNR, held-out PSNR, Gaussians) of a trained scene file, rendered here."""
    from kernels.splat import render
    from odin_sched.scenes.scene_io import heldout_mask, read_scene
    from odin_sched.scenes.sh import gaussian_render_args
    from odin_sched.training.metrics import psnr

    scene = read_scene(trained_path)
    params = gaussian_render_args({k: torch.from_numpy(v) for k, v in scene.gaussians().items()})
    held = heldout_mask(scene)
    values = {True: [], False: []}
    for cam in range(scene.num_cameras):
        image, _ = render(**params, viewmat=torch.from_numpy(scene.viewmats[cam]), K=torch.from_numpy(scene.Ks[cam]),
                          width=scene.width, height=scene.height)
        target = torch.from_numpy(scene.images[cam]).float() / 255.0
        values[bool(held[cam])].append(psnr(image.clamp(0, 1), target).item())
    return float(np.mean(values[False])), float(np.mean(values[True])), scene.num_gaussians


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--work", required=True, help="folder for the scene and the runs")
    parser.add_argument("--photos", default=PHOTOS, help="folder of photos for pregel sfm")
    parser.add_argument("--scene", default=None, help="use this scene file instead of running pregel sfm")
    parser.add_argument("--downscale", type=float, default=1.0, help="pregel sfm --downscale")
    parser.add_argument("--old", default=None, help="a checkout of the code before (its runs are the 'before' rows)")
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--jobs", type=int, default=1, help="training runs at once")
    args = parser.parse_args()
    torch.set_num_threads(1)
    os.makedirs(args.work, exist_ok=True)
    scene = args.scene
    if scene is None:
        scene = os.path.join(args.work, "scene.h5")
        if not os.path.exists(scene):
            seconds = pregel(HERE, "sfm", args.photos, "--out", scene, "--downscale", args.downscale, "--threads", 1)
            print(f"pregel sfm {args.photos}: {seconds:.1f} s")
    runs = [("this branch, defaults (densify on)", HERE, "new_d", []),
            ("this branch, --no-densify", HERE, "new_n", ["--no-densify"])]
    if args.old:
        runs += [("before, defaults (no densify)", args.old, "old_n", []),
                 ("before, --densify", args.old, "old_d", ["--densify"])]

    def run(label, code, name, flags):
        out = os.path.join(args.work, f"{name}.h5")
        for stale in (out, out[:-3] + ".png"):
            if os.path.exists(stale):
                os.remove(stale)
        seconds = pregel(code, "train", "--scene", scene, "--steps", args.steps, "--out", out,
                         "--eval-every", args.steps, *flags)
        print(f"{label}: done in {seconds:.0f} s", flush=True)
        return label, out, seconds

    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        done = list(pool.map(lambda r: run(*r), runs))
    rows = [(label, *view_psnr(out), seconds) for label, out, seconds in done]
    renders = os.path.join(args.work, "renders")
    pregel(HERE, "render", "--scene", os.path.join(args.work, "new_d.h5"), "--out", renders)
    print(f"\n{args.steps} steps on {scene} (rendered held-out views of the default run in {renders})\n")
    print("| run | training-view PSNR (dB) | held-out PSNR (dB) | Gaussians | train wall (s) |\n|---|---:|---:|---:|---:|")
    for label, train_psnr, held_psnr, count, seconds in rows:
        print(f"| {label} | {train_psnr:.2f} | {held_psnr:.2f} | {count:,} | {seconds:.0f} |")


if __name__ == "__main__":
    main()
