"""The simulated ``grendel`` mode against Grendel-GS's own published table.

Grendel-GS's README ("Training Time", 4 x A100 40 GB, 25 GB/s NVLink) gives 30k-image training minutes
of the seven Mip-NeRF 360 scenes at 1 GPU with batch 1, 4 GPUs with batch 1 and 4 GPUs with batch 4
(``odin_sched.sim.presets.GRENDEL_MINUTES``, copied from it). This script simulates the same three set-ups with the
``a100-nvlink`` profile and each scene's preset (``odin_sched.sim.presets``) and prints both side by
side: minutes, images/s and the two speed-ups over 1 GPU (target: each within 25 % of the published).

``--fit`` instead fits the compute coefficients of ``a100-nvlink`` (per pixel, per tile pair, the
projection per Gaussian held, Adam per Gaussian held and a fixed time per step) to the three published
times of three scenes (``FIT_SCENES``); the other four scenes' speed-ups are predictions.

``--rasterizer`` prints what the fitted profile charges one image (forward + backward, one A100) on each
preset beside the published speed of the reference rasterizer that was not fitted: the 3DGS paper's
(Kerbl et al. 2023, Table 1) 134 frames/s forward on Mip-NeRF 360 (mean of its 9 scenes, RTX A6000),
times 1 + the backward/forward time ratio of 1.7-1.8 from gsplat's published profile (ROCm docs,
"Profiling the GSplat library", batch 1, RGB: 349-380 frames/s forward, 174-210 backward).

Run from the repository root: ``python benchmarks/grendel_table.py [--fit | --rasterizer] [--steps N]``.
"""
import argparse
import os
import time

import numpy as np

from dataclasses import replace

from odin_sched.sim.costmodel import load_profile
from odin_sched.sim.grendel import simulate_grendel
from odin_sched.sim.presets import GRENDEL_IMAGES as IMAGES
from odin_sched.sim.presets import GRENDEL_MINUTES as PUBLISHED
from odin_sched.sim.presets import GRENDEL_SETUPS as SETUPS
from odin_sched.sim.presets import MIP360, PRESETS
from odin_sched.sim.scene import preset_scene

GENERATED = 400_000  # Gaussians generated per scene; each stands for gaussians / GENERATED (preset_scene)


def batches_of(scene, steps: int, batch: int, seed: int = 0) -> list:
    """[steps] arrays of ``batch`` training cameras, a seeded shuffle of each epoch (as Grendel samples)."""
    rng, order = np.random.default_rng(seed), []
    while len(order) < steps * batch:
        order.extend(rng.permutation(scene.train_ids))
    return [np.asarray(order[i * batch:(i + 1) * batch]) for i in range(steps)]


#: the scenes whose three published times the fit uses; the table's other four are predictions
FIT_SCENES = ("bicycle", "kitchen", "counter")
#: the fitted coefficients: (name, where in the profile), and their starting values
TERMS = (("c_px", 2), ("c_pair", 3), ("render_rows", "render_rows"), ("Adam per Gaussian", "adam_row"),
         ("step_seconds", "step_seconds"))
START = (5e-9, 2e-9, 5e-9, 1e-9, 0.02)


def with_terms(profile, values):
    """``profile`` with the fitted coefficients ``values`` (in ``TERMS`` order)."""
    image, fields = list(profile.image), {}
    for (_, where), value in zip(TERMS, values):
        if isinstance(where, int):
            image[where] = value
        elif where == "adam_row":
            fields["version"] = (profile.version[0], value)
        else:
            fields[where] = value
    return replace(profile, image=tuple(image), **fields)


def seconds_per_image(scene, profile, steps, gpus, batch) -> float:
    run = simulate_grendel(scene.views, scene.total_gaussians, batches_of(scene, steps, batch), profile, gpus)
    return run["seconds"] / (steps * batch)


def fit(scenes: dict, steps: int) -> None:
    """Print the coefficients (``TERMS``) fitted to the published times of ``FIT_SCENES`` in all three
    set-ups: least squares of the simulator's relative errors, over the logarithms of the coefficients."""
    from scipy.optimize import least_squares

    profile = load_profile("a100-nvlink")

    def errors(logs):
        fitted = with_terms(profile, np.exp(logs))
        return [seconds_per_image(scenes[n], fitted, steps, g, b) / (m * 60 / IMAGES) - 1
                for n in FIT_SCENES for (g, b), m in zip(SETUPS, PUBLISHED[n])]

    result = least_squares(errors, np.log(START), diff_step=0.05, max_nfev=80)
    print(", ".join(f"{label} = {c:.4g}" for (label, _), c in zip(TERMS, np.exp(result.x))))
    for (name, (gpus, batch)), e in zip(((n, s) for n in FIT_SCENES for s in SETUPS), result.fun):
        print(f"  {name:<8} {gpus} GPU batch {batch}: simulated / published - 1 = {e:+.1%}")


def table(scenes: dict, steps: int) -> None:
    profile = load_profile("a100-nvlink")
    print("scene    | minutes 1g1b / 4g1b / 4g4b published | simulated            | speed-up 4g1b pub / sim (err)"
          " | speed-up 4g4b pub / sim (err) | images/s 1 GPU pub / sim")
    errors = []
    for name in MIP360:
        scene, pub = scenes[name], PUBLISHED[name]
        sim = []
        for gpus, batch in SETUPS:
            run = simulate_grendel(scene.views, scene.total_gaussians, batches_of(scene, steps, batch), profile, gpus)
            sim.append(run["seconds"] / (steps * batch) * IMAGES / 60)
        speed_pub = [pub[0] / pub[1], pub[0] / pub[2]]
        speed_sim = [sim[0] / sim[1], sim[0] / sim[2]]
        err = [s / p - 1 for s, p in zip(speed_sim, speed_pub)]
        errors.extend(err)
        print(f"{name:<8} | {pub[0]:6.2f} / {pub[1]:5.2f} / {pub[2]:5.2f}              "
              f"| {sim[0]:6.2f} / {sim[1]:5.2f} / {sim[2]:5.2f} "
              f"| {speed_pub[0]:.2f} / {speed_sim[0]:.2f} ({err[0]:+.0%})              "
              f"| {speed_pub[1]:.2f} / {speed_sim[1]:.2f} ({err[1]:+.0%})              "
              f"| {IMAGES / pub[0] / 60:.1f} / {IMAGES / sim[0] / 60:.1f}", flush=True)
    worst = max(abs(e) for e in errors)
    print(f"largest speed-up error {worst:.0%} (target: within 25 %): {'met' if worst <= 0.25 else 'NOT met'}")


#: 3DGS paper, Table 1, Ours-30K on Mip-NeRF 360: 134 frames/s (forward only, RTX A6000)
PAPER_FORWARD_SECONDS = 1 / 134
#: gsplat's published profile (batch 1, RGB; packed/unpacked, sparse gradient or not): forward and
#: backward frames/s; backward takes this many times the forward's time
GSPLAT_BACKWARD_RATIOS = (376.8 / 209.9, 380.2 / 173.7, 349.3 / 206.0)


def rasterizer(scenes: dict) -> None:
    """Per preset: mean pixels and tile pairs per training image and the fitted ``a100-nvlink`` charge
    for its forward + backward (``image_seconds``, plus the projection of all Gaussians), against the
    published forward times x (1 + backward/forward)."""
    profile = load_profile("a100-nvlink")
    low, high = (PAPER_FORWARD_SECONDS * (1 + r) for r in (min(GSPLAT_BACKWARD_RATIOS), max(GSPLAT_BACKWARD_RATIOS)))
    print(f"published (not fitted): forward {PAPER_FORWARD_SECONDS * 1e3:.2f} ms (3DGS paper, A6000, Mip360 mean), "
          f"forward + backward {low * 1e3:.1f}-{high * 1e3:.1f} ms (x 1 + gsplat's backward/forward)")
    print("scene    | Mpixels | tile pairs (M) | pixels ms | pairs ms | projection ms | fitted fwd+bwd ms "
          "| / published")
    totals = []
    for name in MIP360:
        scene = scenes[name]
        pixels, pairs = scene.views.features[scene.train_ids, 1:3].mean(axis=0)
        px, pr = profile.image[2] * pixels, profile.image[3] * pairs
        projection = profile.render_rows * scene.total_gaussians
        rows = np.full(len(scene.train_ids), scene.total_gaussians)
        total = float(profile.image_seconds(scene.views.features[scene.train_ids], rows).mean())
        totals.append(total)
        print(f"{name:<8} | {pixels / 1e6:7.2f} | {pairs / 1e6:14.1f} | {px * 1e3:9.2f} | {pr * 1e3:8.2f} "
              f"| {projection * 1e3:13.3f} | {total * 1e3:17.2f} | {total / high:.2f}-{total / low:.2f}")
    mean = float(np.mean(totals))
    print(f"mean of the seven: {mean * 1e3:.2f} ms, {mean / high:.2f}-{mean / low:.2f} x the published estimate")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--fit", action="store_true", help="fit a100-nvlink's image step to the 1-GPU column")
    parser.add_argument("--rasterizer", action="store_true",
                        help="the fitted per-image charge against the reference rasterizer's published speed")
    parser.add_argument("--steps", type=int, default=40, help="simulated steps per set-up")
    args = parser.parse_args()
    t0 = time.time()
    scenes = {name: preset_scene(name, generated=GENERATED) for name in MIP360}
    print(f"scenes: {', '.join(f'{n} {PRESETS[n].width}x{PRESETS[n].height} {PRESETS[n].gaussians / 1e6:.1f}M' for n in MIP360)}"
          f" (load average {os.getloadavg()[0]:.1f})")
    if args.rasterizer:
        rasterizer(scenes)
    else:
        fit(scenes, args.steps) if args.fit else table(scenes, args.steps)
    print(f"{time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
