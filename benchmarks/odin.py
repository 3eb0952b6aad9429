"""Barrier-free (Odin) against barrier (Grendel-GS style) training, side by side in one run.

On a generated `city` scene where each camera sees a small part, for each P (default 2 and 3) with
batches of B = 2P images, the same `pregel train` command runs under mpiexec in both modes (alternating,
``--repeats`` times, medians reported) and the single-process trainer runs once per B as the reference.
Reported per run: images/s and steps/s of training, the whole command's wall time and peak memory,
compute / communication / wait seconds per rank (wait: blocked on data or at a barrier, not overlapped
with computation), the hidden fraction 1 - wait_odin / wait_barrier, and whether the parameters equal
the single-process run bit for bit. Also the parallelism (work / critical path) of the dependency
graph for B = 1, P and 4P, and a Gantt chart of both modes (``--png``).

    .venv/bin/python benchmarks/odin.py [--ranks 2,3] [--steps 40] [--repeats 3]
"""
import argparse
import os
import subprocess
import sys
import time

import h5py
import numpy as np

BIN = os.path.dirname(sys.executable)
PREGEL, MPIEXEC = os.path.join(BIN, "pregel"), os.path.join(BIN, "mpiexec")
PARAMS = ("means", "scales", "quats", "opacities", "colors", "sh")


# Runs a command in a fresh process and prints the peak RSS (KB) of the largest process it waited for.
PEAK_RSS = ("import resource, subprocess, sys; code = subprocess.run(sys.argv[1:]).returncode; "
            "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); sys.exit(code)")


def run(command: list) -> tuple[float, float]:
    """Run a command; returns (wall seconds, peak RSS of its largest process in MB)."""
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", PEAK_RSS, *command], capture_output=True, text=True,
                          env=dict(os.environ, OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1"))
    wall = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"failed: {' '.join(command)}\n{done.stderr}")
    return wall, int(done.stdout.split()[-1]) / 1024


def train_command(args, scene, out, batch, mode=None, ranks=1, timeline=None):
    command = [PREGEL, "train", "--scene", scene, "--steps", str(args.steps), "--batch-size", str(batch),
               "--eval-every", str(args.steps), "--out", out, "--seed", "0", "--no-densify"]
    if mode is not None:
        command = [MPIEXEC, "-n", str(ranks)] + command + ["--mode", mode, "--window", str(args.window)]
        command += ["--cells", str(args.cells_per_rank * ranks)]
    if timeline is not None:
        command += ["--timeline", timeline]
    return command


def read_run(path) -> dict:
    with h5py.File(path, "r") as f:
        attrs = dict(f.attrs)
        per_rank = f["metrics/per_rank"][()] if "metrics/per_rank" in f else None
        params = {name: f[f"gaussians/{name}"][()] for name in PARAMS}
    return {"attrs": attrs, "per_rank": per_rank, "params": params}


def parallelism_table(scene_path, ranks, args):
    """Work / critical path of the first window's dependency graph for B = 1, P and 4P, planned by the
    trainer's own ``plan_window`` (on this one process, for P ranks)."""
    from odin_sched.odin.depgraph import parallelism
    from odin_sched.odin.planner import PIXEL_COST, PlanConfig, plan_window
    from odin_sched.training.train import TrainConfig, prepare
    from odin_sched.scenes.visibility import window_margin
    from pregel.comm import Comm

    comm, rows = Comm(), []
    for p in ranks:
        for batch in sorted({1, p, 4 * p}):
            setup = prepare(TrainConfig(scene_path, args.steps, batch_size=batch, eval_every=args.steps))
            scene, initial = setup.scene, setup.initial
            lrs = setup.settings.lrs(setup.extent, 1)
            margin = window_margin(lrs["means"], lrs["scales"], setup.settings.betas, args.window)
            cells = args.cells_per_rank * p
            window, _ = plan_window(comm, initial["means"].numpy(), initial["scales"].numpy(), scene,
                                    setup.batches, 0, args.window, margin, PlanConfig(cells, p))
            steps = window.steps
            cost = np.zeros(steps.num_vertices)  # the planner's predicted image cost; cell updates cost 0
            counts = np.diff(window.member_indptr)
            cost[:steps.num_images] = (window.visible[steps.image_camera] @ counts
                                       + scene.width * scene.height * PIXEL_COST)
            rows.append((p, batch, cells, float(window.visible.mean()), parallelism(steps, cost)))
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", default="2,3")
    parser.add_argument("--gaussians", type=int, default=30000)
    parser.add_argument("--cameras", type=int, default=160)
    parser.add_argument("--width", type=int, default=96)
    parser.add_argument("--height", type=int, default=72)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--window", type=int, default=10)
    parser.add_argument("--cells-per-rank", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dir", default="benchmarks/odin_out")
    parser.add_argument("--png", default="benchmarks/odin_timeline.png")
    args = parser.parse_args()
    ranks = [int(r) for r in args.ranks.split(",")]
    os.makedirs(args.dir, exist_ok=True)
    scene = os.path.join(args.dir, "city.h5")
    subprocess.run([PREGEL, "generate-scene", "--gaussians", str(args.gaussians), "--cameras", str(args.cameras),
                    "--width", str(args.width), "--height", str(args.height), "--layout", "city", "--seed", "1",
                    "--out", scene], check=True, stdout=subprocess.DEVNULL)
    print(f"city scene: {args.gaussians:,} Gaussians, {args.cameras} cameras at {args.width} x {args.height}, "
          f"{args.steps} steps, window {args.window}, {args.cells_per_rank} cells per rank, "
          f"load average {os.getloadavg()[0]:.1f}")

    print("\n| P | B | mode | images/s | steps/s | vs barrier | whole command s | peak RSS MB/rank | compute s/rank "
          "| comm s/rank | wait s/rank | hidden fraction | = single process |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    traces = {}
    for p in ranks:
        batch = 2 * p
        single_out = os.path.join(args.dir, f"single_b{batch}.h5")
        run(train_command(args, scene, single_out, batch))
        reference = read_run(single_out)["params"]
        results = {mode: [] for mode in ("odin", "barrier")}
        for rep in range(args.repeats):
            for mode in results:
                out = os.path.join(args.dir, f"{mode}_p{p}_{rep}.h5")
                timeline = os.path.join(args.dir, f"{mode}_p{p}.json") if rep == 0 else None
                wall, rss = run(train_command(args, scene, out, batch, mode, p, timeline))
                run_data = read_run(out)
                run_data.update(wall=wall, rss=rss)
                results[mode].append(run_data)
                traces.setdefault(p, {})[mode] = os.path.join(args.dir, f"{mode}_p{p}.json")
        medians = {}
        for mode, runs in results.items():
            sps = np.median([r["attrs"]["steps_per_second"] for r in runs])
            per_rank = np.median([r["per_rank"] for r in runs], axis=0)
            fields = list(runs[0]["attrs"]["per_rank_fields"])
            col = {name: per_rank[:, i] for i, name in enumerate(fields)}
            equal = all(np.array_equal(r["params"][k], reference[k]) for r in runs for k in PARAMS)
            medians[mode] = dict(sps=sps, wall=np.median([r["wall"] for r in runs]),
                                 rss=max(r["rss"] for r in runs), col=col, equal=equal,
                                 wait=np.median([r["per_rank"][:, fields.index("wait_seconds")].sum() for r in runs]))
        hidden = 1.0 - medians["odin"]["wait"] / medians["barrier"]["wait"]
        for mode, m in medians.items():
            fmt = lambda values: " / ".join(f"{v:.2f}" for v in values)  # noqa: E731
            print(f"| {p} | {batch} | {mode} | {m['sps'] * batch:.1f} | {m['sps']:.2f} | "
                  f"{m['sps'] / medians['barrier']['sps']:.2f}x | {m['wall']:.1f} | {m['rss']:.0f} | "
                  f"{fmt(m['col']['compute_seconds'])} | {fmt(m['col']['comm_seconds'])} | "
                  f"{fmt(m['col']['wait_seconds'])} | {hidden:.2f} | {'yes' if m['equal'] else 'NO'} |")

    print("\nParallelism of the dependency graph (work / critical path), first window:")
    print("| P | B | cells | predicted visible share of cells | work / critical path |\n|---|---|---|---|---|")
    for p, batch, cells, share, par in parallelism_table(scene, ranks, args):
        print(f"| {p} | {batch} | {cells} | {share:.2f} | {par:.2f} |")

    if args.png and ranks:
        from pregel.plot import plot

        p = ranks[0]
        plot([traces[p]["odin"], traces[p]["barrier"]], args.png, labels=[f"odin, P={p}", f"barrier, P={p}"])
        print(f"\nGantt chart of both modes at P = {p}: {args.png}")


if __name__ == "__main__":
    main()
