"""Training speed with the dashboard on against off, for the single-process and the Odin trainer.

Off: ``TrainConfig.status=False``, no status file. On: the status file written as ``pregel train`` writes
it, the dashboard server (``pregel train --dashboard``) serving it from a thread of the training process,
and a client fetching ``/status.json`` and ``/heldout.png`` every 0.5 s as the page does. The two
settings alternate (``--repeats`` each, after one warm-up run) on a generated scene; the medians of the
training wall times (the trainers' own ``wall_time_s``) are compared, and so are the medians of the
processor time the whole process used (training, status writes, the server's and the polling client's
threads: an upper bound on the dashboard's cost that a loaded machine disturbs less than wall time).
Also the share of the training wall time spent inside the trainers' status hooks (``TrainStatus.update``,
Odin's ``_report``: the gathers, the held-out PNG, the JSON), the direct cost on the training thread.

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
from odin_sched.odin.trainer import DistributedTrainer, OdinOptions, train_distributed  # noqa: E402
from odin_sched.scenes.scene_gen import generate_scene  # noqa: E402
from odin_sched.scenes.scene_io import write_scene  # noqa: E402
from odin_sched.training.config import TrainConfig  # noqa: E402
from odin_sched.training.train import train  # noqa: E402
from odin_sched.view.server import dashboard_routes, make_server, serve_in_background, url  # noqa: E402
from odin_sched.training.status import TrainStatus  # noqa: E402
from pregel.comm import Comm  # noqa: E402

POLL_S = 0.5
HOOKS = {"seconds": 0.0, "depth": 0}


def timed(method):
    """``method`` adding its wall time to HOOKS (outermost calls only)."""
    def wrapper(*args, **kwargs):
        HOOKS["depth"] += 1
        t0 = time.perf_counter()
        try:
            return method(*args, **kwargs)
        finally:
            HOOKS["depth"] -= 1
            if HOOKS["depth"] == 0:
                HOOKS["seconds"] += time.perf_counter() - t0
    return wrapper


TrainStatus.update = timed(TrainStatus.update)
DistributedTrainer._report = timed(DistributedTrainer._report)


def poll(address: str, stop: threading.Event) -> None:
    """Fetch the status and the held-out PNG every POLL_S seconds, as the dashboard page does."""
    while not stop.wait(POLL_S):
        for path in ("status.json", "heldout.png"):
            try:
                urllib.request.urlopen(address + path).read()
            except OSError:  # no PNG before the first evaluation
                pass


def run(trainer: str, scene, out, steps: int, dashboard: bool) -> tuple[float, float, float]:
    """One training run's (wall time, processor time of the process, time in the status hooks) in seconds, with
    or without the dashboard."""
    server = stop = None
    cpu = time.process_time()
    HOOKS["seconds"] = 0.0
    if dashboard:
        server = make_server(dashboard_routes(os.path.dirname(out)), port=0)
        serve_in_background(server)
        stop = threading.Event()
        threading.Thread(target=poll, args=(url(server), stop), daemon=True).start()
    try:
        config = TrainConfig(scene, steps, out, eval_every=100, progress=False, status=dashboard)
        if trainer == "single":
            result = train(config)
        else:
            result = train_distributed(Comm(), config, OdinOptions(mode="odin"))
    finally:
        if dashboard:
            stop.set()
            server.shutdown()
            server.server_close()
    return result.wall_time_s, time.process_time() - cpu, HOOKS["seconds"]


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
    print(f"{'trainer':>8} {'wall off s':>10} {'wall on s':>9} {'overhead':>9} {'cpu off s':>9} {'cpu on s':>8} "
          f"{'overhead':>9} {'in hooks':>8}   wall of each run, off / on")
    for trainer in ("single", "odin"):
        out = os.path.join(work, f"{trainer}.h5")
        run(trainer, scene, out, 20, False)  # warm-up: compilation, caches
        times = {False: [], True: []}
        for _ in range(args.repeats):
            for dashboard in (False, True):
                times[dashboard].append(run(trainer, scene, out, args.steps, dashboard))
        (off, cpu_off, _), (on, cpu_on, _) = (np.median(times[d], axis=0) for d in (False, True))
        hooks = np.median([h / w for w, _, h in times[True]])
        print(f"{trainer:>8} {off:>10.2f} {on:>9.2f} {100 * (on / off - 1):>+8.1f}% {cpu_off:>9.2f} {cpu_on:>8.2f} "
              f"{100 * (cpu_on / cpu_off - 1):>+8.1f}% {100 * hooks:>7.2f}%   "
              f"{', '.join(f'{t[0]:.2f}' for t in times[False])} / {', '.join(f'{t[0]:.2f}' for t in times[True])}",
              flush=True)


if __name__ == "__main__":
    main()
