"""Host seconds of planning one window at P virtual ranks, as the sharded runtime plans it: from the
cells' metadata (``odin_sched.odin.planner.plan_cells``: visibility of cells x cameras, the step graph, its
schedule). Cells persist across windows, so cutting them (``kd_cells``, once at start) and their
bounds (computed by the owners) are not part of a window's planning and are not timed.

A generated ``city`` (default: 1,000,000 Gaussians, 2,000 cameras at 256 x 192; the trainer's 16 cells
per rank, window 10, batch = P), planned on one process as the simulator plans it, ``REPEATS`` times per
P: the median call (the runtime plans every window; the first call at a P also pays one-off set-up).
Adds (or replaces) this scene size's entry in ``odin_sched/sim/profiles/plan-times.json``: the processor
seconds (load-robust; the wall seconds and load average beside them) are the sharded profiles'
``plan_by_gpus`` for scenes of about that size (``odin_sched/sim/costmodel.py`` takes the entry nearest
the simulated scene's Gaussian count). Run from the repository root:
``python benchmarks/plan_time.py [--gaussians G --cameras C --width W --height H] [--out PATH] [P ...]``
(default P: 4 8 16 32 64 128; ``--out``: write the entry to another file, leaving the profiles' alone).
"""
import argparse
import json
import os
import time

import numpy as np

from odin_sched.odin.options import OdinOptions
from odin_sched.odin.planner import PlanConfig, plan_cells
from odin_sched.odin.shard import owners_by_count
from odin_sched.scenes.cells import cut_cells
from odin_sched.sim.scene import metadata_scene
from odin_sched.sim.simulate import local_comm
from odin_sched.scenes.visibility import window_margin
from odin_sched.training.image_order import spread_batches
from odin_sched.training.step import BatchSettings
from odin_sched.training.train import scene_extent, visible_cells_of_cameras

WINDOW = OdinOptions.window
REPEATS = 3  # calls timed per P
PLAN_TIMES = os.path.join(os.path.dirname(__file__), "..", "odin_sched", "sim", "profiles", "plan-times.json")


def main(gpu_counts, gaussians, cameras, width, height, path=PLAN_TIMES):
    scene = metadata_scene("city", gaussians, cameras, width, height)
    extent = scene_extent(scene.viewmats)
    measured, walls, loads = [], [], []
    for gpus in gpu_counts:
        settings = BatchSettings(gpus)
        sees = visible_cells_of_cameras(scene.means, scene.scales, scene.viewmats, scene.Ks, scene.width,
                                        scene.height, settings, extent)
        batches = spread_batches(scene.train_ids, WINDOW, gpus, 0, sees)
        lrs = settings.lrs(extent, 1)
        margin = window_margin(lrs["means"], lrs["scales"], settings.betas, WINDOW)
        config = PlanConfig(OdinOptions.CELLS_PER_RANK * gpus, gpus, 0)
        _, bounds = cut_cells(scene.means, scene.scales, config.num_cells)
        owner = owners_by_count(bounds.count, gpus)
        load, times = os.getloadavg()[0], []
        for _ in range(REPEATS):  # the runtime plans every window: the median of a few calls, not the first
            wall, cpu = time.perf_counter(), time.process_time()
            plan_cells(local_comm(), bounds, owner, scene, batches, 0, WINDOW, margin, config)
            times.append((time.process_time() - cpu, time.perf_counter() - wall))
        cpu, wall = (float(np.median(column)) for column in zip(*times))
        print(f"P = {gpus:>3}: {wall:.2f} s wall, {cpu:.2f} s processor per window (load average {load:.1f})",
              flush=True)
        measured.append((gpus, round(cpu, 3)))  # processor seconds: what load on this machine does not inflate
        walls.append(round(wall, 3))
        loads.append(load)
    entry = {"command": f"python benchmarks/plan_time.py --gaussians {gaussians} --cameras {cameras} "
                        f"--width {width} --height {height} " + " ".join(map(str, gpu_counts)),
             "scene": f"city, {gaussians:,} Gaussians, {cameras:,} cameras at {width} x {height}, "
                      "window 10, batch = P",
             "gaussians": gaussians, "load_average": loads, "wall_seconds": walls, "plan_by_gpus": measured}
    kept = []
    if os.path.exists(path):
        with open(path) as f:
            kept = [e for e in json.load(f)["measurements"] if e["gaussians"] != gaussians]
    with open(path, "w") as f:
        json.dump({"measurements": sorted(kept + [entry], key=lambda e: e["gaussians"])}, f, indent=1)
    print(f"wrote {path}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("gpus", type=int, nargs="*", default=[4, 8, 16, 32, 64, 128])
    parser.add_argument("--gaussians", type=int, default=1_000_000)
    parser.add_argument("--cameras", type=int, default=2000)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--height", type=int, default=192)
    parser.add_argument("--out", default=PLAN_TIMES)
    a = parser.parse_args()
    main(a.gpus, a.gaussians, a.cameras, a.width, a.height, a.out)
