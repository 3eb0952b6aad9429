"""Odin at real model sizes: one process against ``--mode odin`` and ``--mode barrier`` at P = 2 and 3,
side by side in one run, each a whole ``pregel train`` command (start-up, training, writing).

For each model size (default 2,000,000 and 200,000 Gaussians), a generated `city` scene (48 cameras at
64 x 48 by default, taken 8 side by side at each of 6 spots of the fly-through: ``generate-scene
--views-per-spot 8``, so that each spot's held-out camera sees what its 7 training cameras see) is
trained from a PLY of its own Gaussians with seeded noise on their colours (``--color-noise``, standard
deviation 0.05: training has something to correct that the held-out views show) for 12 steps with
window 4 (``--sh-degree``, default 3 as ``pregel train``'s): one process with B = 2 and B = 3 (culling: an image
renders only the Gaussians that can touch it, as an odin image step does), one process with B = 2 and
``--no-cull`` (every Gaussian rendered for every image, for reference), and ``mpiexec -n P`` with B = P
in both distributed modes.
Reported per run, from the trained file's ``/metrics/per_rank`` where the trainer records it ("n/a"
where a column does not exist): images/s of training, peak RSS per rank (``peak_rss_bytes``, each
process's own peak, its part of writing the outputs included), the largest process's peak RSS
(``getrusage`` of the command's children, always measured), Gaussian state held per rank
(``model_bytes``), bytes sent at window ends per rank per window (``window_end_bytes``) and planning
seconds per window (``plan_seconds``). One process's model bytes are computed (G x the
bytes of a Gaussian's training state: parameters, two Adam moments, step count, accumulators); it
records no per-rank metrics. The held-out PSNR of each run is printed with that of the untrained model
(the PLY, rendered as the trainer evaluates), and whether the distributed runs' PSNR equals the one
process's with the same B bit for bit (it must: training is exact). Then the targets of the issue this
benchmark was written for:

* ``model_bytes`` per rank at P = 3 at most 0.45 of one process's;
* peak RSS per rank at P = 3 at most 0.65 of one process's;
* window-end bytes per rank per window at most 64 bytes per cell plus 16 per image of the window;
* odin's images/s at P = 2 at least 1.5x one process's with B = 2 (P = 3 runs three ranks on the
  machine's cores: reported, no target).

With ``--rounds N`` it runs instead N alternating rounds of one process and odin at P = 2, both with B = 2,
and prints per run images/s, processor seconds and the load average, and the median ratio (on a shared
machine a single pair of runs decides nothing); ``--send-thread`` adds to each round odin with ``pregel
train --send-thread``, ``--batches-ahead N`` odin with ``pregel train --batches-ahead N``.

Heavy (a few GB per rank at 2,000,000 Gaussians): run under the shared lock, with a time limit::

    flock /tmp/heavy.lock timeout 3600 .venv/bin/python benchmarks/odin_scale.py [--sizes 2000000,200000]

At megapixel image sizes (docs/odin-measurements.md's table; 4 steps, window 2: two windows)::

    flock /tmp/heavy.lock timeout 1500 prlimit --as=12000000000 .venv/bin/python benchmarks/odin_scale.py \
        --sizes 2000000 --cameras 48 --width 1280 --height 720 --steps 4 --window 2 --dir /tmp/i20mp
"""
import argparse
import os
import subprocess
import sys
import time

for _var in ("OMP_NUM_THREADS", "NUMBA_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[_var] = "1"

import h5py  # noqa: E402
import numpy as np  # noqa: E402

BIN = os.path.dirname(sys.executable)
PREGEL, MPIEXEC = os.path.join(BIN, "pregel"), os.path.join(BIN, "mpiexec")
# Runs a command and prints the peak RSS (KiB) of the largest process it waited for (ranks included).
PEAK_RSS = ("import resource, subprocess, sys; code = subprocess.run(sys.argv[1:]).returncode; "
            "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); sys.exit(code)")
#: the issue's targets
MODEL_RATIO, RSS_RATIO, SPEEDUP = 0.45, 0.65, 1.5
CELL_BYTES, IMAGE_BYTES = 64, 16
#: the scene's views per spot (each spot's first is held out) and the seed of the PLY's colour noise
VIEWS_PER_SPOT, NOISE_SEED = 8, 7


def state_bytes_per_gaussian(sh_degree: int = 3) -> int:
    """Bytes of one Gaussian's training state on one process: float32 parameters and two Adam moments,
    an int64 step count, an int64 id, and the densification accumulators (float32 sum, int64 count,
    float32 largest radius)."""
    from odin_sched.training.step import param_columns

    return 3 * 4 * param_columns(sh_degree) + 8 + 8 + (4 + 8 + 4)


def timed(command: list) -> dict:
    """Run a command; its exit status (``code``), stderr and last stderr line (``line``), wall seconds,
    processor seconds of all its processes (user + system, ``cpu``) and the peak RSS in bytes of its
    largest process (``rss``)."""
    started, cpu = time.perf_counter(), os.times()
    done = subprocess.run([sys.executable, "-c", PEAK_RSS, *command], capture_output=True, text=True)
    wall = time.perf_counter() - started
    cpu = sum(getattr(os.times(), f) - getattr(cpu, f) for f in ("children_user", "children_system"))
    lines = done.stderr.strip().splitlines()
    return dict(code=done.returncode, stderr=done.stderr, line=lines[-1] if lines else "", wall=wall, cpu=cpu,
                rss=int(done.stdout.split()[-1]) * 1024 if done.stdout.strip() else 0)


def run(command: list) -> tuple:
    """Run a command that must succeed; returns (wall seconds, peak RSS in bytes of its largest process,
    processor seconds of all its processes: user + system)."""
    done = timed(command)
    if done["code"] != 0:
        sys.exit(f"failed: {' '.join(command)}\n{done['stderr'][-3000:]}")
    return done["wall"], done["rss"], done["cpu"]


def make_inputs(folder: str, gaussians: int, args) -> tuple:
    """(scene file, PLY of its Gaussians with noisy colours) of a generated `city` scene with
    ``VIEWS_PER_SPOT`` views per spot, made once per size (and colour noise)."""
    scene = os.path.join(folder, f"city_{gaussians}_spots{VIEWS_PER_SPOT}.h5")
    ply = os.path.join(folder, f"city_{gaussians}_spots{VIEWS_PER_SPOT}_noise{args.color_noise:g}.ply")
    if not os.path.exists(scene):
        wall, _, cpu = run([PREGEL, "generate-scene", "--gaussians", str(gaussians), "--cameras", str(args.cameras),
                            "--width", str(args.width), "--height", str(args.height), "--layout", "city", "--seed",
                            "1", "--views-per-spot", str(VIEWS_PER_SPOT), "--out", scene])
        print(f"generated {scene}: {wall:.1f} s, {cpu:.1f} processor s")
    if not os.path.exists(ply):
        from odin_sched.scenes.ply import write_ply
        from odin_sched.scenes.scene_io import read_scene

        started = time.perf_counter()
        model = read_scene(scene, lazy_images=True, init=False)
        noise = np.random.default_rng(NOISE_SEED).normal(0.0, args.color_noise, model.colors.shape)
        colors = np.clip(model.colors + noise.astype(np.float32), 0.0, 1.0)
        write_ply(ply, model.means, model.scales, model.quats, model.opacities, colors=colors)
        print(f"wrote {ply}: {time.perf_counter() - started:.1f} s")
    return scene, ply


def untrained_psnr(scene: str, ply: str, sh_degree: int) -> float:
    """Mean held-out PSNR (dB) of the model in ``ply`` before any step, evaluated as the trainers evaluate
    (``odin_sched.training.train.evaluate``, culled) at the SH degree of the first step."""
    import torch
    from kernels.splat import render
    from odin_sched.training.config import TrainConfig
    from odin_sched.training.culling import Culling
    from odin_sched.training.train import evaluate, prepare

    setup = prepare(TrainConfig(scene=scene, steps=1, init_ply=ply, sh_degree=sh_degree), lazy_images=True)
    ids = torch.arange(len(setup.initial["means"]))
    kept = Culling().kept_rows(setup.initial, ids, setup.scene, setup.test_ids)
    return evaluate(render, setup.initial, setup.scene, setup.test_ids, setup.targets, setup.active_sh_degree(1),
                    kept)[0]


def train_command(args, scene, ply, out, batch, mode=None, ranks=1, cull=True, flags=()) -> list:
    command = [PREGEL, "train", "--scene", scene, "--init-ply", ply, "--steps", str(args.steps), "--batch-size",
               str(batch), "--out", out, "--seed", "0", "--sh-degree", str(args.sh_degree)]
    if not cull:
        command.append("--no-cull")
    if mode is not None:
        command = [MPIEXEC, "-n", str(ranks)] + command + ["--mode", mode, "--window", str(args.window)]
    return command + list(flags)


def read_run(path) -> dict:
    """The run's attributes and its per-rank metrics as {field: [ranks] array} (empty for one process)."""
    with h5py.File(path, "r") as f:
        attrs = dict(f.attrs)
        table = f["metrics/per_rank"][()] if "metrics/per_rank" in f else None
    fields = [str(name) for name in attrs.get("per_rank_fields", [])]
    columns = {} if table is None else {name: table[:, i] for i, name in enumerate(fields)}
    return {"attrs": attrs, "columns": columns}


def per_rank(columns: dict, name: str, scale: float = 1.0, fmt: str = "{:.0f}") -> str:
    """'a / b / c' of a per-rank column (divided by ``scale``), or 'n/a' when the run does not record it."""
    if name not in columns:
        return "n/a"
    return " / ".join(fmt.format(v / scale) for v in columns[name])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="2000000,200000")
    parser.add_argument("--ranks", default="2,3")
    parser.add_argument("--cameras", type=int, default=48)
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--height", type=int, default=48)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--window", type=int, default=4)
    parser.add_argument("--sh-degree", type=int, default=3, help="pregel train's --sh-degree (its default 3)")
    parser.add_argument("--color-noise", type=float, default=0.05,
                        help="standard deviation of the seeded noise added to the PLY's colours (default 0.05)")
    parser.add_argument("--dir", default="benchmarks/odin_scale_out")
    parser.add_argument("--rounds", type=int, default=0,
                        help="instead of the table: N alternating rounds of one process and odin, both with "
                             "B = P (P: the smallest of --ranks), and their median ratio")
    parser.add_argument("--send-thread", action="store_true",
                        help="with --rounds: each round also runs odin with pregel train's --send-thread")
    parser.add_argument("--batches-ahead", type=int, default=None, metavar="N",
                        help="with --rounds: each round also runs odin with pregel train's --batches-ahead N")
    parser.add_argument("--hold-share", default=None, metavar="S",
                        help="with --rounds: each round also runs odin with pregel train's --hold-share S")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    ranks = [int(r) for r in args.ranks.split(",")]
    os.makedirs(args.dir, exist_ok=True)
    if args.rounds:
        for gaussians in sizes:
            alternate(args, gaussians, min(ranks))
        return
    windows = -(-args.steps // args.window)
    print(f"`city` scenes, {args.cameras} cameras at {args.width} x {args.height}, {args.steps} steps, window "
          f"{args.window}, SH degree {args.sh_degree}, started from --init-ply; load average "
          f"{os.getloadavg()[0]:.2f} at the start")
    for gaussians in sizes:
        scene, ply = make_inputs(args.dir, gaussians, args)
        one_model = gaussians * state_bytes_per_gaussian(args.sh_degree)
        print(f"\n### {gaussians:,} Gaussians (one process's training state: {one_model / 1e9:.2f} GB)\n")
        before = untrained_psnr(scene, ply, args.sh_degree)
        print(f"held-out PSNR of the untrained model: {before:.4f} dB\n")
        print("| run | B | images/s | whole command s | processor s | load before | largest process peak RSS GB "
              "| peak RSS GB/rank | model GB/rank | window-end bytes/rank/window | plan s/window/rank "
              "| held-out PSNR dB |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|")
        results = {}
        runs = ([("one process", b, None, 1, True) for b in sorted(set(ranks))]
                + [("one process, --no-cull", min(ranks), None, 1, False)]
                + [(f"{mode} P={p}", p, mode, p, True) for mode in ("odin", "barrier") for p in ranks])
        for name, batch, mode, p, cull in runs:
            out = os.path.join(args.dir, f"{gaussians}_{mode or 'single'}_p{p}_b{batch}{'' if cull else '_nocull'}.h5")
            load = os.getloadavg()[0]
            wall, rss, cpu = run(train_command(args, scene, ply, out, batch, mode, p, cull))
            data = read_run(out)
            cols, attrs = data["columns"], data["attrs"]
            images_per_s = attrs["steps_per_second"] * batch
            results[(mode if cull else "no-cull", p, batch)] = dict(images=images_per_s, rss=rss, cols=cols,
                                                                    cells=attrs.get("cells"), psnr=attrs["final_psnr"])
            print(f"| {name} | {batch} | {images_per_s:.2f} | {wall:.1f} | {cpu:.1f} | {load:.2f} | {rss / 1e9:.2f} | "
                  f"{per_rank(cols, 'peak_rss_bytes', 1e9, '{:.2f}')} | "
                  f"{per_rank(cols, 'model_bytes', 1e9, '{:.2f}') if mode else f'{one_model / 1e9:.2f} (computed)'} | "
                  f"{per_rank(cols, 'window_end_bytes', windows, '{:,.0f}')} | "
                  f"{per_rank(cols, 'plan_seconds', windows, '{:.2f}')} | {attrs['final_psnr']:.4f} |", flush=True)
        print_psnr(results, before)
        print_targets(results, ranks, one_model, windows, args)
        print(f"\nload average {os.getloadavg()[0]:.2f} after the {gaussians:,}-Gaussian runs")


def alternate(args, gaussians: int, p: int) -> None:
    """``args.rounds`` rounds of one process then odin at P = ``p``, both with B = ``p``: per run images/s,
    the whole command's processor seconds (user + system, every process), odin's processor seconds per
    rank in its training loop (``processor_seconds``) and the load average before and after; per round the
    ratio odin / one process; then the median ratio."""
    scene, ply = make_inputs(args.dir, gaussians, args)
    print(f"\n### {gaussians:,} Gaussians: {args.rounds} rounds, one process and odin P={p}, B={p}, {args.steps} "
          f"steps, window {args.window}\n")
    print("| round | run | images/s | whole command s | processor s (command) | processor s/rank (training) "
          "| load before / after | odin / one process |")
    print("|---|---|---|---|---|---|---|---|")
    runs = [("one process", None, 1, ()), (f"odin P={p}", "odin", p, ())]
    if args.send_thread:
        runs.append((f"odin P={p} --send-thread", "odin", p, ("--send-thread",)))
    if args.batches_ahead is not None:
        runs.append((f"odin P={p} --batches-ahead {args.batches_ahead}", "odin", p,
                     ("--batches-ahead", str(args.batches_ahead))))
    if args.hold_share is not None:
        runs.append((f"odin P={p} --hold-share {args.hold_share}", "odin", p, ("--hold-share", args.hold_share)))
    ratios = {name: [] for name, mode, _, _ in runs if mode}
    for i in range(args.rounds):
        single = None
        for name, mode, ranks, flags in runs:
            tag = "".join(f"_{f.strip('-')}" for f in flags)
            out = os.path.join(args.dir, f"{gaussians}_{mode or 'single'}_p{ranks}_b{p}{tag}_round.h5")
            before = os.getloadavg()[0]
            wall, _, cpu = run(train_command(args, scene, ply, out, p, mode, ranks, flags=flags))
            data = read_run(out)
            images = data["attrs"]["steps_per_second"] * p
            single = single or images
            if mode:
                ratios[name].append(images / single)
            print(f"| {i + 1} | {name} | {images:.2f} | {wall:.1f} | {cpu:.1f} | "
                  f"{per_rank(data['columns'], 'processor_seconds', 1.0, '{:.2f}') if mode else ''} | "
                  f"{before:.2f} / {os.getloadavg()[0]:.2f} | {f'{images / single:.2f}' if mode else ''} |", flush=True)
    for name, values in ratios.items():
        print(f"\nmedian {name} / one process over {args.rounds} rounds: {np.median(values):.2f} "
              f"({min(values):.2f}-{max(values):.2f}; goal >= {SPEEDUP})")


def print_psnr(results: dict, before: float) -> None:
    """Held-out PSNR before and after training, and whether every run equals the one process with its B
    bit for bit."""
    for batch in sorted({b for (_, _, b) in results}):
        runs = {key: r["psnr"] for key, r in results.items() if key[2] == batch}
        single = runs[(None, 1, batch)]
        others = ", ".join(f"{mode} P={p}: {'equal' if value == single else f'DIFFERS ({float(value)!r})'}"
                           for (mode, p, _), value in runs.items() if mode is not None)
        print(f"\nB = {batch}: held-out PSNR {before:.4f} dB untrained, {float(single)!r} dB after training "
              f"(one process); bit for bit against it: {others}")


def print_targets(results: dict, ranks: list, one_model: int, windows: int, args) -> None:
    """The issue's target ratios from the runs (n/a where a needed column is not recorded)."""
    p3, p2 = max(ranks), min(ranks)
    odin3, odin2 = results[("odin", p3, p3)], results[("odin", p2, p2)]
    single = results[(None, 1, p3)]
    cols = odin3["cols"]
    model = f"{cols['model_bytes'].max() / one_model:.2f}" if "model_bytes" in cols else "n/a"
    rss = (f"{cols['peak_rss_bytes'].max() / single['rss']:.2f}" if "peak_rss_bytes" in cols
           else f"n/a (largest process: {odin3['rss'] / single['rss']:.2f})")
    budget = CELL_BYTES * (odin3["cells"] or 0) + IMAGE_BYTES * args.window * p3
    end = f"{cols['window_end_bytes'].max() / windows:,.0f}" if "window_end_bytes" in cols else "n/a"
    speedup = odin2["images"] / results[(None, 1, p2)]["images"]
    print("\n| target | measured | goal |\n|---|---|---|")
    print(f"| model bytes per rank, odin P={p3} / one process | {model} | <= {MODEL_RATIO} |")
    print(f"| peak RSS per rank, odin P={p3} / one process (B={p3}) | {rss} | <= {RSS_RATIO} |")
    print(f"| window-end bytes per rank per window, odin P={p3} | {end} | <= {budget:,} "
          f"({CELL_BYTES} x {odin3['cells']} cells + {IMAGE_BYTES} x {args.window * p3} images) |")
    print(f"| images/s, odin P={p2} / one process (B={p2}) | {speedup:.2f} | >= {SPEEDUP} |")
    print(f"| images/s, odin P={p2} / barrier P={p2} | {odin2['images'] / results[('barrier', p2, p2)]['images']:.2f} "
          f"| (reported) |")
    print(f"| images/s, one process / one process --no-cull (B={p2}) | "
          f"{results[(None, 1, p2)]['images'] / results[('no-cull', 1, p2)]['images']:.2f} | (reported) |")
    print(f"| images/s, odin P={p3} / one process (B={p3}) | "
          f"{odin3['images'] / single['images']:.2f} | (reported) |")


if __name__ == "__main__":
    main()
