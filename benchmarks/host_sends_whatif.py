"""What a host thread posting the messages would buy odin on issue 20's check: a what-if of the simulator.

``CostProfile.host_sends``: each message's sender time (``overhead``, 5 us) is paid by a host thread beside
the GPU instead of by the GPU, as a CUDA program whose kernel launches return at once can post one image's
messages while the GPU renders the next; a message still leaves only once its own sender's time is paid,
after those given to the host before it. Issue 20's scene and runs as ``benchmarks/sim_breakdown.py`` (a
generated ``city`` of 1,000,000 Gaussians, 2,000 cameras at 256 x 192, 40 steps, window 10, batch = GPUs,
``h200-ib``, planning charged as measured), odin and barrier each as the runtime sends today and with
host sends. Per run: odin / ceiling, odin / its assigned bound, odin / barrier (the barrier of the same
sends), the exposed hidden fraction against that barrier and against today's (planning left out of both,
as ``sim_breakdown.py``'s ``exposed``). Run from the repository root:
``python benchmarks/host_sends_whatif.py [--seed S] [P ...]``.
"""
import os

from odin_sched.sim.costmodel import load_profile
from odin_sched.sim.simulate import simulate

from join_whatif import exposed
from sim_breakdown import STEPS, WINDOW, city_scene, city_scene_parser


def main(gpus, gaussians, cameras, width, height, name, seed=0):
    profiles = {"today": load_profile(name, gaussians), "host sends": load_profile(name, gaussians, True)}
    scene = city_scene(gaussians, cameras, width, height)
    print(f"city, {gaussians:,} Gaussians, {cameras:,} cameras at {width} x {height}, {STEPS} steps, window {WINDOW}, "
          f"batch = GPUs, {name}, planning charged, seed {seed} (load average {os.getloadavg()[0]:.1f})")
    print("GPUs | sends | odin steps/s | odin / ceiling | odin / assigned bound | odin / barrier | exposed hidden "
          "| exposed hidden against today's barrier")
    for p in gpus:
        barrier = {k: simulate(scene, prof, "barrier", p, STEPS, p, window=WINDOW, seed=seed) for k, prof in profiles.items()}
        for label, profile in profiles.items():
            o, b = simulate(scene, profile, "odin", p, STEPS, p, window=WINDOW, seed=seed), barrier[label]
            print(f"{p:>4} | {label} | {o.steps_per_second:.1f} | {o.steps_per_second / o.ceiling_steps_per_second:.3f} "
                  f"| {o.steps_per_second / o.assigned_ceiling_steps_per_second:.3f} "
                  f"| {o.steps_per_second / b.steps_per_second:.3f} | {exposed(o, b):.3f} "
                  f"| {exposed(o, barrier['today']):.3f}", flush=True)


if __name__ == "__main__":
    parser = city_scene_parser(__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=0, help="the training order's and the cost noise's seed")
    a = parser.parse_args()
    main(a.gpus, a.gaussians, a.cameras, a.width, a.height, a.profile, a.seed)
