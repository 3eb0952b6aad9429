"""Host seconds of planning one window (``odin_sched.odin.trainer.plan_window``) at P virtual ranks.

The scene of ``pregel simulate``'s city study (1,000,000 Gaussians, 2,000 cameras at 256 x 192, the
trainer's 16 cells per rank, window 10, batch = P), planned on one process as the simulator plans it.
Writes ``odin_sched/sim/profiles/plan-times.json``, the sharded profiles' ``plan_by_gpus``
(``odin_sched/sim/costmodel.py``). Run from the repository root:
``python benchmarks/plan_time.py [P ...]`` (default 4 8 16 32 64 128).
"""
import json
import os
import sys
import time

from odin_sched.odin.trainer import OdinOptions, PlanConfig, plan_window
from odin_sched.sim.simulate import _local_comm, metadata_scene
from odin_sched.scenes.visibility import window_margin
from odin_sched.training.image_order import spread_batches
from odin_sched.training.step import BatchSettings
from odin_sched.training.train import scene_extent, visible_cells_of_cameras

WINDOW = OdinOptions.window


def main(gpu_counts):
    scene = metadata_scene("city", 1_000_000, 2000)
    extent = scene_extent(scene.viewmats)
    measured, loads = [], []
    for gpus in gpu_counts:
        settings = BatchSettings(gpus)
        sees = visible_cells_of_cameras(scene.means, scene.scales, scene.viewmats, scene.Ks, scene.width,
                                        scene.height, settings, extent)
        batches = spread_batches(scene.train_ids, WINDOW, gpus, 0, sees)
        lrs = settings.lrs(extent, 1)
        margin = window_margin(lrs["means"], lrs["scales"], settings.betas, WINDOW)
        load, wall, cpu = os.getloadavg()[0], time.perf_counter(), time.process_time()
        plan_window(_local_comm(), scene.means, scene.scales, scene, batches, 0, WINDOW, margin,
                    PlanConfig(OdinOptions.CELLS_PER_RANK * gpus, gpus, 0))
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        print(f"P = {gpus:>3}: {wall:.2f} s wall, {cpu:.2f} s processor per window (load average {load:.1f})",
              flush=True)
        measured.append((gpus, round(wall, 3)))
        loads.append(load)
    path = os.path.join(os.path.dirname(__file__), "..", "odin_sched", "sim", "profiles", "plan-times.json")
    with open(path, "w") as f:
        json.dump({"command": "python benchmarks/plan_time.py " + " ".join(map(str, gpu_counts)),
                   "scene": "city, 1,000,000 Gaussians, 2,000 cameras at 256 x 192, window 10, batch = P",
                   "load_average": loads, "plan_by_gpus": measured}, f, indent=1)
    print(f"wrote {path}")


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [4, 8, 16, 32, 64, 128])
