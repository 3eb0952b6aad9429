"""What joining messages would buy odin on issue 20's check: a what-if of the simulator (odin_sched/sim/joining.py).

Issue 20's scene and runs as ``benchmarks/sim_breakdown.py`` (a generated ``city`` of 1,000,000 Gaussians,
2,000 cameras at 256 x 192, 40 steps, window 10, batch = GPUs, ``h200-ib``, planning charged as measured):
barrier once, odin with the runtime's messages and with each design: (a) dynamic joining, a rank's messages to
one rank joined over a serving point's fires ('serving') or over every run of fires between image parts and
waits ('run'); (b) cell versions of one owner with the same in-neighbours merged in the plan. Per run: odin /
ceiling, odin / barrier, the exposed hidden fraction (1 - (comm + wait)_odin / (comm + wait)_barrier,
planning left out of both, as ``sim_breakdown.py``'s ``exposed``) and the messages a GPU sends per window;
for (b) also the version messages and their bytes as sent today and merged (all windows, exactly). Run from
the repository root: ``python benchmarks/join_whatif.py [--seed S] [P ...]``.
"""
import os

from odin_sched.sim.costmodel import load_profile
from odin_sched.sim.grendel import hidden_vs_grendel
from odin_sched.sim.joining import DynamicJoin, MergedVersions
from odin_sched.sim.simulate import simulate

from sim_breakdown import STEPS, WINDOW, city_scene, city_scene_parser


def exposed(o, b) -> float:
    """The exposed hidden fraction of odin run ``o`` against barrier run ``b`` (planning left out)."""
    p = o.gpus
    return hidden_vs_grendel(o.comm, o.wait - o.planning_wait / p, b.comm, b.wait - b.planning_wait / p)


def figures(o, b, windows: int) -> str:
    """Odin run ``o`` against barrier run ``b`` as a table's cells: odin / ceiling | odin / barrier | exposed
    hidden | messages a GPU sends per window (of ``windows``)."""
    return (f"{o.steps_per_second / o.ceiling_steps_per_second:.3f} | {o.steps_per_second / b.steps_per_second:.3f} "
            f"| {exposed(o, b):+.3f} | {o.messages_sent / o.gpus / windows:.0f}")


def main(gpus, gaussians, cameras, width, height, name, seed=0):
    profile = load_profile(name, gaussians)
    scene = city_scene(gaussians, cameras, width, height)
    windows = -(-STEPS // WINDOW)
    print(f"city, {gaussians:,} Gaussians, {cameras:,} cameras at {width} x {height}, {STEPS} steps, window {WINDOW}, "
          f"batch = GPUs, {name}, planning charged, seed {seed} (load average {os.getloadavg()[0]:.1f})")
    print("GPUs | design | odin / ceiling | odin / barrier | exposed hidden | messages per GPU per window"
          " | (b): version messages today / merged, version MB today / merged")
    for p in gpus:
        b = simulate(scene, profile, "barrier", p, STEPS, p, window=WINDOW, seed=seed)
        merged = MergedVersions()
        for label, hook in (("today", None), ("(a) serving", DynamicJoin("serving")), ("(a) run", DynamicJoin("run")),
                            ("(b) merged", merged)):
            o = simulate(scene, profile, "odin", p, STEPS, p, window=WINDOW, seed=seed, joining=hook)
            extra = ""
            if hook is merged:
                total = {k: sum(s[k] for s in merged.stats) for k in merged.stats[0]}
                extra = (f" | {total['messages']:,} / {total['merged_messages']:,}, "
                         f"{4e-6 * total['words']:.0f} / {4e-6 * total['merged_words']:.0f}")
            print(f"{p:>4} | {label} | {figures(o, b, windows)}{extra}", flush=True)


if __name__ == "__main__":
    parser = city_scene_parser(__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=0, help="the training order's and the cost noise's seed")
    a = parser.parse_args()
    main(a.gpus, a.gaussians, a.cameras, a.width, a.height, a.profile, a.seed)
