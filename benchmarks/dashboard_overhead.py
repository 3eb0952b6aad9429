"""Training speed with the dashboard on against off, for the single-process and the Odin trainer.

Off: ``TrainConfig.status=False``, no status file. On: the status file written as ``pregel train`` writes
it, the dashboard server (``pregel train --dashboard``) serving it from a thread of the training process,
and a client in a process of its own (as the browser is) polling it as the page does: ``/status.json``
every 0.5 s, ``/heldout.png`` when a new one was written.

The design is meant to survive a shared, loaded machine: after one warm-up run, ``--pairs`` pairs of
runs, one off and one on, back to back in an order drawn at random for each pair, so slow drifts of
the machine's load hit both halves of a pair alike. For each pair the relative difference on/off - 1
of the training wall time (the trainers' own ``wall_time_s``) and of the processor time of the whole
process (training, the status writer's and the server's threads: the dashboard's whole cost in the
training process, which other jobs' load disturbs less than wall time; the polling client's own
processor time is not in it, though it competes for the cores); reported: the median of
the paired differences with a distribution-free 95 % confidence interval for it (order statistics of
the binomial sign test), and the load average before and after. Also the share of the training wall
time spent inside the trainers' status hooks (``TrainStatus.update``, Odin's ``_report``: the
gathers and handing the numbers to the writer thread), the direct cost on the training thread.

    .venv/bin/python benchmarks/dashboard_overhead.py [--steps 300] [--pairs 15] [--dir DIR]
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
from scipy.stats import binom

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


# the page's polling (dashboard.js), in a process of its own as the browser is: the status every POLL_S
# seconds, and the held-out PNG when the status says that a new one was written (a new evaluation)
POLLER = f"""
import json, sys, time, urllib.request
shown = None
while True:
    time.sleep({POLL_S})
    try:
        status = json.loads(urllib.request.urlopen(sys.argv[1] + "status.json").read())
        key = (len(status.get("psnr", {{}}).get("steps", [])), status.get("done"))
        if status.get("has_view") and key != shown:
            urllib.request.urlopen(sys.argv[1] + "heldout.png").read()
            shown = key
    except (OSError, ValueError):
        pass
"""


def run(trainer: str, scene, out, steps: int, dashboard: bool) -> tuple[float, float, float]:
    """One training run's (wall time, processor time of the process, time in the status hooks) in seconds, with
    or without the dashboard."""
    server = poller = None
    if dashboard:
        server = make_server(dashboard_routes(os.path.dirname(out)), port=0)
        serve_in_background(server)
        poller = subprocess.Popen([sys.executable, "-c", POLLER, url(server)])
    cpu = time.process_time()
    HOOKS["seconds"] = 0.0
    try:
        config = TrainConfig(scene, steps, out, eval_every=100, progress=False, status=dashboard)
        if trainer == "single":
            result = train(config)
        else:
            result = train_distributed(Comm(), config, OdinOptions(mode="odin"))
    finally:
        if dashboard:
            poller.kill()
            poller.wait()
            server.shutdown()
            server.server_close()
    return result.wall_time_s, time.process_time() - cpu, HOOKS["seconds"]


def median_ci(values, confidence: float = 0.95) -> tuple[float, float, float, float]:
    """(median, low, high, coverage): the median of ``values`` and a distribution-free confidence interval
    for the population median, the order statistics k and n + 1 - k with k the largest such that
    P(Binomial(n, 1/2) < k) <= (1 - confidence) / 2 (the whole range when n is too small), and the
    interval's exact coverage 1 - 2 P(Binomial(n, 1/2) < k)."""
    v = np.sort(np.asarray(values, np.float64))
    n = len(v)
    k = max(int(binom.ppf((1 - confidence) / 2, n, 0.5)), 1)
    while k > 1 and binom.cdf(k - 1, n, 0.5) > (1 - confidence) / 2:
        k -= 1
    return float(np.median(v)), float(v[k - 1]), float(v[n - k]), float(1 - 2 * binom.cdf(k - 1, n, 0.5))


def loadavg() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--pairs", type=int, default=15)
    parser.add_argument("--gaussians", type=int, default=2000)
    parser.add_argument("--trainers", default="single,odin")
    parser.add_argument("--dir", default=None)
    args = parser.parse_args()
    work = args.dir or tempfile.mkdtemp(prefix="dashboard_overhead_")
    scene = os.path.join(work, "scene.h5")
    if not os.path.exists(scene):
        write_scene(scene, generate_scene(args.gaussians, 24, 64, 64, seed=1))
    rng = np.random.default_rng(0)
    for trainer in args.trainers.split(","):
        out = os.path.join(work, f"{trainer}.h5")
        before = loadavg()
        run(trainer, scene, out, 20, False)  # warm-up: compilation, caches
        pairs = []
        for _ in range(args.pairs):
            order = (False, True) if rng.random() < 0.5 else (True, False)
            pair = {dashboard: run(trainer, scene, out, args.steps, dashboard) for dashboard in order}
            pairs.append((pair[False], pair[True]))
        off, on = (np.array([p[d] for p in pairs]) for d in (0, 1))  # [pairs, (wall, cpu, hooks)]
        wall = median_ci(on[:, 0] / off[:, 0] - 1)
        cpu = median_ci(on[:, 1] / off[:, 1] - 1)
        hooks = np.median(on[:, 2] / on[:, 0])
        print(f"{trainer}: {args.pairs} pairs of {args.steps} steps, load average {before} before, {loadavg()} after")
        print(f"  wall s  off median {np.median(off[:, 0]):.2f} (range {off[:, 0].min():.2f}-{off[:, 0].max():.2f}), "
              f"on median {np.median(on[:, 0]):.2f}; paired on/off - 1: median {100 * wall[0]:+.2f} %, "
              f"{100 * wall[3]:.1f} % CI [{100 * wall[1]:+.2f}, {100 * wall[2]:+.2f}] %")
        print(f"  cpu s   off median {np.median(off[:, 1]):.2f} (range {off[:, 1].min():.2f}-{off[:, 1].max():.2f}), "
              f"on median {np.median(on[:, 1]):.2f}; paired on/off - 1: median {100 * cpu[0]:+.2f} %, "
              f"{100 * cpu[3]:.1f} % CI [{100 * cpu[1]:+.2f}, {100 * cpu[2]:+.2f}] %")
        print(f"  status hooks on the training thread: {100 * hooks:.2f} % of the training wall time (median)",
              flush=True)


if __name__ == "__main__":
    main()
