"""Row-level messages, a what-if of the simulator (``odin_sched.sim.rows``; NOT what the runtime does):
whole cells against rows, side by side in one run (docs/row-messages.md).

Three parts, each printing a markdown table:

* ``costs``: what choosing, gathering and scattering rows costs on this machine (one thread, NumPy, the
  host arrays the runtime's messages are): the planner's test of one Gaussian against one camera
  (``predict_visible_cells`` on single-Gaussian boxes, 200,000 against 16 cameras at once), a message's
  rows gathered from a cell's block (``take``) and scattered into a zeroed block of the cell, per word,
  at a cell of 8,192 rows (the runtime's default cell) with a quarter and all of its rows. Writes ``--costs`` (JSON:
  ``RowCosts`` fields, the largest per-word figure of each kind) for the other parts.
* ``city``: issue 20's scene (``city``, 1,000,000 Gaussians, 2,000 cameras at 256 x 192, 40 steps,
  window 10, batch = GPUs, ``h200-ib`` with planning as ``pregel simulate`` loads it): barrier (whole
  cells), odin with whole cells, odin with rows (the row costs folded in) and with rows whose selection,
  gathers and scatters cost nothing (what a device-side selection would approach), with ``--at-sending``
  also rows chosen at sending (no margin), free: steps/s, ceiling,
  odin / ceiling, assigned bound / ceiling, exposed hidden vs barrier (1 - (comm + wait)_odin / (comm +
  wait)_barrier, planning wait in both: none with whole cells, README; windows made shorter may expose
  some at 128 GPUs) and remote MB per image.
* ``presets``: Rubble and Mip360 presets (``odin_preset``, as ``benchmarks/grendel_compare.py``), 20
  steps, batch = GPUs: grendel, odin with whole cells, and odin with rows planned (the window's margin)
  and chosen at sending (no margin: receives posted at a whole cell's size, the message's own length
  read from its status), each with the row costs folded in and free: images/s, odin / grendel, hidden
  vs grendel, and MB per image odin sends between GPUs against Grendel's all-to-alls. With ``--measured-share`` the
  row counts of a preset with a measured share of Gaussians in view (``ScenePreset.visible``) are
  scaled by that share over the share the generated layout's cameras have on screen (the generated
  ``objects`` layout puts about 95 % of the scene in every view, the captures a third).

Run from the repository root (deterministic; niced; Rubble's under the shared lock)::

    python benchmarks/rows_whatif.py costs --costs rows_costs.json
    python benchmarks/rows_whatif.py city --costs rows_costs.json --gpus 8,16,32,64,128
    flock /tmp/heavy.lock python benchmarks/rows_whatif.py presets --costs rows_costs.json --scenes rubble
    python benchmarks/rows_whatif.py presets --costs rows_costs.json --scenes counter,bicycle --generate 200000 \
        [--measured-share]
"""
import argparse
import json
import os
import resource
import time

import numpy as np

from odin_sched.scenes.visibility import Margin, predict_visible_cells
from odin_sched.sim.bounds import hidden_at
from odin_sched.sim.costmodel import load_profile
from odin_sched.sim.grendel import hidden_vs_grendel
from odin_sched.sim.presets import PRESETS
from odin_sched.sim.rows import RowCosts, RowMessages, gaussian_bounds
from odin_sched.sim.scene import metadata_scene, odin_preset, standing_for
from odin_sched.sim.simulate import simulate
from odin_sched.training.step import param_columns
from odin_sched.odin.program import GRAD_EXTRA

COLUMNS = param_columns(3)


def _best(fn, repeat: int = 5) -> float:
    """The least of ``repeat`` timings of ``fn()`` (seconds)."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def measure_costs() -> tuple[RowCosts, str]:
    """(RowCosts: the largest per-unit figure of each kind, the markdown table of every measurement)."""
    rng = np.random.default_rng(0)
    scene = metadata_scene("city", 200_000, 16, 256, 192)
    points = gaussian_bounds(scene.means, scene.scales)
    seconds = _best(lambda: predict_visible_cells(points, scene.viewmats, scene.Ks, 256, 192, Margin(0.1, 0.1)))
    test = seconds / (16 * len(scene.means))  # an owner tests a cell against all its remote readers' cameras
    lines = ["| operation | rows | columns | seconds | per word (ns) |", "| --- | --- | --- | --- | --- |",
             f"| frustum test of 200,000 Gaussians against 16 cameras | 200,000 | | {seconds:.4f} | "
             f"{test * 1e9:.1f} per test |"]
    cell = 8192
    gather = scatter = 0.0
    for columns in (COLUMNS, COLUMNS + GRAD_EXTRA):
        block = rng.random((cell, columns), dtype=np.float32)
        for share in (0.25, 1.0):
            rows = np.sort(rng.choice(cell, int(share * cell), replace=False))
            words = len(rows) * columns
            g = _best(lambda: block.take(rows, axis=0))
            part = block[rows]

            def scatter_into_zeros():
                out = np.zeros((cell, columns), np.float32)
                out[rows] = part
                return out

            s = _best(scatter_into_zeros)
            gather, scatter = max(gather, g / words), max(scatter, s / words)
            lines.append(f"| gather (take) | {len(rows):,} of {cell:,} | {columns} | {g:.6f} | {1e9 * g / words:.2f} |")
            lines.append(f"| scatter into a zeroed cell block | {len(rows):,} of {cell:,} | {columns} | {s:.6f} "
                         f"| {1e9 * s / words:.2f} |")
    return RowCosts(test, gather, scatter), "\n".join(lines)


def load_costs(path: str | None) -> RowCosts:
    if not path:
        return RowCosts()
    with open(path) as f:
        return RowCosts(**json.load(f))


def city(gpus, costs: RowCosts, at_sending: bool = False, steps: int = 40, window: int = 10) -> str:
    """The 1 M city's table (module docstring)."""
    gaussians = 1_000_000
    scene = standing_for(metadata_scene("city", gaussians, 2000, 256, 192, 0), gaussians)
    profile = load_profile("h200-ib", gaussians)
    lines = ["| GPUs | messages | odin st/s | ceiling st/s | odin ÷ ceiling | assigned bound ÷ ceiling | "
             "odin ÷ barrier | exposed hidden vs barrier | at the assigned bound | MB per image between GPUs |",
             "|" + " --- |" * 10]
    for p in gpus:
        barrier = simulate(scene, profile, "barrier", p, steps, p, window=window)
        hooks = {"rows": RowMessages(scene, COLUMNS, costs),
                 "rows, selection free": RowMessages(scene, COLUMNS)}
        if at_sending:
            hooks["rows at sending, selection free"] = RowMessages(scene, COLUMNS, margin=Margin(0.0, 0.0))
        runs = {"whole cells": simulate(scene, profile, "odin", p, steps, p, window=window),
                **{label: simulate(scene, profile, "odin", p, steps, p, window=window, message_sizes=hook)
                   for label, hook in hooks.items()}}
        exposed_b = float(barrier.comm.sum() + barrier.wait.sum())
        for label, o in runs.items():
            mb = hooks.get(label, hooks["rows"]).sent["whole" if label == "whole cells" else "rows"] / (steps * p) / 1e6
            lines.append(f"| {p} | {label} | {o.steps_per_second:.1f} | {o.ceiling_steps_per_second:.1f} | "
                         f"{o.steps_per_second / o.ceiling_steps_per_second:.3f} | "
                         f"{o.assigned_ceiling_steps_per_second / o.ceiling_steps_per_second:.3f} | "
                         f"{o.steps_per_second / barrier.steps_per_second:.3f} | "
                         f"{hidden_vs_grendel(o.comm, o.wait, barrier.comm, barrier.wait):.2f} | "
                         f"{hidden_at(o.assigned_bound_seconds, p, float(o.compute.sum()), 0.0, exposed_b):.2f} | "
                         f"{mb:.1f} |")
        print("\n".join(lines[-len(runs):]), f"(rows / whole pairs read {np.mean(hooks['rows'].read_share):.3f}, "
              f"load {os.getloadavg()[0]:.1f})", flush=True)
    return "\n".join(lines)


def layout_on_screen(scene) -> float:
    """The mean share of the generated Gaussians on screen per training camera, from the projected sample
    (``CameraViews.on_screen_indptr``; ``metadata_scene`` projects int(sample x G) of them)."""
    made = len(scene.means)
    sampled = max(1, int(min(1.0, 20000 / made) * made))
    return float(np.diff(scene.views.on_screen_indptr)[scene.train_ids].mean() / sampled)


def presets(names, profiles, gpus, costs: RowCosts, measured_share: bool, generate: int | None = None,
            steps: int = 20) -> str:
    """The presets' table (module docstring)."""
    lines = ["| scene | profile | GPUs | messages | row scale | images/s | grendel | odin ÷ grendel | "
             "hidden vs grendel | at the assigned bound | MB per image odin / grendel |", "|" + " --- |" * 11]
    for name in names:
        scene = odin_preset(name, gpus, generated=generate)
        scale = 1.0
        if measured_share and PRESETS[name].visible:
            scale = PRESETS[name].visible / layout_on_screen(scene)
        for profile_name in profiles:
            profile = load_profile(profile_name, scene.total_gaussians)
            for p in gpus:
                g = simulate(scene, profile, "grendel", p, steps, p)
                share, none = min(scale, 1.0), Margin(0.0, 0.0)
                hooks = {"rows planned": RowMessages(scene, COLUMNS, costs, share),
                         "rows planned, selection free": RowMessages(scene, COLUMNS, scale=share),
                         "rows at sending": RowMessages(scene, COLUMNS, costs, share, none),
                         "rows at sending, selection free": RowMessages(scene, COLUMNS, scale=share, margin=none)}
                runs = {"whole cells": simulate(scene, profile, "odin", p, steps, p),
                        **{label: simulate(scene, profile, "odin", p, steps, p, message_sizes=hook)
                           for label, hook in hooks.items()}}
                exposed_g = float(g.comm.sum() + g.wait.sum())
                for label, o in runs.items():
                    hook = hooks.get(label, hooks["rows planned"])
                    mb = hook.sent["whole" if label == "whole cells" else "rows"] / (steps * p) / 1e6
                    lines.append(
                        f"| {name} | {profile_name} | {p} | {label} | {min(scale, 1.0):.2f} | "
                        f"{o.steps_per_second * p:.0f} | {g.steps_per_second * p:.0f} | "
                        f"{o.steps_per_second / g.steps_per_second:.2f} | "
                        f"{hidden_vs_grendel(o.comm, o.wait, g.comm, g.wait):.2f} | "
                        f"{hidden_at(o.assigned_bound_seconds, p, float(o.compute.sum()), 0.0, exposed_g):.2f} | "
                        f"{mb:.1f} / {g.bytes_sent / (steps * p) / 1e6:.1f} |")
                print("\n".join(lines[-5:]), f"(rows / whole pairs read, planned "
                      f"{np.mean(hooks['rows planned'].read_share):.3f}, at sending "
                      f"{np.mean(hooks['rows at sending'].read_share):.3f}, "
                      f"load {os.getloadavg()[0]:.1f}, peak RSS "
                      f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20:.2f} GiB)", flush=True)
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("part", choices=("costs", "city", "presets"))
    parser.add_argument("--gpus", help="comma-separated GPU counts (city: 8,16,32,64,128; presets: 8,64)")
    parser.add_argument("--costs", help="RowCosts JSON: written by `costs`, read by the others (none: free)")
    parser.add_argument("--scenes", default="rubble,counter,bicycle")
    parser.add_argument("--profiles", default="a100-nvlink,h200-ib")
    parser.add_argument("--measured-share", action="store_true",
                        help="scale a Mip360 preset's rows to its measured share of Gaussians in view")
    parser.add_argument("--at-sending", action="store_true", help="city: also rows chosen at sending, free")
    parser.add_argument("--generate", type=int, help="a preset of more Gaussians is generated as a stand-in of "
                        "about this many (default: pregel simulate's, 2 million above 8 million)")
    parser.add_argument("--max-gb", type=float, default=6.0, help="address-space cap of this process")
    a = parser.parse_args()
    cap = int(a.max_gb * 2 ** 30)
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    gpus = [int(x) for x in a.gpus.split(",")] if a.gpus else None
    t0 = time.process_time()
    if a.part == "costs":
        costs, text = measure_costs()
        if a.costs:
            with open(a.costs, "w") as f:
                json.dump(costs.__dict__, f)
    elif a.part == "city":
        text = city(gpus or [8, 16, 32, 64, 128], load_costs(a.costs), a.at_sending)
    else:
        text = presets(a.scenes.split(","), a.profiles.split(","), gpus or [8, 64], load_costs(a.costs),
                       a.measured_share, a.generate)
    print(text)
    print(f"(processor seconds {time.process_time() - t0:.0f}, peak RSS "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20:.2f} GiB, load {os.getloadavg()})")


if __name__ == "__main__":
    main()
