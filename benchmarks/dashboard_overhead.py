"""Training speed with the dashboard on against off, for the single-process and the Odin trainer.

Off: no status file (``TrainConfig.status=False``), no server. On: what ``pregel train --dashboard``
adds: the status file written as the trainers write it, the dashboard server serving it from a thread
of the training process, and a client in a process of its own (as the browser is) polling it as the
page does: ``/status.json`` every 0.5 s, ``/heldout.png`` when a new one was written. The client is
started before the run and is idle until the server answers, so its start-up is not counted.

Every run is a command of its own (``python THIS --child ...``; Odin under ``mpiexec -n 1``), which
sets up, trains and writes its outputs as ``pregel train`` does. Measured per run:

    train_s     the training loop's wall time (the trainers' ``wall_time_s``): training speed, what
                the 2 % target is about
    command_s   the whole command's wall time, from start to exit (imports, set-up, writing the
                outputs; for Odin also mpiexec's start-up)
    cpu_s       the training process's processor time, all threads (training, Odin's planning thread,
                the status writer and the server)
    hooks_s     wall time inside the trainers' status hooks (``TrainStatus.update``, Odin's
                ``_report_due`` and ``_report``) on the training thread
    writer_s    the status writer thread's processor time (``time.thread_time`` in that thread):
                binning the loss curve, JSON, PNG encoding, writing (no fsync)
    server_s    the server's processor time answering requests (``time.thread_time`` of each request's
                thread; its accept loop, which wakes twice a second, is not in it)
    client_cpu_s  the polling client's (or the browser's) processor time, in processes of their own
    nivcsw      involuntary context switches of the training process (it wanted a core and had to wait)
    load        /proc/loadavg before the pair

Design for a shared machine: ``--pairs`` pairs, one off and one on run back to back, the order
alternating from pair to pair; each pair holds the lock file ``--lock`` (flock) for just its two runs,
so other users' heavy runs can go between pairs but not inside one. Each pair appends its two runs to
``--results`` (JSON lines), so a run cut short keeps its pairs and ``--report`` summarises the file.
Reported per trainer: the median of the paired relative differences on/off - 1 with a distribution-free
confidence interval for it (order statistics of the binomial sign test; 95.9 % at 20 pairs).

    python benchmarks/dashboard_overhead.py --trainer single --steps 1000 --pairs 20 [--lock /tmp/heavy.lock]
    python benchmarks/dashboard_overhead.py --report [--results FILE]
"""
import argparse
import contextlib
import fcntl
import json
import os
import resource
import socket
import socketserver
import subprocess
import sys
import tempfile
import time

import numpy as np
from scipy.stats import binom, spearmanr

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
POLL_S = 0.5
RUN_TIMEOUT_S = 900

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


# --- one run (the child command)
def child(trainer: str, on: bool, scene: str, out: str, steps: int, port: int) -> dict:
    """Train once as ``pregel train`` does, with the dashboard on or off; returns the run's measures."""
    import torch

    sys.path.insert(0, ROOT)
    from odin_sched.odin.trainer import DistributedTrainer, OdinOptions, train_distributed
    from odin_sched.training.config import TrainConfig
    from odin_sched.training.status import TrainStatus
    from odin_sched.training.train import train
    from odin_sched.view.server import dashboard_routes, make_server, serve_in_background
    from pregel.comm import Comm

    torch.set_num_threads(1)
    hooks = {"seconds": 0.0, "depth": 0, "writer": 0.0, "server": 0.0}

    def timed(method):
        def wrapper(*args, **kwargs):
            hooks["depth"] += 1
            t0 = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                hooks["depth"] -= 1
                if hooks["depth"] == 0:
                    hooks["seconds"] += time.perf_counter() - t0
        return wrapper

    def closing(close):
        def wrapper(self):
            close(self)  # joins the writer thread: its time is final
            hooks["writer"], self.writer_seconds = hooks["writer"] + self.writer_seconds, 0.0
        return wrapper

    TrainStatus.update = timed(TrainStatus.update)
    DistributedTrainer._report = timed(DistributedTrainer._report)
    DistributedTrainer._report_due = timed(DistributedTrainer._report_due)
    TrainStatus.close = closing(TrainStatus.close)

    def answering(process_request_thread):  # the server's thread for one request: its processor time
        def wrapper(*args):
            try:
                process_request_thread(*args)
            finally:
                hooks["server"] += time.thread_time()
        return wrapper

    socketserver.ThreadingMixIn.process_request_thread = answering(socketserver.ThreadingMixIn.process_request_thread)
    if on:  # as pregel train --dashboard (pregel.cli._start_dashboard)
        serve_in_background(make_server(dashboard_routes(os.path.dirname(out)), port=port))
    config = TrainConfig(scene, steps, out, eval_every=100, progress=False, status=on)
    cpu = time.process_time()
    if trainer == "single":
        result = train(config)
    else:
        result = train_distributed(Comm(), config, OdinOptions(mode="odin"))
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {"train_s": result.wall_time_s, "train_cpu_s": time.process_time() - cpu,
            "cpu_s": usage.ru_utime + usage.ru_stime, "hooks_s": hooks["seconds"], "writer_s": hooks["writer"],
            "server_s": hooks["server"], "nivcsw": usage.ru_nivcsw}


# --- the pairs (the parent)
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def loadavg() -> list:
    with open("/proc/loadavg") as f:
        return [float(x) for x in f.read().split()[:3]]


def tree_cpu(root: int) -> float:
    """Processor seconds (user + system) of process ``root`` and its live descendants (Linux /proc)."""
    tick, parent, cpu = os.sysconf("SC_CLK_TCK"), {}, {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()  # after "pid (comm)": state, ppid, ...
            except OSError:  # it has just ended
                continue
            parent[int(name)], cpu[int(name)] = int(fields[1]), (int(fields[11]) + int(fields[12])) / tick
    tree, grown = {root}, True
    while grown:
        more = {pid for pid, ppid in parent.items() if ppid in tree} - tree
        tree, grown = tree | more, bool(more)
    return sum(cpu.get(pid, 0.0) for pid in tree)


class Browser:
    """Headless Chromium (Debian's chromium and chromium-driver, Selenium) as the page's client: it shows the
    dashboard during "on" runs and about:blank otherwise (open through the whole benchmark)."""

    FLAGS = ("--headless=new", "--use-angle=swiftshader", "--enable-unsafe-swiftshader", "--no-sandbox",
             "--window-size=1200,800")

    def __init__(self):
        from selenium import webdriver
        from selenium.webdriver.chrome.options import Options
        from selenium.webdriver.chrome.service import Service

        options = Options()
        for flag in self.FLAGS:
            options.add_argument(flag)
        self.driver = webdriver.Chrome(options=options, service=Service("/usr/bin/chromedriver"))

    def cpu(self) -> float:
        """Processor seconds of chromedriver and its browser processes so far."""
        return tree_cpu(self.driver.service.process.pid)


def wait_for_server(port: int, proc: subprocess.Popen) -> None:
    """Return once something listens on ``port`` (or ``proc`` has ended)."""
    while proc.poll() is None:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)


def one_run(trainer: str, on: bool, scene: str, out: str, steps: int, browser: Browser | None = None) -> dict:
    """Run the child command once; returns its measures, the command's wall time and the client's
    processor time (the polling process, or the browser)."""
    port = free_port()
    page = f"http://127.0.0.1:{port}/"
    poller = subprocess.Popen([sys.executable, "-c", POLLER, page]) if on and browser is None else None
    if poller is not None:
        time.sleep(1.0)  # its interpreter's start-up is over before the run starts
    command = [sys.executable, os.path.abspath(__file__), "--child", trainer, "on" if on else "off", scene, out,
               str(steps), str(port)]
    if trainer == "odin":
        command = ["mpiexec", "-n", "1"] + command
    client0 = browser.cpu() if browser is not None else 0.0
    try:
        t0 = time.perf_counter()
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
        if on and browser is not None:
            wait_for_server(port, proc)
            browser.driver.get(page)
        stdout, stderr = proc.communicate(timeout=RUN_TIMEOUT_S)
        wall = time.perf_counter() - t0
        client = tree_cpu(poller.pid) if poller is not None else browser.cpu() - client0 if browser else 0.0
    finally:
        if poller is not None:
            poller.kill()
            poller.wait()
        if browser is not None:
            browser.driver.get("about:blank")
    if proc.returncode != 0:
        sys.exit(f"dashboard_overhead: {' '.join(command)} failed:\n{stderr[-3000:]}")
    return {**json.loads(stdout.strip().splitlines()[-1]), "command_s": wall, "client_cpu_s": client}


@contextlib.contextmanager
def locked(path: str | None):
    """Hold the flock on ``path`` (none: no lock)."""
    if path is None:
        yield
        return
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def run_pairs(args) -> None:
    from odin_sched.scenes.scene_gen import generate_scene
    from odin_sched.scenes.scene_io import write_scene

    work = args.dir or tempfile.mkdtemp(prefix="dashboard_overhead_")
    scene = os.path.join(work, f"scene_{args.gaussians}.h5")
    if not os.path.exists(scene):
        write_scene(scene, generate_scene(args.gaussians, 24, 64, 64, seed=1))
    out = os.path.join(work, f"{args.trainer}.h5")
    browser = Browser() if args.client == "chromium" else None
    try:
        with locked(args.lock):
            one_run(args.trainer, True, scene, out, 20, browser)  # warm-up: page cache, the client
        for pair in range(args.pairs):
            order = (False, True) if pair % 2 == 0 else (True, False)
            with locked(args.lock):
                load = loadavg()
                runs = {on: one_run(args.trainer, on, scene, out, args.steps, browser) for on in order}
                load_after = loadavg()
            row = {"trainer": args.trainer, "steps": args.steps, "gaussians": args.gaussians, "client": args.client,
                   "pair": pair, "on_first": order[0], "load": load, "load_after": load_after, "off": runs[False],
                   "on": runs[True], "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
            with open(args.results, "a") as f:
                f.write(json.dumps(row) + "\n")
            print(f"{args.trainer} pair {pair + 1}/{args.pairs}: load {load[0]:.2f}, training s off "
                  f"{runs[False]['train_s']:.2f} on {runs[True]['train_s']:.2f}", flush=True)
    finally:
        if browser is not None:
            browser.driver.quit()


# --- the report
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


def report(path: str) -> None:
    """Print the paired statistics of every (trainer, steps, Gaussians) group of the results file."""
    with open(path) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    groups = {}
    for row in rows:
        key = (row["trainer"], row["steps"], row["gaussians"], row.get("client", "poller"))
        groups.setdefault(key, []).append(row)
    for (trainer, steps, gaussians, client), group in groups.items():
        n = len(group)
        load = np.array([r["load"][0] for r in group])
        print(f"{trainer}, client {client}: {n} pairs of {steps} steps, {gaussians} Gaussians; 1-min load average "
              f"at the pairs' start: median {np.median(load):.2f}, range {load.min():.2f}-{load.max():.2f}")
        for key, what in (("train_s", "training loop wall"), ("command_s", "whole command wall"),
                          ("cpu_s", "process CPU"), ("train_cpu_s", "training CPU")):
            off = np.array([r["off"][key] for r in group])
            on = np.array([r["on"][key] for r in group])
            m, lo, hi, cover = median_ci(on / off - 1)
            print(f"  {what:19s} off median {np.median(off):7.2f} s (range {off.min():.2f}-{off.max():.2f}), "
                  f"on {np.median(on):7.2f} s; on/off - 1: median {100 * m:+.2f} %, {100 * cover:.1f} % CI "
                  f"[{100 * lo:+.2f}, {100 * hi:+.2f}] %")
        on_train = np.array([r["on"]["train_s"] for r in group])
        for key, what in (("hooks_s", "status hooks on the training thread"),
                          ("writer_s", "status writer thread's processor time"),
                          ("server_s", "server threads' processor time"),
                          ("client_cpu_s", f"the client's ({client}) processor time")):
            share = np.array([r["on"].get(key, np.nan) for r in group]) / on_train
            print(f"  {what}: median {1000 * np.median([r['on'].get(key, np.nan) for r in group]):.1f} ms a run, "
                  f"{100 * np.median(share):.2f} % of the training wall time (max {100 * share.max():.2f} %)")
        spread(group, load)


def spread(group: list, load: np.ndarray) -> None:
    """Where the runs' own spread comes from: the off runs' coefficient of variation, wall against
    processor time, the rank correlation with the load, the time outside the training loop."""
    off = {key: np.array([r["off"][key] for r in group]) for key in ("train_s", "train_cpu_s", "command_s", "nivcsw")}
    cv = {key: 100 * np.std(v) / np.mean(v) for key, v in off.items()}
    rho = spearmanr(load, off["train_s"])[0] if len(group) > 2 else np.nan
    outside = off["command_s"] - off["train_s"]
    print(f"  off runs: training wall CV {cv['train_s']:.1f} %, training CPU CV {cv['train_cpu_s']:.1f} %, "
          f"wall / CPU median {np.median(off['train_s'] / off['train_cpu_s']):.3f}; Spearman(load, training wall) "
          f"{rho:+.2f}; outside the loop {np.median(outside):.2f} s (range {outside.min():.2f}-{outside.max():.2f}); "
          f"involuntary context switches median {np.median(off['nivcsw']):.0f} off, "
          f"{np.median([r['on']['nivcsw'] for r in group]):.0f} on")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        trainer, on, scene, out, steps, port = sys.argv[2:8]
        print(json.dumps(child(trainer, on == "on", scene, out, int(steps), int(port))), flush=True)
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trainer", choices=("single", "odin"), default="single")
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--pairs", type=int, default=20)
    parser.add_argument("--gaussians", type=int, default=2000)
    parser.add_argument("--client", choices=("poller", "chromium"), default="poller",
                        help="the page's client in on runs: a process polling as the page does, or the page in "
                             "headless Chromium on this machine")
    parser.add_argument("--lock", default=None, help="a lock file each pair holds (flock), e.g. /tmp/heavy.lock")
    parser.add_argument("--dir", default=None, help="the scene and outputs' folder (default: a new temporary one)")
    parser.add_argument("--results", default="dashboard_overhead.jsonl", help="JSON lines, one a pair (appended)")
    parser.add_argument("--report", action="store_true", help="only summarise --results")
    args = parser.parse_args()
    if not args.report:
        sys.path.insert(0, ROOT)
        run_pairs(args)
    report(args.results)


if __name__ == "__main__":
    main()
