"""Training speed with the dashboard on against off, for the single-process and the Odin trainer.

Off: ``train(..., status=False)``, no status file. On: the status file written as ``pregel train`` writes
it, the dashboard server (``pregel train --dashboard``) serving it from a thread of the training process,
and a client fetching ``/status.json`` and ``/heldout.png`` every 0.5 s as the page does. The two
settings alternate (``--repeats`` each, after one warm-up run) on a generated scene; the medians of the
training wall times (the trainers' own ``wall_time_s``) are compared.

    .venv/bin/python benchmarks/dashboard_overhead.py [--steps 300] [--repeats 3] [--dir DIR]
"""
import argparse
import os
import sys
import tempfile
import threading
import time
import urllib.request

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from odin_sched.odin.trainer import OdinOptions, train_distributed  # noqa: E402
from odin_sched.scenes.scene_gen import generate_scene  # noqa: E402
from odin_sched.scenes.scene_io import write_scene  # noqa: E402
from odin_sched.training.train import train  # noqa: E402
from odin_sched.view.server import dashboard_routes, make_server, serve_in_background, url  # noqa: E402
from pregel.comm import Comm  # noqa: E402

POLL_S = 0.5


def poll(address: str, stop: threading.Event) -> None:
    """Fetch the status and the held-out PNG every POLL_S seconds, as the dashboard page does."""
    while not stop.wait(POLL_S):
        for path in ("status.json", "heldout.png"):
            try:
                urllib.request.urlopen(address + path).read()
            except OSError:  # no PNG before the first evaluation
                pass


def run(trainer: str, scene, out, steps: int, dashboard: bool) -> float:
    """One training run's wall time (s), with or without the dashboard."""
    server = stop = None
    if dashboard:
        server = make_server(dashboard_routes(os.path.dirname(out)), port=0)
        serve_in_background(server)
        stop = threading.Event()
        threading.Thread(target=poll, args=(url(server), stop), daemon=True).start()
    try:
        common = dict(eval_every=100, progress=False, status=dashboard)
        if trainer == "single":
            result = train(scene, steps, out, **common)
        else:
            result = train_distributed(Comm(), scene, steps, out, OdinOptions(mode="odin"), **common)
    finally:
        if dashboard:
            stop.set()
            server.shutdown()
            server.server_close()
    return result.wall_time_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--gaussians", type=int, default=2000)
    parser.add_argument("--dir", default=None)
    args = parser.parse_args()
    work = args.dir or tempfile.mkdtemp(prefix="dashboard_overhead_")
    scene = os.path.join(work, "scene.h5")
    if not os.path.exists(scene):
        write_scene(scene, generate_scene(args.gaussians, 24, 64, 64, seed=1))
    print(f"{'trainer':>8} {'off s (median)':>15} {'on s (median)':>14} {'overhead':>9}   runs off / on")
    for trainer in ("single", "odin"):
        out = os.path.join(work, f"{trainer}.h5")
        run(trainer, scene, out, 20, False)  # warm-up: compilation, caches
        times = {False: [], True: []}
        for _ in range(args.repeats):
            for dashboard in (False, True):
                times[dashboard].append(run(trainer, scene, out, args.steps, dashboard))
        off, on = np.median(times[False]), np.median(times[True])
        print(f"{trainer:>8} {off:>15.2f} {on:>14.2f} {100 * (on / off - 1):>+8.1f}%   "
              f"{', '.join(f'{t:.2f}' for t in times[False])} / {', '.join(f'{t:.2f}' for t in times[True])}",
              flush=True)


if __name__ == "__main__":
    main()
