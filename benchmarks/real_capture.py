"""Real captures end to end: photos -> ``pregel sfm`` (or a COLMAP model -> ``pregel convert-colmap``)
-> ``pregel train`` (1,500 steps) -> ``pregel render``, with and without densification and SH colour,
against the same training run of the code before the reference schedule (``--old PATH``: a checkout
of it, run read-only with PYTHONPATH=PATH).

Captures (each optional, at least one):

* ``--photos DIR``: ``pregel sfm DIR --camera-model MODEL`` (default: the five photos in
  tests/data/cour_carree, SIMPLE_RADIAL; see the README for why not OPENCV on them);
* ``--colmap SPARSE_DIR --images DIR``: ``pregel convert-colmap`` of a COLMAP model, e.g. kapture's
  ``samples/maupertuis/colmap`` (``reconstruction`` and ``images``: 4 aerial photos, 1,039 points, in
  kapture's source distribution, ``pip download --no-deps --no-binary :all: kapture==1.1.12``).

Each run's trained Gaussians are rendered at every training and held-out camera here (the same
rasterizer for all runs) and compared with the photos: mean PSNR (dB) over the training views and
over the held-out views, and the number of Gaussians. Each run is single-threaded; ``--jobs`` runs go
at once (their wall times then share the machine). Run::

    flock /tmp/heavy.lock python benchmarks/real_capture.py --work DIR [--old CHECKOUT] [--steps 1500] \\
        [--photos DIR --photos-downscale 1] [--colmap SPARSE --images DIR --colmap-name NAME
        --colmap-downscale 3] [--jobs 2]
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
#: (label, name, flags) of the runs of this code
RUNS = (("defaults (densify, SH degree 3)", "d", []),
        ("`--no-densify`", "n", ["--no-densify"]),
        ("`--sh-degree 0`", "d0", ["--sh-degree", "0"]),
        ("`--sh-degree 0 --no-densify`", "n0", ["--sh-degree", "0", "--no-densify"]))
#: (label, name, flags) of the runs of the code before (no SH; densification off unless asked)
OLD_RUNS = (("before, defaults (no densify)", "old_n", []),
            ("before, `--densify`", "old_d", ["--densify"]))


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


def make_scenes(args) -> list:
    """(capture label, scene path) of each capture asked for, made in ``args.work`` unless already there."""
    scenes = []
    if args.photos:
        path = os.path.join(args.work, "photos.h5")
        if not os.path.exists(path):
            seconds = pregel(HERE, "sfm", args.photos, "--out", path, "--downscale", args.photos_downscale,
                             "--camera-model", args.camera_model, "--threads", 1)
            print(f"pregel sfm {args.photos}: {seconds:.1f} s", flush=True)
        scenes.append((f"{os.path.basename(os.path.normpath(args.photos))} (sfm, {args.camera_model})", path))
    if args.colmap:
        path = os.path.join(args.work, "colmap.h5")
        if not os.path.exists(path):
            pregel(HERE, "convert-colmap", args.colmap, "--images", args.images, "--out", path,
                   "--downscale", args.colmap_downscale)
        scenes.append((f"{args.colmap_name} (convert-colmap)", path))
    return scenes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--work", required=True, help="folder for the scenes and the runs")
    parser.add_argument("--photos", default=PHOTOS, help="folder of photos for pregel sfm ('' for none)")
    parser.add_argument("--camera-model", default="SIMPLE_RADIAL", help="pregel sfm --camera-model")
    parser.add_argument("--photos-downscale", type=float, default=1.0, help="pregel sfm --downscale")
    parser.add_argument("--colmap", default=None, help="a COLMAP sparse model for pregel convert-colmap")
    parser.add_argument("--images", default=None, help="its images")
    parser.add_argument("--colmap-name", default="COLMAP model", help="its name in the table")
    parser.add_argument("--colmap-downscale", type=float, default=3.0, help="pregel convert-colmap --downscale")
    parser.add_argument("--old", default=None, help="a checkout of the code before (its runs are the 'before' rows)")
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--jobs", type=int, default=1, help="training runs at once")
    args = parser.parse_args()
    if args.colmap and not args.images:
        parser.error("--colmap needs --images")
    torch.set_num_threads(1)
    os.makedirs(args.work, exist_ok=True)
    scenes = make_scenes(args)
    if not scenes:
        parser.error("no capture: give --photos or --colmap")
    runs = [(capture, scene, label, HERE, f"{os.path.basename(scene)[:-3]}_{name}", flags)
            for capture, scene in scenes for label, name, flags in RUNS]
    if args.old:
        runs += [(capture, scene, label, args.old, f"{os.path.basename(scene)[:-3]}_{name}", flags)
                 for capture, scene in scenes for label, name, flags in OLD_RUNS]

    def run(capture, scene, label, code, name, flags):
        out = os.path.join(args.work, f"{name}.h5")
        for stale in (out, out[:-3] + ".png"):
            if os.path.exists(stale):
                os.remove(stale)
        seconds = pregel(code, "train", "--scene", scene, "--steps", args.steps, "--out", out,
                         "--eval-every", args.steps, *flags)
        print(f"{capture}, {label}: done in {seconds:.0f} s", flush=True)
        return capture, label, out, seconds

    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        done = list(pool.map(lambda r: run(*r), runs))
    rows = [(capture, label, *view_psnr(out), seconds) for capture, label, out, seconds in done]
    for capture, scene in scenes:
        renders = os.path.join(args.work, f"renders_{os.path.basename(scene)[:-3]}")
        pregel(HERE, "render", "--scene", os.path.join(args.work, f"{os.path.basename(scene)[:-3]}_d.h5"),
               "--out", renders)
        from odin_sched.scenes.scene_io import read_scene
        s = read_scene(scene)
        print(f"{capture}: {scene}, {s.width} x {s.height}, {int((~s.heldout).sum())} training and "
              f"{int(s.heldout.sum())} held-out views, {len(s.init_means):,} points (held-out renders of the "
              f"default run in {renders})")
    print(f"\n{args.steps} steps; load average {open('/proc/loadavg').read().split()[0]} at the end\n")
    print("| capture | run | training-view PSNR (dB) | held-out PSNR (dB) | Gaussians | train wall (s) |\n"
          "|---|---|---:|---:|---:|---:|")
    for capture, label, train_psnr, held_psnr, count, seconds in rows:
        print(f"| {capture} | {label} | {train_psnr:.2f} | {held_psnr:.2f} | {count:,} | {seconds:.0f} |")


if __name__ == "__main__":
    main()
