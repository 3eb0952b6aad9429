"""Validate the simulator against real runs on this machine: P = 2 and 3, odin and barrier.

For each (P, mode) a real ``mpiexec -n P pregel train`` run (a city scene generated with another seed
than the calibration's, B = 2P) is measured and the same training (same scene, seed, steps, batch
size, cells, window) is simulated with the cpu-here profile; each real run is repeated and the
medians are compared. Measured training time = the largest per-rank compute + comm + wait + plan
seconds (the run's wall time without the final held-out evaluation, which the simulator does not
model); wait = wait seconds summed over ranks. Also printed: the processor seconds a rank used (mean
over ranks; with B = 2P and 16 cells per rank every rank has the same work at P = 2 and 3, so the
two show what sharing the cores costs). Run from the repository root after
benchmarks/odin_calibrate.py: ``python benchmarks/odin_sim.py [workdir]``.
"""
import argparse
import os
import subprocess
import sys

import h5py
import numpy as np

from odin_sched.sim.costmodel import load_profile
from odin_sched.odin.options import OdinOptions
from odin_sched.sim.scene import scene_of_setup
from odin_sched.sim.simulate import simulate
from odin_sched.training.train import TrainConfig, prepare

PY = sys.executable
MPIEXEC = os.path.join(os.path.dirname(PY), "mpiexec")
STEPS, CELLS_PER_RANK, WINDOW = 40, OdinOptions.CELLS_PER_RANK, OdinOptions.window
SCENE_SEED = 1  # not the calibration scenes' seed (0): the prediction is of a scene the fit has not seen
REPEATS = 3  # real runs of each (P, mode); their medians are compared (a run's speed varies by 10-20 % here)


def measured(scene, size, mode, work):
    out = os.path.join(work, f"real_{mode}_{size}.h5")
    env = dict(os.environ, OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1")
    subprocess.run([MPIEXEC, "-n", str(size), PY, "-m", "pregel.cli", "train", "--scene", scene, "--steps", str(STEPS),
                    "--batch-size", str(2 * size), "--mode", mode, "--cells", str(CELLS_PER_RANK * size),
                    "--window", str(WINDOW), "--eval-every", str(STEPS), "--out", out, "--no-densify"],
                   check=True, env=env, capture_output=True)
    with h5py.File(out) as f:
        table = f["metrics/per_rank"][()]
        fields = list(f.attrs["per_rank_fields"])
    col = {name: table[:, fields.index(name)] for name in fields}
    busy = col["compute_seconds"] + col["comm_seconds"] + col["wait_seconds"] + col["plan_seconds"]
    return (STEPS / busy.max(), col["wait_seconds"].sum(), col["compute_seconds"].sum() + col["plan_seconds"].sum(),
            col["processor_seconds"].mean())


def main(work):
    os.makedirs(work, exist_ok=True)
    scene = os.path.join(work, "city_validate.h5")
    if not os.path.exists(scene):
        subprocess.run([PY, "-m", "pregel.cli", "generate-scene", "--gaussians", "3000", "--cameras", "40", "--width",
                        "64", "--height", "48", "--layout", "city", "--seed", str(SCENE_SEED), "--out", scene],
                       check=True, capture_output=True)
    profile = load_profile("cpu-here")
    print(f"load average before: {os.getloadavg()}")
    print("P  mode     measured steps/s  predicted  error   measured wait s  predicted  error   "
          "measured compute+plan s  predicted   processor s per rank (measured)")
    for size in (2, 3):
        setup = prepare(TrainConfig(scene, STEPS, batch_size=2 * size, eval_every=STEPS))
        sim_scene = scene_of_setup(setup)
        for mode in ("odin", "barrier"):
            runs = np.array([measured(scene, size, mode, work) for _ in range(REPEATS)])
            real_speed, real_wait, real_compute, real_processor = np.median(runs, axis=0)
            sim = simulate(sim_scene, profile, mode, size, STEPS, 2 * size, window=WINDOW, cells_per_gpu=CELLS_PER_RANK)
            print(f"{size}  {mode:<8} {real_speed:>16.2f} {sim.steps_per_second:>10.2f} "
                  f"{sim.steps_per_second / real_speed - 1:>+6.0%} {real_wait:>17.2f} {sim.wait.sum():>10.2f} "
                  f"{(sim.wait.sum() - real_wait) / max(real_wait, 1e-9):>+6.0%} {real_compute:>25.2f} "
                  f"{sim.compute.sum():>10.2f} {real_processor:>33.2f}", flush=True)
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("workdir", nargs="?", default="odin_validation", help="where its files go (default: %(default)s)")
    main(parser.parse_args().workdir)
