"""Measure the cpu-here cost profile of the simulator (writes odin_sched/sim/profiles/cpu-here.json).

1. An MPI ping-pong between two ranks (``odin_sched.sim.costmodel.pingpong``): latency and bandwidth.
2. Real ``pregel train --timeline`` runs at P = 2 on two generated city scenes of different image
   sizes and cell counts, each run three times; every image step's compute span is matched with its camera's features
   (visible Gaussians, pixels, tile-Gaussian pairs of the initial Gaussians) and the number of
   Gaussians it rendered (from its timeline label; each rank's first image, which loads the kernels
   from numba's cache, is left out of the fit and kept as the warm-up), and every cell update's span with its
   cell's size (cell updates that stepped no Gaussian are timed apart: ``version_unseen``), and the
   coefficients are fitted by non-negative least squares; the per-message sender time is the runs'
   communication seconds per message; planning: the runs' planning seconds per window.
3. How this machine shares its cores when ranks outnumber them: the time slice of busy processes
   (``costmodel.time_slice``), the processor time of a waiting rank's look for messages
   (``costmodel.polling``), what a look costs the computation it pre-empts beyond that (caches
   refilled: ``switch_cost``, image steps on one processor alone and then with a looking process),
   and planning with one rank more than cores: each scene again with
   P = cores + 1 (3 here; B and cells (cores + 1) / 2 times as many, so each rank has the same work),
   three times; ``plan_shared`` is its planning per window over an even share of the cores.

Run from the repository root: ``python benchmarks/odin_calibrate.py [workdir]`` (about two minutes).
"""
import json
import multiprocessing
import argparse
import os
import subprocess
import sys
import time

import h5py
import numpy as np

from odin_sched.sim.costmodel import (PROFILE_DIR, CostProfile, camera_views, fit_costs, look_for_a_message,
                                      polling, save_profile, time_slice)
from odin_sched.odin.options import OdinOptions
from odin_sched.training.train import TrainConfig, prepare

PY = sys.executable
MPIEXEC = os.path.join(os.path.dirname(PY), "mpiexec")
#: name: (Gaussians, cameras, width, height, cells)
SCENES = {"city_64": (3000, 40, 64, 48, 8), "city_128": (3000, 40, 128, 96, 8), "city_64_fine": (3000, 40, 64, 48, 24)}
STEPS, BATCH = 40, 4
WINDOWS = -(-STEPS // OdinOptions.window)  # planning windows per run
REPEATS = 3


def run(cmd):
    env = dict(os.environ, OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1")
    return subprocess.run(cmd, check=True, env=env, capture_output=True, text=True).stdout


def spans(trace_path):
    """(image camera [n], Gaussians rendered [n], image seconds [n], first image of its rank [n] bool,
    version cells [m], version seconds [m], Gaussians each version stepped [m])."""
    with open(trace_path) as f:
        events = sorted(json.load(f)["traceEvents"], key=lambda e: e.get("ts", 0))
    cams, rendered, image_s, first, cells, version_s, stepped, ranks_seen = [], [], [], [], [], [], [], set()
    at = {}  # (rank, label) -> its image's index: an image computes in two spans (around its serving point)
    for e in events:
        if e.get("cat") != "compute" or "label" not in e.get("args", {}):
            continue
        label = e["args"]["label"]
        if label.startswith("image ") and (e["tid"], label) in at:
            image_s[at[e["tid"], label]] += e["dur"] * 1e-6
        elif label.startswith("image "):
            at[e["tid"], label] = len(image_s)
            cams.append(int(label.split("camera ")[1].split(",")[0]))
            rendered.append(int(label.split("renders ")[1].split()[0]))
            image_s.append(e["dur"] * 1e-6)
            first.append(e["tid"] not in ranks_seen)  # loads the kernels from numba's cache: warm-up
            ranks_seen.add(e["tid"])
        elif label.startswith("cell ") and " after " in label:
            cells.append(int(label.split()[1]))
            version_s.append(e["dur"] * 1e-6)
            stepped.append(int(label.split(" steps ")[1].split()[0]))
    return (np.array(cams), np.array(rendered), np.array(image_s), np.array(first), np.array(cells),
            np.array(version_s), np.array(stepped))


def _pin_to_first_processor():
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})


def _render_images(scene, images, ready, go, out):
    """On the first processor: render and back-propagate ``images`` training images of ``scene`` (after
    a warm-up), then put the seconds they took on ``out``."""
    _pin_to_first_processor()
    import torch

    from kernels.splat import render
    from odin_sched.training.step import image_gradients

    torch.set_num_threads(1)
    setup = prepare(TrainConfig(scene, STEPS, batch_size=BATCH, eval_every=STEPS))
    cameras, views = setup.train_ids, setup.scene

    def step(c):
        image_gradients(render, setup.initial, torch.as_tensor(views.viewmats[c]), torch.as_tensor(views.Ks[c]),
                        views.width, views.height, setup.targets[c], 0.2, False, setup.active_sh_degree(1))

    for c in cameras[:5]:
        step(c)
    ready.set()
    go.wait()
    t0 = time.perf_counter()
    for i in range(images):
        step(cameras[i % len(cameras)])
    out.put(time.perf_counter() - t0)


def _look_for_messages(stop, looks):
    """On the first processor: look for a message as a waiting rank does (``look_for_a_message``) until
    ``stop``, counting the looks in ``looks``."""
    _pin_to_first_processor()

    def keep_looking(done):
        looks.value = done
        return not stop.is_set()

    look_for_a_message(keep_looking)


def switch_cost(scene, look_seconds, images=200, repeats=3):
    """Processor seconds a computation loses each time a look pre-empts it, beyond the look's own
    ``look_seconds``: image steps of ``scene`` on one processor alone, then sharing it with a process
    waiting for a message; (shared - alone) / looks - look_seconds, the median of ``repeats``."""
    ctx = multiprocessing.get_context("spawn")
    costs = []
    for _ in range(repeats):
        seconds, counted = [], 0
        for shared in (False, True):
            ready, go, stop, out, looks = ctx.Event(), ctx.Event(), ctx.Event(), ctx.Queue(), ctx.Value("l", 0)
            workers = [ctx.Process(target=_render_images, args=(scene, images, ready, go, out))]
            if shared:
                workers.append(ctx.Process(target=_look_for_messages, args=(stop, looks)))
            for w in workers:
                w.start()
            ready.wait()
            while shared and looks.value == 0:
                time.sleep(0.01)
            first = looks.value
            go.set()
            seconds.append(out.get())
            counted = looks.value - first
            stop.set()
            for w in workers:
                w.join()
        costs.append((seconds[1] - seconds[0]) / max(counted, 1) - look_seconds)
    return max(0.0, float(np.median(costs)))


def train(scene, ranks, batch, cells, out, *flags):
    """``pregel train`` of ``scene`` on ``ranks`` ranks, the calibration's steps, odin mode."""
    run([MPIEXEC, "-n", str(ranks), PY, "-m", "pregel.cli", "train", "--scene", scene, "--steps", str(STEPS),
         "--batch-size", str(batch), "--cells", str(cells), "--eval-every", str(STEPS), "--mode", "odin",
         "--out", out, "--no-densify", *flags])


def main(work):
    os.makedirs(work, exist_ok=True)
    out = run([MPIEXEC, "-n", "2", PY, "-c", "from pregel.comm import Comm; from odin_sched.sim.costmodel import pingpong; "
               "c = Comm(); l, b = pingpong(c); print(l, b) if c.rank == 0 else None"])
    latency, bandwidth = map(float, out.split())
    print(f"ping-pong: latency {latency * 1e6:.1f} us, bandwidth {bandwidth / 1e9:.2f} GB/s")
    feats, secs, warm, rows, vsecs, stepped, comm_s, messages, real_plan = [], [], [], [], [], [], 0.0, 0, 0.0
    shared_plan, cores = 0.0, len(os.sched_getaffinity(0))
    views = {}  # scene name -> (cost features [C, 3] of its cameras, number of initial Gaussians)
    for repeat in range(REPEATS):  # the machine's speed drifts by 10-20 % over minutes: pool several runs
        for name, (g, c, w, h, cells_count) in SCENES.items():
            scene = os.path.join(work, f"{name.removesuffix('_fine')}.h5")
            if not os.path.exists(scene):
                run([PY, "-m", "pregel.cli", "generate-scene", "--gaussians", str(g), "--cameras", str(c), "--width",
                     str(w), "--height", str(h), "--layout", "city", "--out", scene])
            trace, trained = os.path.join(work, f"{name}_{repeat}.json"), os.path.join(work, f"{name}_{repeat}.h5")
            train(scene, 2, BATCH, cells_count, trained, "--timeline", trace)
            shared = os.path.join(work, f"{name}_{repeat}_shared.h5")  # a rank more than cores, same work per rank
            train(scene, cores + 1, BATCH * (cores + 1) // 2, cells_count * (cores + 1) // 2, shared)
            with h5py.File(shared) as t:
                shared_plan += t["metrics/per_rank"][:, list(t.attrs["per_rank_fields"]).index("plan_seconds")].max()
            if name not in views:
                setup = prepare(TrainConfig(scene, STEPS, batch_size=BATCH, eval_every=STEPS))
                init = {k: v.numpy() for k, v in setup.initial.items()}
                views[name] = (camera_views(init["means"], init["scales"], init["quats"], setup.scene.viewmats,
                                            setup.scene.Ks, w, h).features, len(init["means"]))
            f, gaussians = views[name]
            cams, rendered, image_s, first, cells, version_s, version_stepped = spans(trace)
            feats.append(np.column_stack([f[cams], rendered]))
            secs.append(image_s)
            warm.append(first)
            rows.append(np.full(len(cells), gaussians / cells_count))
            vsecs.append(version_s)
            stepped.append(version_stepped)
            with h5py.File(trained) as t:
                table = t["metrics/per_rank"][()]
                fields = list(t.attrs["per_rank_fields"])
            comm_s += table[:, fields.index("comm_seconds")].sum()
            real_plan += table[:, fields.index("plan_seconds")].max()
            messages += int(table[:, fields.index("messages_sent")].sum())
    features, seconds, first = np.concatenate(feats), np.concatenate(secs), np.concatenate(warm)
    image = fit_costs(features[~first], seconds[~first])  # each rank's first image is warm-up, apart
    vsecs, seen = np.concatenate(vsecs), np.concatenate(stepped) > 0
    version = fit_costs(np.concatenate(rows)[seen, None], vsecs[seen])  # an unseen cell skips the Adam step
    version_unseen = float(np.median(vsecs[~seen])) if (~seen).any() else None
    predicted = image[0] + features @ image[1:]  # (visible, pixels, pairs, rendered)
    warmup = float(np.median(seconds[first] - predicted[first]))
    predicted, seconds = predicted[~first], seconds[~first]
    error = np.abs(predicted - seconds).mean() / seconds.mean()
    print(f"image steps: {len(seconds)} spans, {seconds.mean() * 1e3:.1f} ms mean; fit c0 {image[0] * 1e3:.2f} ms, "
          f"per visible {image[1] * 1e6:.3f} us, per pixel {image[2] * 1e9:.2f} ns, per pair {image[3] * 1e6:.3f} us, "
          f"per Gaussian rendered {image[4] * 1e6:.3f} us; "
          f"mean abs error {100 * error:.0f}%; warm-up (each rank's first image) {warmup * 1e3:.1f} ms more")
    print(f"cell updates: {len(vsecs)} spans; fit v0 {version[0] * 1e3:.3f} ms, per row {version[1] * 1e6:.3f} us "
          f"({seen.sum()} that stepped Gaussians); the {(~seen).sum()} that stepped none: "
          f"{(version_unseen or 0) * 1e3:.3f} ms median; per-message sender time {comm_s / max(messages, 1) * 1e6:.0f} us")
    slice_seconds, (look, sleep) = time_slice(cores), polling()
    switch = switch_cost(os.path.join(work, "city_64.h5"), look)
    print(f"time slice with {cores + 1} busy processes on {cores} cores: {slice_seconds * 1e3:.2f} ms; "
          f"a waiting rank's look: {look * 1e6:.0f} us of processor, then {sleep * 1e6:.0f} us asleep; "
          f"each costs a computation it pre-empts {switch * 1e6:.0f} us more")
    plan_seconds = real_plan / (REPEATS * len(SCENES) * WINDOWS)
    plan_shared = shared_plan / (REPEATS * len(SCENES) * WINDOWS) / (plan_seconds * (cores + 1) / cores)
    print(f"planning: {plan_seconds * 1e3:.1f} ms per window at P = 2; at P = {cores + 1}, {plan_shared:.2f} times "
          f"an even share of the {cores} cores")
    profile = CostProfile(
        name="cpu-here", image=tuple(map(float, image[:4])), render_rows=float(image[4]),
        version=tuple(map(float, version)), latency=latency, bandwidth=bandwidth, node_latency=latency, node_bandwidth=bandwidth, gpus_per_node=1 << 20,
        overhead=comm_s / max(messages, 1), count_planning=True, plan_seconds=plan_seconds, plan_shared=plan_shared,
        cores=cores, warmup_seconds=warmup, time_slice=slice_seconds, poll_seconds=look, poll_sleep=sleep,
        switch_seconds=switch,
        version_unseen=version_unseen, image_noise=tuple(np.round(seconds / predicted - 1.0, 4).tolist()),
        source=f"benchmarks/odin_calibrate.py: MPI ping-pong and {len(seconds)} image / "
               f"{len(vsecs)} cell-update spans of pregel train --timeline at P = 2 on this machine, planning "
               f"also at P = {cores + 1} (load average {os.getloadavg()[0]:.1f})")
    save_profile(profile, os.path.join(PROFILE_DIR, "cpu-here.json"))
    print(f"wrote {os.path.join(PROFILE_DIR, 'cpu-here.json')}; load average {os.getloadavg()}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("workdir", nargs="?", default="odin_calibration", help="where its files go (default: %(default)s)")
    main(parser.parse_args().workdir)
