"""Frames per second of `pregel view` in headless Chromium, at several model sizes.

For each size N a random model (means uniform in a unit ball, isotropic scales about half the mean
spacing, random colours and opacities) is written as a 3DGS PLY, served by `pregel view`, and drawn on an
800 x 600 canvas (``--width``, ``--height``) by Debian's headless Chromium with WebGL2 in software (SwiftShader, the only WebGL on
a machine without a GPU) while the camera orbits one step per frame. Each frame is finished before
the next (a one-pixel readback), and depth re-sorts run in the page's worker as often as they keep up.
Reported: frames/s at full quality (what the page draws once the view stops: every Gaussian at full
resolution), the same with the page's occlusion culling off (after a warm-up round, two rounds of
``--frames`` each, alternating with culling on; their means), frames/s while moving (the page's adaptive motion quality q, after it has settled: sqrt(q)
of the resolution and the q G most important Gaussians) with the q it chose, the worker's last sort
time, and how many Gaussians the last sort kept.

    .venv/bin/python benchmarks/view_fps.py [--sizes 100000,1000000] [--frames 10] [--opacity LOGIT] [--dir DIR]
"""
import argparse
import contextlib
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from odin_sched.scenes.ply import write_ply  # noqa: E402

FLAGS = ("--headless=new", "--use-angle=swiftshader", "--enable-unsafe-swiftshader", "--no-sandbox",
         "--window-size=1100,700")


def random_model(path, n: int, seed: int = 0, opacity: float | None = None) -> None:
    """A PLY of ``n`` random Gaussians in the unit ball; opacity logits N(0, 1), or all ``opacity``."""
    rng = np.random.default_rng(seed)
    direction = rng.normal(size=(n, 3))
    means = direction / np.linalg.norm(direction, axis=1, keepdims=True) * rng.random((n, 1)) ** (1 / 3)
    spacing = (4.19 / n) ** (1 / 3)
    scales = np.log(0.5 * spacing * rng.uniform(0.5, 1.5, size=(n, 1))).repeat(3, axis=1)
    quats = rng.normal(size=(n, 4))
    logits = rng.normal(0, 1, n) if opacity is None else np.full(n, opacity)
    write_ply(path, means, scales, quats, logits, rng.random((n, 3)))


def chromium():
    """Debian's headless Chromium (FLAGS) under Selenium, with room for a software frame of millions of
    Gaussians."""
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    for flag in FLAGS:
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service("/usr/bin/chromedriver"))
    driver.command_executor.client_config.timeout = 900  # a software frame of 1M Gaussians takes long
    driver.set_script_timeout(600)
    return driver


@contextlib.contextmanager
def served(path):
    """``pregel view PATH`` in a process of its own; yields the page's address, and stops it on leaving."""
    proc = subprocess.Popen([sys.executable, "-m", "pregel.cli", "view", path, "--port", "0"],
                            stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        yield line[line.index("http://"):].split()[0]
    finally:
        proc.terminate()
        proc.wait()


def open_page(driver, address: str, width: int, height: int) -> None:
    """Load the page at ``width`` x ``height`` and wait until its first view is drawn whole."""
    driver.get(address + f"?width={width}&height={height}")
    deadline = time.monotonic() + 300
    while not driver.execute_script("return !!window.viewer || window.viewerError || null"):
        if time.monotonic() > deadline:
            raise RuntimeError("the viewer did not start")
        time.sleep(0.2)
    driver.execute_async_script("window.viewer.settled().then(arguments[0])")


def measure(driver, address: str, frames: int, width: int, height: int) -> tuple[dict, dict, dict]:
    open_page(driver, address, width, height)
    run = "window.viewer.benchmark({}, {}, {}).then(arguments[0])"
    driver.execute_async_script(run.format(frames, 90, "false"))  # warm-up, not counted
    rounds = {True: [], False: []}
    for occlusion in (True, False, True, False):  # alternating, so that a change of load hits both alike
        driver.execute_script(f"window.viewer.occlusion = {str(occlusion).lower()}")
        rounds[occlusion].append(driver.execute_async_script(run.format(frames, 90, "false")))
    driver.execute_script("window.viewer.occlusion = true")
    still, unculled = ({"fps": sum(r["fps"] for r in rounds[o]) / 2} for o in (True, False))
    driver.execute_async_script(run.format(3 * frames, 60, "true"))  # lets the motion resolution settle
    return still, unculled, driver.execute_async_script(run.format(3 * frames, 60, "true"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="100000,1000000")
    parser.add_argument("--frames", type=int, default=10, help="full-resolution frames (3x as many moving)")
    parser.add_argument("--width", type=int, default=800)
    parser.add_argument("--height", type=int, default=600)
    parser.add_argument("--dir", default=None, help="where to write the models (default: a temporary folder)")
    parser.add_argument("--opacity", type=float, default=None,
                        help="every Gaussian's opacity logit (default: random, N(0, 1)); e.g. 3 (0.95) for a "
                             "nearly opaque model, more like the surfaces of a trained one")
    args = parser.parse_args()
    work = args.dir or tempfile.mkdtemp(prefix="view_fps_")
    driver = chromium()
    with open("/proc/loadavg") as f:
        print(f"load average {' '.join(f.read().split()[:3])}")
    print(f"{'Gaussians':>10} {'still fps':>9} {'unculled':>9} {'moving fps':>10} {'quality':>8} {'sort ms':>8} "
          f"{'drawn':>10}")
    try:
        for n in (int(s) for s in args.sizes.split(",")):
            path = os.path.join(work, f"random_{n}" + ("" if args.opacity is None else f"_o{args.opacity:g}") + ".ply")
            if not os.path.exists(path):
                random_model(path, n, opacity=args.opacity)
            with served(path) as address:
                still, unculled, moving = measure(driver, address, args.frames, args.width, args.height)
            print(f"{n:>10,} {still['fps']:>9.2f} {unculled['fps']:>9.2f} {moving['fps']:>10.2f} {moving['quality']:>8.3f} "
                  f"{moving['sortMs']:>8.0f} {moving['drawn']:>10,}", flush=True)
    finally:
        driver.quit()


if __name__ == "__main__":
    main()
