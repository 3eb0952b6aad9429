"""Training speed with the dashboard on against off, for the single-process and the Odin trainer.

Off: no status file, nobody polling. On: what ``pregel train --dashboard`` adds: the status file written
as the trainers write it, the dashboard server serving it from a thread of the training process, and a
client in a process of its own (as the browser is) polling it as the page does: ``/status.json`` every
0.5 s, ``/heldout.png`` when a new one was written. Two designs:

``--design within`` (the default): on and off alternate inside ONE training run, so what varies from
run to run on a shared machine (memory placement, the host's state: the same run's processor time varies
~6 % between runs here) is the same for both. After a warm-up (on) of ``--warmup`` steps, the run is
``--pairs`` pairs of blocks of ``--block`` steps (default 21: one pass over the scene's training
cameras; adjacent short blocks share the machine's slow drifts); one block of each pair is on and the
other off, which one first drawn from ``--seed`` (as many pairs each way). Each block's training-loop
wall time is taken at the trainers' status hooks (one process: after every step's ``TrainStatus.update``;
Odin: at every window's start, ``_report_due``, and the run's end), less the held-out evaluations in it
(timed around ``evaluate``: the same work on and off; every ``--eval-every`` steps, by default at a
block's 7th step, so that the PNG it hands over is written in the same block); per pair, the log ratio
of the on and off blocks' seconds per step. Off blocks are what a run without the dashboard does: no
status handed over (Odin: ``trainer.status`` is None, so no tracing, gathering or broadcast), the
client not polling (it reads a one-byte flag file each 0.5 s). The server is up in both (its idle
cost: ``--switch server``, the same blocks with no status file and nobody polling, the server's accept
loop stopped in off blocks). While off, the status file's 2 s clock stands still, so that on blocks get
the writes of a run always on. Pairs whose steps change the active SH degree (every 1,000 images: a
step's cost changes there) are dropped. The hooks are the benchmark's own (``BlockSwitch``,
``switched_status``, ``switch_odin``, ``timed_evaluations``; tests/test_dashboard_overhead.py), not the
product's.

``--design pairs``: ``--pairs`` pairs of whole runs, one off (``TrainConfig.status=False``, no server)
and one on, back to back, the order alternating; each pair holds ``--lock`` (flock) for its two runs.

Every run is a command of its own (``python THIS --child ...``; Odin under ``mpiexec -n RANKS``), which
sets up, trains and writes its outputs as ``pregel train`` does. Measured per run:

    train_s     the training loop's wall time (the trainers' ``wall_time_s``)
    command_s   pairs: the whole command's wall time, from start to exit (imports, set-up, writing the
                outputs; for Odin also mpiexec's start-up)
    cpu_s       the training process's processor time, all threads (training, Odin's planning thread,
                the status writer and the server)
    hooks_s     wall time inside the trainers' status hooks (``TrainStatus.update``, Odin's
                ``_report_due`` and ``_report``) on the training thread (within: by block state)
    writer_s    the status writer thread's processor time (``time.thread_time`` in that thread):
                binning the loss curve, JSON, PNG encoding, writing (no fsync)
    server_s    the server's processor time answering requests (``time.thread_time`` of each request's
                thread; its accept loop, which wakes twice a second, is not in it)
    within: blocks (each block's steps, seconds, evaluation seconds and state), stretches (every
                step's or window's time), writes_s / requests_s (the writer's and the request threads'
                busy wall time inside on and inside off blocks: what spills from an on block into an
                off one), server_thread_s (the accept loop's processor time, schedstat)
    client_cpu_s  the polling client's (or the browser's) processor time, in processes of their own
    nivcsw      involuntary context switches of the training process (it wanted a core and had to wait)
    load        /proc/loadavg before (and after) the pair or the run

Reported: the median of the paired differences on/off - 1 with a distribution-free confidence interval
for it (order statistics of the binomial sign test), and (within, from log ratios) their mean with a
95 % t interval and the Hodges-Lehmann estimate with the Wilcoxon signed-rank interval. Results are
appended to ``--results`` (JSON lines); ``--report`` summarises the file.

    flock /tmp/heavy.lock python benchmarks/dashboard_overhead.py --trainer single --pairs 300 --seed 21
    flock /tmp/heavy.lock python benchmarks/dashboard_overhead.py --trainer odin --ranks 2 --pairs 100
    python benchmarks/dashboard_overhead.py --design pairs --trainer single --steps 1000 --pairs 20 \
        --lock /tmp/heavy.lock
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
import threading
import time

import numpy as np
from scipy.stats import binom, spearmanr
from scipy.stats import norm
from scipy.stats import t as t_dist

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
POLL_S = 0.5
EVAL_EVERY = 100  # pairs: held-out PSNR (and so a held-out PNG with the dashboard on) every 100 steps
RUN_TIMEOUT_S = 900

# the page's polling (dashboard.js), in a process of its own as the browser is: the status every POLL_S
# seconds, and the held-out PNG when the status says that a new one was written (a new evaluation). With a
# second argument (the within-run design), only while the first byte of that file is 1 (the "on" blocks)
POLLER = f"""
import json, mmap, sys, time, urllib.request
shown = None
flag = b"\\1"
if len(sys.argv) > 2:
    with open(sys.argv[2], "rb") as f:
        flag = mmap.mmap(f.fileno(), 1, access=mmap.ACCESS_READ)
while True:
    time.sleep({POLL_S})
    if not flag[0]:
        continue
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
def instrument(hooks: dict, state=lambda: "on") -> None:
    """Time the dashboard's parts in this process into ``hooks``: wall time inside the trainers' status
    hooks (by ``state()`` at the call), the writer thread's processor time and busy spans, the server's
    request threads' processor time and spans."""
    from odin_sched.odin.trainer import DistributedTrainer
    from odin_sched.training.status import TrainStatus

    def timed(method):
        def wrapper(*args, **kwargs):
            hooks["depth"] += 1
            t0, key = time.perf_counter(), state()
            try:
                return method(*args, **kwargs)
            finally:
                hooks["depth"] -= 1
                if hooks["depth"] == 0:
                    hooks["hooks"][key] = hooks["hooks"].get(key, 0.0) + time.perf_counter() - t0
        return wrapper

    def spanned(method, key):
        def wrapper(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                hooks[key].append((t0, time.perf_counter()))
        return wrapper

    def closing(close):
        def wrapper(self):
            close(self)  # joins the writer thread: its time is final
            hooks["writer"], self.writer_seconds = hooks["writer"] + self.writer_seconds, 0.0
        return wrapper

    def answering(process_request_thread):  # the server's thread for one request: its processor time
        def wrapper(*args):
            try:
                process_request_thread(*args)
            finally:
                hooks["server"] += time.thread_time()
        return wrapper

    hooks.update({"hooks": {}, "depth": 0, "writer": 0.0, "server": 0.0, "writes": [], "requests": []})
    TrainStatus.update = timed(TrainStatus.update)
    DistributedTrainer._report = timed(DistributedTrainer._report)
    DistributedTrainer._report_due = timed(DistributedTrainer._report_due)
    TrainStatus.close = closing(TrainStatus.close)
    TrainStatus._write = spanned(TrainStatus._write, "writes")
    socketserver.ThreadingMixIn.process_request_thread = spanned(
        answering(socketserver.ThreadingMixIn.process_request_thread), "requests")


def child(trainer: str, on: bool, scene: str, out: str, steps: int, port: int) -> dict:
    """Train once as ``pregel train`` does, with the dashboard on or off; returns the run's measures."""
    import torch

    sys.path.insert(0, ROOT)
    from odin_sched.odin.options import OdinOptions
    from odin_sched.odin.trainer import train_distributed
    from odin_sched.training.config import TrainConfig
    from odin_sched.training.train import train
    from odin_sched.view.server import dashboard_routes, make_server, serve_in_background
    from pregel.comm import Comm

    torch.set_num_threads(1)
    hooks = {}
    instrument(hooks)
    if on:  # as pregel train --dashboard (pregel.cli.train_command._start_dashboard)
        serve_in_background(make_server(dashboard_routes(os.path.dirname(out)), port=port))
    config = TrainConfig(scene, steps, out, eval_every=EVAL_EVERY, progress=False, status=on)
    cpu = time.process_time()
    if trainer == "single":
        result = train(config)
    else:
        result = train_distributed(Comm(), config, OdinOptions(mode="odin"))
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {"train_s": result.wall_time_s, "train_cpu_s": time.process_time() - cpu,
            "cpu_s": usage.ru_utime + usage.ru_stime, "hooks_s": sum(hooks["hooks"].values()),
            "writer_s": hooks["writer"], "server_s": hooks["server"], "nivcsw": usage.ru_nivcsw}


# --- the within-run design: the dashboard switched on and off in blocks of steps inside one run
class BlockSwitch:
    """The schedule and the clock of a within-run A/B: after ``warmup`` steps (dashboard on), ``pairs``
    pairs of blocks of ``block`` steps, one block of each pair on and the other off, which first drawn
    from ``seed`` (as many pairs on first as off first, in random order). The trainer's hook calls
    ``mark(done, upcoming)`` when ``done`` steps are over and the next stretch of training ends at step
    ``upcoming`` (one step, or an Odin window); the stretch runs in the state of the block holding
    ``upcoming``. On a change of state ``mark`` sets ``flag`` (a writable one-byte buffer the polling
    client reads), sets or clears ``gate`` (a ``threading.Event`` the idle server waits on) and pauses
    the status file's clock (``status.last_write`` moves on by the time spent off), so that "on"
    blocks see the writes and polls of a run with the dashboard always on. ``evaluated(seconds)`` notes
    the time of a held-out evaluation in the running stretch (the same work on and off, taken out of
    the block's time by the report). ``clock``: seconds."""

    def __init__(self, block: int, warmup: int, pairs: int, seed: int, clock=time.perf_counter):
        self.block, self.warmup, self.pairs, self.clock = block, warmup, pairs, clock
        self.first_on = np.random.default_rng(seed).permutation(np.arange(pairs) % 2 == 0)  # [pairs] bool
        self.marks = []                   # (done, upcoming, time, on) per mark
        self.evaluation = {}              # block -> seconds of held-out evaluation in it
        self.on, self.off_since, self.upcoming = True, None, 0
        self.flag, self.gate, self.status = None, None, None

    @property
    def steps(self) -> int:
        """The run's length: warm-up and every pair."""
        return self.warmup + 2 * self.block * self.pairs

    def block_of(self, step: int) -> int:
        """The block holding step ``step`` (1-based); -1 in the warm-up."""
        return -1 if step <= self.warmup else (step - self.warmup - 1) // self.block

    def on_for(self, step: int) -> bool:
        """Whether the dashboard is on in step ``step`` (1-based)."""
        j = self.block_of(step)
        if j < 0 or j >= 2 * self.pairs:
            return True
        return bool(self.first_on[j // 2]) == (j % 2 == 0)

    def mark(self, done: int, upcoming: int | None) -> bool:
        """Note the time after ``done`` steps and switch to the state of step ``upcoming`` (None: the end);
        returns that state."""
        now = self.clock()
        on = self.on if upcoming is None else self.on_for(upcoming)
        self.marks.append((done, upcoming, now, on))
        self.upcoming = upcoming
        if on != self.on:
            if on and self.status is not None:
                self.status.last_write += now - self.off_since  # the status file's clock stood still while off
            self.off_since = None if on else now
            if self.flag is not None:
                self.flag[0] = int(on)
            if self.gate is not None:
                self.gate.set() if on else self.gate.clear()
            self.on = on
        return on

    def evaluated(self, seconds: float) -> None:
        """Note ``seconds`` of held-out evaluation in the running stretch."""
        if self.upcoming is not None:
            j = self.block_of(self.upcoming)
            self.evaluation[j] = self.evaluation.get(j, 0.0) + seconds

    def blocks(self) -> list:
        """Every block's {block, on, steps, seconds, evaluation_s, first, last} from the marks (the stretch
        between two marks belongs to the block of its last step); the warm-up and an unclosed stretch are
        left out."""
        out = {}
        for (done, upcoming, t0, on), (done1, _, t1, _) in zip(self.marks, self.marks[1:]):
            j = self.block_of(done1)
            if j < 0:
                continue
            b = out.setdefault(j, {"block": j, "on": on, "steps": 0, "seconds": 0.0, "first": done + 1, "last": done1})
            b["steps"], b["seconds"], b["last"] = b["steps"] + done1 - done, b["seconds"] + t1 - t0, done1
        return [{**out[j], "evaluation_s": self.evaluation.get(j, 0.0)} for j in sorted(out)]

    def stretches(self, on: bool) -> list:
        """(start, end) times of the marked stretches in state ``on`` after the warm-up."""
        return [(t0, t1) for (_, upcoming, t0, o), (done1, _, t1, _) in zip(self.marks, self.marks[1:])
                if o == on and self.block_of(done1) >= 0]


def switched_status(switch: BlockSwitch):
    """A TrainStatus for the one-process trainer that writes only while ``switch`` is on (with ``writes``)
    and marks ``switch`` at every step end (``train`` calls ``update`` once a step)."""
    from odin_sched.training.status import TrainStatus

    class SwitchedStatus(TrainStatus):
        writes = True

        def update(self, step, *args, **kwargs):
            switch.status = self
            if switch.on and self.writes:
                super().update(step, *args, **kwargs)
            switch.mark(step, step + 1)

    return SwitchedStatus


def switch_odin(switch: BlockSwitch, writes: bool = True) -> None:
    """Have Odin's trainer mark ``switch`` at every window's start (``_report_due``, called once a window
    on every rank) and at the run's end, and run each window with its dashboard status (status file,
    tracing, gathering) only while ``switch`` is on (with ``writes``): off, ``trainer.status`` is None,
    as in a run without the dashboard. The switch is the same on every rank (it follows the steps)."""
    from odin_sched.odin.trainer import DistributedTrainer

    report_due, run = DistributedTrainer._report_due, DistributedTrainer.run

    def switched_report_due(self, stop):
        switch.status = self.status if self.status is not None else switch.status
        on = switch.mark(switch.marks[-1][1] if switch.marks else 0, stop)
        self.status = switch.status if on and writes else None
        return report_due(self, stop)

    def marked_run(self):
        result = run(self)
        switch.mark(self.steps, None)
        self.status = switch.status  # closed by train_distributed
        return result

    DistributedTrainer._report_due, DistributedTrainer.run = switched_report_due, marked_run


def timed_evaluations(switch: BlockSwitch, owner, name: str) -> None:
    """Have ``owner.name`` (a trainer's held-out evaluation: ``train.evaluate``, Odin's ``_evaluate``)
    tell ``switch`` its wall time."""
    method = getattr(owner, name)

    def timed(*args, **kwargs):
        t0 = switch.clock()
        try:
            return method(*args, **kwargs)
        finally:
            switch.evaluated(switch.clock() - t0)

    setattr(owner, name, timed)


def thread_cpu(thread: threading.Thread) -> float:
    """Processor seconds of a live thread of this process so far (Linux schedstat, nanoseconds)."""
    with open(f"/proc/self/task/{thread.native_id}/schedstat") as f:
        return int(f.read().split()[0]) / 1e9


def overlap(spans: list, stretches: list) -> float:
    """Seconds of ``spans`` [(start, end)] inside ``stretches`` [(start, end)], each list disjoint, the
    stretches in time order (from the stretches' cumulative length, found by binary search)."""
    if not len(spans) or not len(stretches):
        return 0.0
    start, end = np.asarray(stretches, np.float64).T
    length = end - start
    before = np.concatenate([[0.0], np.cumsum(length)])  # [n + 1] length of the stretches before each

    def covered(x):  # length of the stretches up to the times x
        i = np.searchsorted(start, x, side="right")  # stretches that start by x
        last = np.maximum(i - 1, 0)
        return np.where(i > 0, before[last] + np.clip(x - start[last], 0.0, length[last]), 0.0)

    a, b = np.asarray(spans, np.float64).T
    return float(np.sum(covered(b) - covered(a)))


def child_within(spec: dict) -> dict | None:
    """One run with the dashboard (``spec["switch"] == "dashboard"``: status file and polling; the server
    up throughout) or the idle server (``"server"``: no status file, nobody polling) switched on and
    off in blocks (``BlockSwitch``); returns rank 0's blocks and measures (None on other ranks)."""
    import mmap

    import torch

    sys.path.insert(0, ROOT)
    from odin_sched.odin.options import OdinOptions
    from odin_sched.odin.trainer import DistributedTrainer, train_distributed
    from odin_sched.training import train as single
    from odin_sched.training.config import TrainConfig
    from odin_sched.view.server import dashboard_routes, make_server, serve_in_background
    from pregel.comm import Comm

    torch.set_num_threads(1)
    comm = Comm()
    switch = BlockSwitch(spec["block"], spec["warmup"], spec["pairs"], spec["seed"])
    writes = spec["switch"] == "dashboard"
    hooks = {}
    instrument(hooks, lambda: "on" if switch.on else "off")
    server = None
    if comm.rank == 0:
        server = make_server(dashboard_routes(os.path.dirname(spec["out"])), port=spec["port"])
        with open(spec["flag"], "r+b") as f:
            switch.flag = mmap.mmap(f.fileno(), 1)
        switch.flag[0] = 1
        if not writes:
            switch.gate = threading.Event()
            switch.gate.set()
            server.service_actions = switch.gate.wait  # off: the accept loop sleeps here, as if not started
        server_thread = serve_in_background(server)
        server_cpu0 = thread_cpu(server_thread)
    config = TrainConfig(spec["scene"], switch.steps, spec["out"], eval_every=spec["eval_every"], progress=False,
                         status=True)
    cpu = time.process_time()
    if spec["trainer"] == "single":
        status_class = switched_status(switch)
        status_class.writes = writes
        single.TrainStatus = status_class
        timed_evaluations(switch, single, "evaluate")
        result = single.train(config)
    else:
        switch_odin(switch, writes)
        timed_evaluations(switch, DistributedTrainer, "_evaluate")
        result = train_distributed(comm, config, OdinOptions(mode="odin", window=spec["window"]))
    if comm.rank != 0:
        return None
    usage = resource.getrusage(resource.RUSAGE_SELF)
    on, off = switch.stretches(True), switch.stretches(False)
    marks = np.array([(done, t, state) for done, _, t, state in switch.marks], np.float64).reshape(-1, 3)
    stretches = {"done": marks[1:, 0].astype(int).tolist(), "seconds": np.diff(marks[:, 1]).round(7).tolist(),
                 "on": marks[:-1, 2].astype(bool).tolist()}  # every stretch (step or window) after the first mark
    return {"blocks": switch.blocks(), "stretches": stretches, "train_s": result.wall_time_s,
            "train_cpu_s": time.process_time() - cpu,
            "cpu_s": usage.ru_utime + usage.ru_stime, "hooks_s": hooks["hooks"], "writer_s": hooks["writer"],
            "server_s": hooks["server"], "server_thread_s": thread_cpu(server_thread) - server_cpu0,
            "writes_s": {"on": overlap(hooks["writes"], on), "off": overlap(hooks["writes"], off)},
            "requests_s": {"on": overlap(hooks["requests"], on), "off": overlap(hooks["requests"], off)},
            "nivcsw": usage.ru_nivcsw}


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


def scene_file(args) -> tuple[str, str]:
    """(the working folder, the benchmark's scene file in it, made once)."""
    from odin_sched.scenes.scene_gen import generate_scene
    from odin_sched.scenes.scene_io import write_scene

    work = args.dir or tempfile.mkdtemp(prefix="dashboard_overhead_")
    scene = os.path.join(work, f"scene_{args.gaussians}.h5")
    if not os.path.exists(scene):
        write_scene(scene, generate_scene(args.gaussians, 24, 64, 64, seed=1))
    return work, scene


def run_within(args) -> None:
    """One training run with the dashboard switched on and off in blocks (``child_within``), under the
    lock; appends its blocks and measures to ``--results``."""
    work, scene = scene_file(args)
    flag = os.path.join(work, "dashboard.flag")
    with open(flag, "wb") as f:
        f.write(b"\0")
    port = free_port()
    spec = {"trainer": args.trainer, "switch": args.switch, "scene": scene, "out": os.path.join(work, "ab.h5"),
            "port": port, "flag": flag, "block": args.block, "warmup": args.warmup, "pairs": args.pairs,
            "eval_every": args.eval_every,
            "seed": args.seed, "window": args.window}
    command = [sys.executable, os.path.abspath(__file__), "--child-within", json.dumps(spec)]
    if args.trainer == "odin":
        command = ["mpiexec", "-n", str(args.ranks)] + command
    with locked(args.lock):
        poller = subprocess.Popen([sys.executable, "-c", POLLER, f"http://127.0.0.1:{port}/", flag]) \
            if args.switch == "dashboard" else None
        time.sleep(1.0)  # the client's start-up is over before the run starts
        load = loadavg()
        try:
            proc = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=RUN_TIMEOUT_S)
            client = tree_cpu(poller.pid) if poller is not None else 0.0
        finally:
            if poller is not None:
                poller.kill()
                poller.wait()
        load_after = loadavg()
    if proc.returncode != 0:
        sys.exit(f"dashboard_overhead: {' '.join(command[:-1])} failed:\n{proc.stderr[-3000:]}")
    row = {"design": "within", "trainer": args.trainer, "ranks": args.ranks if args.trainer == "odin" else 1,
           "switch": args.switch, "block": args.block, "gaussians": args.gaussians, "seed": args.seed,
           "load": load, "load_after": load_after, "client_cpu_s": client,
           "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           **json.loads(proc.stdout.strip().splitlines()[-1])}
    with open(args.results, "a") as f:
        f.write(json.dumps(row) + "\n")


def block_pairs(row: dict, evaluation: bool = False, max_degree: int = 3) -> tuple[np.ndarray, int]:
    """([pairs, 2] seconds per step of each pair's (on, off) block, pairs dropped) of a within-run row,
    without the blocks' held-out evaluation time unless ``evaluation``; a pair whose steps change the
    active SH degree (a step's cost changes there) is dropped."""
    from odin_sched.scenes.sh import active_sh_degree

    blocks = row["blocks"]
    rates, dropped = [], 0
    for a, b in zip(blocks[0::2], blocks[1::2]):
        if active_sh_degree(a["first"], 1, max_degree) != active_sh_degree(b["last"], 1, max_degree):
            dropped += 1
            continue
        on, off = (a, b) if a["on"] else (b, a)
        assert on["on"] and not off["on"], "a pair holds one block on and one off"
        rates.append([(x["seconds"] - (0.0 if evaluation else x.get("evaluation_s", 0.0))) / x["steps"]
                      for x in (on, off)])
    return np.array(rates).reshape(-1, 2), dropped


def hodges_lehmann_ci(values, confidence: float = 0.95) -> tuple[float, float, float]:
    """(estimate, low, high): the Hodges-Lehmann estimate of the centre of ``values`` [n] (the median of
    the n (n + 1) / 2 Walsh averages) and the distribution-free confidence interval of the Wilcoxon
    signed-rank test for it (symmetric differences; the normal approximation of the rank statistic's
    critical value, fine from n = 20), order statistics k and M + 1 - k of the Walsh averages."""
    v = np.asarray(values, np.float64)
    n = len(v)
    i, j = np.triu_indices(n)
    walsh = np.sort((v[i] + v[j]) / 2)
    m = len(walsh)
    k = int(np.floor(m / 2 - norm.ppf(0.5 + confidence / 2) * np.sqrt(n * (n + 1) * (2 * n + 1) / 24))) + 1
    k = min(max(k, 1), m)
    return float(np.median(walsh)), float(walsh[k - 1]), float(walsh[m - k])


def report_within(rows: list) -> None:
    """Print the within-run paired statistics of every (trainer, ranks, switch, block) group: on/off - 1
    of the seconds per step, from the pairs' log ratios (median, mean, Hodges-Lehmann, with intervals)."""
    groups = {}
    for row in rows:
        groups.setdefault((row["trainer"], row["ranks"], row["switch"], row["block"]), []).append(row)
    for (trainer, ranks, switch, block), group in groups.items():
        load = [r["load"][0] for r in group] + [r["load_after"][0] for r in group]
        for evaluation in (False, True):
            pairs = [block_pairs(row, evaluation) for row in group]
            rates = np.concatenate([p for p, _ in pairs])
            d = np.log(rates[:, 0] / rates[:, 1])
            n = len(d)
            if not evaluation:
                print(f"within-run, {trainer}, {ranks} rank(s), switching the {switch}: {len(group)} run(s), {n} "
                      f"pairs of {block}-step blocks ({sum(k for _, k in pairs)} dropped: SH degree change); 1-min "
                      f"load {min(load):.2f}-{max(load):.2f}; {1000 * np.median(rates[:, 1]):.2f} ms a step off")
            m, lo, hi, cover = median_ci(d)
            mean, half = d.mean(), t_dist.ppf(0.975, n - 1) * d.std(ddof=1) / np.sqrt(n)
            hl, hl_lo, hl_hi = hodges_lehmann_ci(d)
            pct = lambda x: f"{100 * np.expm1(x):+.2f}"  # noqa: E731 (a log ratio as on/off - 1, in %)
            print(f"  on/off - 1{', evaluations in' if evaluation else ''}: median {pct(m)} %, {100 * cover:.1f} % "
                  f"CI [{pct(lo)}, {pct(hi)}] %; mean {pct(mean)} %, 95 % t CI [{pct(mean - half)}, "
                  f"{pct(mean + half)}] %; Hodges-Lehmann {pct(hl)} %, 95 % Wilcoxon CI [{pct(hl_lo)}, {pct(hl_hi)}] "
                  f"%; SD of the log ratios {100 * d.std(ddof=1):.1f} %")
        on_s = sum(b["seconds"] for r in group for b in r["blocks"] if b["on"])
        off_s = sum(b["seconds"] for r in group for b in r["blocks"] if not b["on"])
        parts = {"status hooks, on": sum(r["hooks_s"].get("on", 0.0) for r in group) / on_s,
                 "writer busy in on blocks": sum(r["writes_s"]["on"] for r in group) / on_s,
                 "writer busy in off blocks": sum(r["writes_s"]["off"] for r in group) / off_s,
                 "requests in on blocks": sum(r["requests_s"]["on"] for r in group) / on_s,
                 "requests in off blocks": sum(r["requests_s"]["off"] for r in group) / off_s,
                 "server thread CPU (whole run)": sum(r["server_thread_s"] for r in group)
                 / sum(r["train_s"] for r in group),
                 "client CPU (whole run)": sum(r["client_cpu_s"] for r in group) / sum(r["train_s"] for r in group)}
        print("  " + "; ".join(f"{k} {100 * v:.3f} %" for k, v in parts.items()) + " (of the blocks' wall time)")


def run_pairs(args) -> None:
    work, scene = scene_file(args)
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
    """Print the paired statistics of every group of the results file (within-run designs, then run pairs)."""
    with open(path) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    report_within([row for row in rows if row.get("design") == "within"])
    groups = {}
    for row in rows:
        if row.get("design") == "within":
            continue
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
    if len(sys.argv) > 2 and sys.argv[1] == "--child-within":
        measures = child_within(json.loads(sys.argv[2]))
        if measures is not None:  # rank 0
            print(json.dumps(measures), flush=True)
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--design", choices=("within", "pairs"), default="within",
                        help="blocks switched on and off inside one run, or pairs of whole runs")
    parser.add_argument("--trainer", choices=("single", "odin"), default="single")
    parser.add_argument("--ranks", type=int, default=1, help="Odin's ranks (within: mpiexec -n RANKS)")
    parser.add_argument("--switch", choices=("dashboard", "server"), default="dashboard",
                        help="within: switch the status file and the polling (the server up throughout), or "
                             "the idle server (no status file, nobody polling)")
    parser.add_argument("--block", type=int, default=21,
                        help="within: steps a block (default: one pass over the scene's 21 training cameras)")
    parser.add_argument("--eval-every", type=int, default=84, help="within: held-out PSNR every N steps")
    parser.add_argument("--warmup", type=int, default=56,
                        help="within: steps before the blocks (the default puts each evaluation at a block's "
                             "7th step, so that the held-out PNG it hands over is written in the same block)")
    parser.add_argument("--window", type=int, default=7,
                        help="within, Odin: batches a planning window (the default divides the block and the "
                             "warm-up, so that windows end at block boundaries)")
    parser.add_argument("--seed", type=int, default=0, help="within: which block of each pair is on")
    parser.add_argument("--steps", type=int, default=1000, help="pairs: steps a run")
    parser.add_argument("--pairs", type=int, default=20, help="pairs of runs, or of blocks (within)")
    parser.add_argument("--gaussians", type=int, default=2000)
    parser.add_argument("--client", choices=("poller", "chromium"), default="poller",
                        help="the page's client in on runs: a process polling as the page does, or the page in "
                             "headless Chromium on this machine")
    parser.add_argument("--lock", default=None,
                        help="a lock file (flock) held by each pair of runs, or by the within-run run")
    parser.add_argument("--dir", default=None, help="the scene and outputs' folder (default: a new temporary one)")
    parser.add_argument("--results", default="dashboard_overhead.jsonl", help="JSON lines, one a pair (appended)")
    parser.add_argument("--report", action="store_true", help="only summarise --results")
    args = parser.parse_args()
    if not args.report:
        sys.path.insert(0, ROOT)
        run_within(args) if args.design == "within" else run_pairs(args)
    report(args.results)


if __name__ == "__main__":
    main()
