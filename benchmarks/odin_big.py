"""A model one process cannot hold: the same address-space cap per process for one process and for
``--mode odin`` at P = 3, on a generated `city` scene of 10,000,000 Gaussians (48 cameras at 64 x 48,
8 views per spot, trained from a PLY of its Gaussians with noisy colours, as ``odin_scale.py`` makes
its inputs), a few steps.

The cap is RLIMIT_AS, set per process by ``prlimit --as=BYTES`` in front of ``pregel train`` (under
``mpiexec``, in front of each rank's): no cgroup is needed, and an allocation past it fails inside the
process (numpy's MemoryError, torch's allocator error), which ``pregel`` turns into one line and exit
status 3 (``pregel.memory.out_of_memory``), on every rank under ``mpiexec``, before anything is
written. The cap counts address space, not resident memory: it has to leave room for what the libraries
reserve without touching (odin's ranks, 2.15 GB resident at their peak, train under a 3.5 GB cap).
SH degree 1 by default (3.1 GB of training state for one process at 10M, against 7.4 GB at degree 3),
so that the runs fit the 2-core, 24 GiB machine shared with others that this was measured on.

Reported: the one process's exit status, its one line, and that it wrote nothing; for odin, images/s of
training, the whole command's wall time (start-up, load, planning, training, writing) and processor
seconds, peak RSS per rank (``peak_rss_bytes``) and of the largest process, Gaussian state held per
rank (``model_bytes``) against one process's (computed), held-out PSNR before and after. Inputs are made
once per size (in ``--dir``), without the cap, and timed.

Heavy (at 10M Gaussians and SH degree 1 about 2.2 GB resident per rank, and 4.4 GB for the one process
uncapped; under the cap it stops at about 2.7 GB): run under the shared lock::

    flock /tmp/heavy.lock timeout 3000 .venv/bin/python benchmarks/odin_big.py \\
        [--gaussians 10000000 --cap-gb 3.5 --ranks 3 --steps 4 --window 2 --sh-degree 1]
"""
import argparse
import os
import time

from odin_scale import (MPIEXEC, PREGEL, make_inputs, per_rank, read_run, state_bytes_per_gaussian,  # a sibling
                        timed, untrained_psnr)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gaussians", type=int, default=10_000_000)
    parser.add_argument("--cap-gb", type=float, default=3.5, help="address-space cap per process, GB (1e9 bytes)")
    parser.add_argument("--ranks", type=int, default=3)
    parser.add_argument("--cameras", type=int, default=48)
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--height", type=int, default=48)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--window", type=int, default=2)
    parser.add_argument("--sh-degree", type=int, default=1)
    parser.add_argument("--color-noise", type=float, default=0.05)
    parser.add_argument("--dir", default="benchmarks/odin_big_out")
    args = parser.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    started = time.perf_counter()
    scene, ply = make_inputs(args.dir, args.gaussians, args)
    print(f"inputs ready in {time.perf_counter() - started:.1f} s")
    before = untrained_psnr(scene, ply, args.sh_degree)
    cap = int(args.cap_gb * 1e9)
    p, one_model = args.ranks, args.gaussians * state_bytes_per_gaussian(args.sh_degree)
    train = ["--scene", scene, "--init-ply", ply, "--steps", str(args.steps), "--batch-size", str(p), "--seed", "0",
             "--sh-degree", str(args.sh_degree)]
    capped = ["prlimit", f"--as={cap}", PREGEL, "train"]
    print(f"`city`, {args.gaussians:,} Gaussians, {args.cameras} cameras at {args.width} x {args.height}, "
          f"{args.steps} steps, B = {p}, SH degree {args.sh_degree}, cap {cap / 1e9:.2f} GB of address space per "
          f"process; one process's training state {one_model / 1e9:.2f} GB (computed); held-out PSNR untrained "
          f"{before:.4f} dB\n")
    print("| run | exit | images/s | whole command s | processor s | load before | largest process peak RSS GB "
          "| peak RSS GB/rank | model GB/rank | held-out PSNR dB |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, ranks in (("one process", 1), (f"odin P={p}", p)):
        out = os.path.join(args.dir, f"{args.gaussians}_{'single' if ranks == 1 else f'odin_p{p}'}.h5")
        if os.path.exists(out):
            os.remove(out)
        command = capped + train + ["--out", out]
        if ranks > 1:
            command = [MPIEXEC, "-n", str(ranks)] + command + ["--mode", "odin", "--window", str(args.window)]
        load = os.getloadavg()[0]
        result = timed(command)
        if result["code"] != 0:
            print(f"| {name} | {result['code']} | failed | {result['wall']:.1f} | {result['cpu']:.1f} | {load:.2f} | "
                  f"{result['rss'] / 1e9:.2f} | | | |", flush=True)
            print(f"\n{name}'s last line: {result['line']}\n{name} wrote {out}: {os.path.exists(out)}\n")
            continue
        data = read_run(out)
        cols, attrs = data["columns"], data["attrs"]
        print(f"| {name} | 0 | {attrs['steps_per_second'] * p:.2f} | {result['wall']:.1f} | {result['cpu']:.1f} | "
              f"{load:.2f} | {result['rss'] / 1e9:.2f} | {per_rank(cols, 'peak_rss_bytes', 1e9, '{:.2f}')} | "
              f"{per_rank(cols, 'model_bytes', 1e9, '{:.2f}') if ranks > 1 else f'{one_model / 1e9:.2f} (computed)'} "
              f"| {attrs['final_psnr']:.4f} |", flush=True)
    if os.path.exists(os.path.join(args.dir, f"{args.gaussians}_single.h5")):
        print("\nThe cap did not stop the one process: lower --cap-gb or raise --gaussians.")
    print(f"\nload average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
