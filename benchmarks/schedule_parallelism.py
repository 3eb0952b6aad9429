"""Parallelism of a training window's step graph, and the time ``plan_schedule`` takes.

Generates a ``city`` scene (default 20,000 Gaussians, 200 cameras, 64 x 48), approximates which
cells each camera sees by rendering it once with all Gaussians (``kernels.splat.render``'s visible
mask) and marking the cells of the visible Gaussians, the cells coming from a k-d split of the
means (median split of the widest axis, K a power of two). The window is 2,000 images: epochs of
the training cameras, each shuffled. For each K and batch size B it prints the step graph's size,
its depth and its parallelism (work / critical path; image cost = visible Gaussians, version cost
0), then times ``plan_schedule`` on 1 and 2 ranks (cell owners: cell % P; cell bytes: Gaussians).

    .venv/bin/python benchmarks/schedule_parallelism.py [--gaussians 20000 --images 2000 --ranks 1,2]
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

for _var in ("OMP_NUM_THREADS", "NUMBA_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[_var] = "1"

import numpy as np  # noqa: E402

CELLS = (16, 64)
BATCH_SIZES = (1, 2, 4, 8)


def visibility(scene) -> np.ndarray:
    """visible [C, G] bool: the Gaussians each camera's render marks visible."""
    import torch

    from kernels.splat import render

    gauss = {k: torch.from_numpy(getattr(scene, k)) for k in ("means", "scales", "quats", "opacities", "colors")}
    visible = np.empty((len(scene.viewmats), len(scene.means)), bool)
    with torch.no_grad():
        for c in range(len(scene.viewmats)):
            _, seen = render(**gauss, viewmat=torch.from_numpy(scene.viewmats[c]), K=torch.from_numpy(scene.Ks[c]),
                             width=scene.width, height=scene.height)
            visible[c] = seen.numpy()
    return visible


def prepare(folder: str, gaussians: int, cameras: int, images: int) -> None:
    """Scene, visibility, cells and window, saved to ``folder``/window.npz; prints the table."""
    from odin_sched.odin.depgraph import build_step_graph, critical_path, parallelism
    from odin_sched.scenes.scene_gen import generate_scene
    from odin_sched.scenes.cells import kd_cells

    started = time.perf_counter()
    scene = generate_scene(gaussians, cameras, 64, 48, layout="city")
    visible = visibility(scene)
    print(f"scene and visibility: {time.perf_counter() - started:.1f} s; visible Gaussians per camera: "
          f"mean {visible.sum(1).mean():.0f}, max {visible.sum(1).max()}", flush=True)
    rng = np.random.default_rng(0)
    train = np.flatnonzero(~scene.heldout)
    order = np.concatenate([rng.permutation(train) for _ in range(-(-images // len(train)))])[:images]
    saved = {"order": order, "image_cost": visible.sum(1)[order].astype(float)}
    print("| K | B | vertices | edges | cells seen per image | longest path (edges) | parallelism |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for num_cells in CELLS:
        cell = kd_cells(scene.means.astype(np.float64), num_cells).astype(np.int64)
        in_cell = np.zeros((len(cell), num_cells))
        in_cell[np.arange(len(cell)), cell] = 1.0
        sees = visible.astype(float) @ in_cell  # [C, K] visible Gaussians per cell
        saved[f"sees_{num_cells}"] = sees > 0
        saved[f"cell_bytes_{num_cells}"] = np.bincount(cell, minlength=num_cells).astype(float)
        for batch_size in BATCH_SIZES:
            steps = build_step_graph(order.reshape(-1, batch_size), sees > 0)
            cost = np.zeros(steps.num_vertices)
            cost[:steps.num_images] = saved["image_cost"]
            depth = int(critical_path(steps, np.ones(steps.num_vertices))) - 1  # edges on the longest path
            print(f"| {num_cells} | {batch_size} | {steps.num_vertices:,} | {steps.graph.num_edges:,} | "
                  f"{steps.graph.num_edges / 2 / steps.num_images:.1f} | {depth} | "
                  f"{parallelism(steps, cost):.2f} |", flush=True)
    np.savez(os.path.join(folder, "window.npz"), **saved)


def plan(folder: str) -> None:
    """Time ``plan_schedule`` for every K and B at this job's size; rank 0 prints JSON lines."""
    from odin_sched.odin.depgraph import build_step_graph
    from odin_sched.odin.schedule import plan_schedule
    from pregel.comm import Comm

    comm = Comm()
    window = dict(np.load(os.path.join(folder, "window.npz")))
    for num_cells in CELLS:
        for batch_size in BATCH_SIZES:
            steps = build_step_graph(window["order"].reshape(-1, batch_size), window[f"sees_{num_cells}"])
            owner = np.arange(num_cells) % comm.size
            times = []
            for _ in range(2):  # the first run includes Numba compilation
                comm.barrier()
                started = time.perf_counter()
                schedule = plan_schedule(comm, steps, window["image_cost"], window[f"cell_bytes_{num_cells}"], owner)
                times.append(time.perf_counter() - started)
            if comm.rank == 0:
                print(json.dumps({"ranks": comm.size, "K": num_cells, "B": batch_size, "first_s": times[0],
                                  "second_s": times[1], "levels": int(schedule.level.max()),
                                  "critical_path": float(schedule.priority.max())}), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gaussians", type=int, default=20000)
    parser.add_argument("--cameras", type=int, default=200)
    parser.add_argument("--images", type=int, default=2000)
    parser.add_argument("--ranks", default="1,2")
    parser.add_argument("--plan-worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.plan_worker:
        plan(args.plan_worker)
        return
    folder = tempfile.mkdtemp()
    try:
        prepare(folder, args.gaussians, args.cameras, args.images)
        mpiexec = shutil.which("mpiexec", path=os.path.dirname(sys.executable)) or "mpiexec"
        for ranks in args.ranks.split(","):
            subprocess.run([mpiexec, "-n", ranks, sys.executable, "-m", "mpi4py", os.path.abspath(__file__),
                            "--plan-worker", folder], check=True)
    finally:
        shutil.rmtree(folder)


if __name__ == "__main__":
    main()
