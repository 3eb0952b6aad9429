"""Held-out PSNR of throughput-first training (odin-fast) against the exact mode, same steps.

On the demo's objects scene and a small city scene, P = 2, B = 4: ``--mode odin`` (equal to the
single-process trainer) and ``--mode odin-fast --max-staleness K`` for K = 1, 2 (stale impact 0.25) and K = 1 with 0.1; prints PSNR, the
difference, stale reads and the largest staleness seen. ``python benchmarks/odin_fast_quality.py [workdir]``.
"""
import argparse
import os
import subprocess
import sys

import h5py

PY = sys.executable
MPIEXEC = os.path.join(os.path.dirname(PY), "mpiexec")
SCENES = {"objects (demo)": ["--gaussians", "2000", "--cameras", "24", "--width", "64", "--height", "64", "--seed", "1"],
          "city": ["--gaussians", "3000", "--cameras", "40", "--width", "64", "--height", "48", "--layout", "city"]}
STEPS, BATCH = 150, 4


def main(work):
    os.makedirs(work, exist_ok=True)
    env = dict(os.environ, OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1")
    print("scene           mode                    PSNR dB  vs exact  stale reads  max staleness  steps/s")
    for name, options in SCENES.items():
        scene = os.path.join(work, name.split()[0] + ".h5")
        subprocess.run([PY, "-m", "pregel.cli", "generate-scene", *options, "--out", scene], check=True,
                       capture_output=True, env=env)
        exact = None
        for mode, k, impact in (("odin", 0, 0.25), ("odin-fast", 1, 0.25), ("odin-fast", 2, 0.25),
                                ("odin-fast", 1, 0.1)):
            out = os.path.join(work, f"{name.split()[0]}_{mode}_{k}_{impact}.h5")
            subprocess.run([MPIEXEC, "-n", "2", PY, "-m", "pregel.cli", "train", "--scene", scene, "--steps", str(STEPS),
                            "--batch-size", str(BATCH), "--mode", mode, "--max-staleness", str(k), "--stale-impact",
                            str(impact), "--eval-every",
                            str(STEPS), "--out", out, "--no-densify"], check=True, capture_output=True, env=env)
            with h5py.File(out) as f:
                psnr, a = float(f.attrs["final_psnr"]), f.attrs
                exact = psnr if exact is None else exact
                label = mode if mode == "odin" else f"{mode} K={k} F={impact}"
                print(f"{name:<15} {label:<22} {psnr:>8.2f} {psnr - exact:>+9.2f} {int(a['stale_reads']):>12} "
                      f"{int(a['max_staleness_seen']):>14} {float(a['steps_per_second']):>8.2f}", flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("workdir", nargs="?", default="odin_fast_quality", help="where its files go (default: %(default)s)")
    main(parser.parse_args().workdir)
