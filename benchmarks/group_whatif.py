"""What dealing cells to owners in groups of neighbours would buy odin on issue 20's check (``owners_by_count``'s
``group``).

Issue 20's scene and runs as ``benchmarks/sim_breakdown.py`` (a generated ``city`` of 1,000,000 Gaussians,
2,000 cameras at 256 x 192, 40 steps, window 10, batch = GPUs, ``h200-ib``, planning charged as measured):
per GPU count and group size k (1: cells dealt one by one), barrier and odin with the cells cut into groups
of k consecutive cells (spatial neighbours) dealt to owners as ``owners_by_count`` deals them; with
``--join``, odin also with the 'run' joining what-if (``odin_sched.sim.joining.DynamicJoin``; not what the
runtime sends). Per run: odin / ceiling, odin / barrier (the barrier of the same k), the exposed hidden
fraction (as ``join_whatif.py``'s) and the messages a GPU sends per window. Run from the repository root:
``python benchmarks/group_whatif.py [--seed S] [--groups K ...] [--join] [P ...]``.
"""
import os

from odin_sched.sim.costmodel import load_profile
from odin_sched.sim.joining import DynamicJoin
from odin_sched.sim.simulate import simulate

from join_whatif import figures
from sim_breakdown import STEPS, WINDOW, city_scene, city_scene_parser


def main(gpus, gaussians, cameras, width, height, name, seed=0, groups=(1, 2, 4, 8), join=False):
    profile = load_profile(name, gaussians)
    scene = city_scene(gaussians, cameras, width, height)
    windows = -(-STEPS // WINDOW)
    print(f"city, {gaussians:,} Gaussians, {cameras:,} cameras at {width} x {height}, {STEPS} steps, window {WINDOW}, "
          f"batch = GPUs, {name}, planning charged, seed {seed} (load average {os.getloadavg()[0]:.1f})")
    print("GPUs | k | messages | odin / ceiling | odin / barrier | exposed hidden | messages per GPU per window")
    for p in gpus:
        for k in groups:
            b = simulate(scene, profile, "barrier", p, STEPS, p, window=WINDOW, seed=seed, owner_group=k)
            for label, hook in (("today", None),) + ((("(a) run", DynamicJoin("run")),) if join else ()):
                o = simulate(scene, profile, "odin", p, STEPS, p, window=WINDOW, seed=seed, joining=hook,
                             owner_group=k)
                print(f"{p:>4} | {k} | {label} | {figures(o, b, windows)}", flush=True)


if __name__ == "__main__":
    parser = city_scene_parser(__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=0, help="the training order's and the cost noise's seed")
    parser.add_argument("--groups", type=int, nargs="+", default=[1, 2, 4, 8], help="group sizes k to deal")
    parser.add_argument("--join", action="store_true", help="odin also with the 'run' joining what-if")
    a = parser.parse_args()
    main(a.gpus, a.gaussians, a.cameras, a.width, a.height, a.profile, a.seed, a.groups, a.join)
