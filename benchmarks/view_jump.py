"""What `pregel view` draws after the view jumps (a camera button, or a drag of half a radian), in headless
Chromium, at several model sizes.

For each size N the random model of ``view_fps.py`` is served by `pregel view` and drawn on an 800 x 600
canvas by Debian's headless Chromium (WebGL2 in software, SwiftShader). The view then jumps ``--jumps``
times (an orbit of 0.5 rad, alternating left and right), each once the last is final. The first jump
comes straight after the page has loaded (motion quality 1, as a user's first click finds it), the others
after it. Reported per jump, from the jump: the milliseconds until the view is first drawn whole (every
Gaussian in its own depth order at full resolution), until it is final (drawn whole, the settle window
over and no sort under way), the frames drawn in all and the frames drawn after it was first whole
(redrawn at the motion quality and then whole again).

    .venv/bin/python benchmarks/view_jump.py [--sizes 1000000,2000000] [--jumps 4] [--dir DIR]
"""
import argparse
import os
import tempfile

from view_fps import chromium, open_page, random_model, served  # a sibling script: benchmarks/ is on the path when run

#: the page's script: jump, then sample every animation frame until the view is final (drawn whole, out of
#: the page's own settle window, ``Viewer.inMotion``, and no sort under way)
JUMP = """
const angle = arguments[0], done = arguments[1];  // Selenium's callback comes after the arguments
const v = window.viewer, t0 = performance.now(), before = v.frames;
let whole = null, framesAtWhole = 0;
v.orbit(angle, 0);
const tick = () => {
  const now = performance.now(), isWhole = v.drawnVersion === v.viewVersion;
  if (isWhole && whole === null) { whole = now - t0; framesAtWhole = v.frames - before; }
  if (isWhole && !v.inMotion(now) && !v.sortBusy) {
    done({whole: whole, final: now - t0, frames: v.frames - before, after: v.frames - before - framesAtWhole});
  } else {
    requestAnimationFrame(tick);
  }
};
requestAnimationFrame(tick);
"""


def jumps(driver, address: str, count: int) -> list:
    """``count`` jumps of the view on the page at ``address``, each once the last is final: a dict each
    (whole and final milliseconds, frames drawn, frames drawn after the view was first whole)."""
    open_page(driver, address, 800, 600)
    return [driver.execute_async_script(JUMP, 0.5 if i % 2 == 0 else -0.5) for i in range(count)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1000000,2000000")
    parser.add_argument("--jumps", type=int, default=4)
    parser.add_argument("--dir", default=None, help="where to write the models (default: a temporary folder)")
    args = parser.parse_args()
    work = args.dir or tempfile.mkdtemp(prefix="view_jump_")
    driver = chromium()
    with open("/proc/loadavg") as f:
        print(f"load average {' '.join(f.read().split()[:3])}")
    print(f"{'Gaussians':>10} {'jump':>4} {'whole ms':>9} {'final ms':>9} {'frames':>6} {'after whole':>11}")
    try:
        for n in (int(s) for s in args.sizes.split(",")):
            path = os.path.join(work, f"random_{n}.ply")
            if not os.path.exists(path):
                random_model(path, n)
            with served(path) as address:
                results = jumps(driver, address, args.jumps)
            for i, r in enumerate(results):
                print(f"{n:>10,} {i + 1:>4} {r['whole']:>9.0f} {r['final']:>9.0f} {r['frames']:>6} {r['after']:>11}",
                      flush=True)
    finally:
        driver.quit()


if __name__ == "__main__":
    main()
