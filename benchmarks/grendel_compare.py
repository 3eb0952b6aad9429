"""Odin against Grendel-GS, the comparison Odin's paper makes, on every preset of ``pregel simulate``.

For each scene (the seven Mip-NeRF 360 presets and the aerial ``rubble``), each profile (``a100-nvlink``,
``h200-ib``), batch = GPUs and 2 x GPUs, and 4, 8, 16, 32 and 64 GPUs, it simulates ``odin``, ``barrier``
and ``grendel`` (``odin_sched.sim.simulate.simulate``, the same code as ``pregel simulate``) and writes one
markdown table: odin's cells (the runtime's ``default_cells`` of the preset's Gaussians, as ``pregel
simulate`` cuts them by default), images/s of each mode, odin / grendel, odin / barrier, ceiling / grendel (the most any
schedule of odin's windows could gain over Grendel), hidden vs grendel (1 - odin's exposed GPU-seconds /
Grendel's), the most of it any schedule could hide that finishes no sooner than the bound that keeps odin's
assignment and charges each transfer (``assigned_bound``) or than the ceiling (``odin_sched.sim.bounds.hidden_at``, against Grendel's exposed time), odin's wait
fraction, the share of the cells each training image reads (the planner's
predicted visibility, ``predict_visible_cells`` within the first window's margin: what every image of a
window waits for) and the MB of their parameters, against the MB per image Grendel's all-to-alls send. A second table gives, per scene, the ceiling over Grendel at 8 and 64 GPUs against
Odin's published 1.22x and 1.89x.

A preset is simulated as ``pregel simulate`` does (``odin_preset``): one of more than 8 million Gaussians
(rubble: 40.4 M) as a stand-in of at most 2 million (or of at most ``--generate`` for any larger preset),
each standing for a whole number of them (``stand_in_size``); it plans and costs exactly as the scene of each generated
Gaussian repeated that many times (tests/test_sim_stand_in.py).

Resumable: each (scene, profile, batch) is written to ``DIR/SCENE_PROFILE_bK.json`` when done (with its
processor seconds and peak RSS) and skipped when there; the tables are made from every file of the
scenes asked for. Run one scene at a time under the shared lock, e.g.::

    for s in counter bicycle; do flock /tmp/heavy.lock nice -n 19 timeout 3600 \\
        python benchmarks/grendel_compare.py --scenes $s --dir results/grendel_compare; done
    python benchmarks/grendel_compare.py --table-only --dir results/grendel_compare --out table.md

The process caps its own address space (``--max-gb``, default 6) so a run too large fails with
MemoryError instead of calling the OOM killer. ``--host-sends``: odin's and barrier's messages posted by a
host thread beside each GPU (``pregel simulate --host-sends``), kept in a ``--dir`` of its own.
"""
import argparse
import json
import os
import resource
import time

import numpy as np

from odin_sched.odin.options import OdinOptions
from odin_sched.scenes.sh import DEFAULT_SH_DEGREE
from odin_sched.scenes.visibility import predict_visible_cells, window_margin
from odin_sched.sim.bounds import hidden_at
from odin_sched.sim.costmodel import load_profile
from odin_sched.sim.grendel import exposed_seconds, hidden_vs_grendel
from odin_sched.sim.presets import MIP360, PRESETS
from odin_sched.sim.scene import cells, num_cells, odin_preset
from odin_sched.sim.simulate import simulate
from odin_sched.training.step import BatchSettings, param_columns
from odin_sched.training.train import scene_extent

SCENES = (*MIP360, "rubble")
PROFILES = ("a100-nvlink", "h200-ib")
GPUS = (4, 8, 16, 32, 64)
MODES = ("odin", "barrier", "grendel")
TARGETS = {8: 1.22, 64: 1.89}  # Odin's published speed-ups over Grendel-GS
HIDDEN_TARGET = 0.82  # Odin's published share of Grendel-GS's exposed communication hidden
COLUMNS = ("scene", "profile", "batch", "GPUs", "cells", "odin", "barrier", "grendel", "odin ÷ grendel", "odin ÷ barrier",
           "ceiling ÷ grendel", "hidden vs grendel", "best hidden vs grendel: assigned bound / ceiling",
           "odin wait", "cells read per image", "MB per image odin reads / grendel sends")


def reads(scene, gpus: int, batch: int) -> tuple:
    """(share, MB): the mean share of odin's cells on ``gpus`` GPUs (``num_cells``) that a training image
    reads, the planner's predicted visibility of the cells (``predict_visible_cells``) within the first
    window's motion margin, and the mean MB of those cells' parameters (float32 at SH degree 3, whole
    cells) per image."""
    settings, extent = BatchSettings(batch), scene_extent(scene.viewmats)
    lrs = settings.lrs(extent, 1)
    margin = window_margin(lrs["means"], lrs["scales"], settings.betas, OdinOptions.window)
    _, bounds = cells(scene, num_cells(scene.total_gaussians, gpus))
    visible = predict_visible_cells(bounds, scene.viewmats[scene.train_ids], scene.Ks[scene.train_ids],
                                    scene.width, scene.height, margin)
    mb = visible @ bounds.count.astype(np.float64) * 4 * param_columns(DEFAULT_SH_DEGREE) / 1e6
    return float(visible.mean()), float(mb.mean())


def run_part(scene, name: str, profile_name: str, multiple: int, gpu_counts, steps: int,
             host_sends: bool = False) -> dict:
    """Simulate every mode at each GPU count with batch = ``multiple`` x GPUs (``host_sends``: the sender's
    time on a host thread beside each GPU, ``CostProfile.host_sends``): {rows: [dict per GPU count],
    processor_seconds, peak_rss_mb, gaussians, generated, host_sends}."""
    t0 = time.process_time()
    profile = load_profile(profile_name, scene.total_gaussians, host_sends)
    rows = []
    for gpus in gpu_counts:
        batch = multiple * gpus
        if batch > len(scene.train_ids):  # stump: 109 training images, no batch of 128
            print(f"{name}: batch {batch} is more than the {len(scene.train_ids)} training images, not run")
            continue
        run = {m: simulate(scene, profile, m, gpus, steps, batch) for m in MODES}
        o, g = run["odin"], run["grendel"]
        rows.append({"gpus": gpus, "batch": batch, "cells": num_cells(scene.total_gaussians, gpus),
                     **{f"{m}_images_per_s": run[m].steps_per_second * batch for m in MODES},
                     "ceiling_images_per_s": o.ceiling_steps_per_second * batch,
                     "hidden_vs_grendel": hidden_vs_grendel(o.comm, o.wait, g.comm, g.wait),
                     "odin_seconds": o.seconds, "bound_seconds": o.bound_seconds,
                     "assigned_bound_seconds": o.assigned_bound_seconds,
                     "odin_compute": float(o.compute.sum()), "odin_exposed": exposed_seconds(o.comm, o.wait),
                     "grendel_exposed": exposed_seconds(g.comm, g.wait),
                     **{f"{m}_wait": run[m].wait_fraction for m in MODES},
                     **dict(zip(("read_share", "read_mb"), reads(scene, gpus, batch))),
                     "grendel_mb": g.bytes_sent / (steps * batch) / 1e6})
        print(f"{name} {profile_name} batch {batch} GPUs {gpus}: "
              + ", ".join(f"{m} {rows[-1][f'{m}_images_per_s']:.1f}" for m in MODES)
              + f" images/s, ceiling {rows[-1]['ceiling_images_per_s']:.1f}", flush=True)
    return {"scene": name, "profile": profile_name, "multiple": multiple, "steps": steps, "rows": rows,
            "gaussians": scene.total_gaussians, "generated": len(scene.means),
            "host_sends": host_sends, "processor_seconds": time.process_time() - t0,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "load_average": os.getloadavg()}


def part_path(directory: str, scene: str, profile: str, multiple: int) -> str:
    return os.path.join(directory, f"{scene}_{profile}_b{multiple}.json")


def table(parts: list) -> str:
    """The markdown table of all rows of ``parts`` (scene, profile, batch, GPUs order)."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + " --- |" * len(COLUMNS)]
    for part in parts:
        for r in part["rows"]:
            g = r["grendel_images_per_s"]
            cells_ = [part["scene"], part["profile"], f"{part['multiple']} x GPUs", r["gpus"], r["cells"],
                      *(f"{r[f'{m}_images_per_s']:.0f}" for m in MODES), f"{r['odin_images_per_s'] / g:.2f}",
                      f"{r['odin_images_per_s'] / r['barrier_images_per_s']:.2f}",
                      f"{r['ceiling_images_per_s'] / g:.2f}", f"{r['hidden_vs_grendel']:.2f}",
                      " / ".join(f"{hidden_at(r[k], r['gpus'], r['odin_compute'], 0.0, r['grendel_exposed']):.2f}"
                                 for k in ("assigned_bound_seconds", "bound_seconds")),
                      f"{r['odin_wait']:.3f}", f"{r['read_share']:.2f}",
                      f"{r['read_mb']:.0f} / {r['grendel_mb']:.1f}"]
            lines.append("| " + " | ".join(str(c) for c in cells_) + " |")
    return "\n".join(lines)


def verdict(values: list, target: float) -> str:
    """'lowest–highest: out of reach' when even the highest of ``values`` is below ``target``, else
    '...: within reach'."""
    return f"{min(values):.2f}–{max(values):.2f}: {'out of' if max(values) < target else 'within'} reach"


def reach(parts: list) -> str:
    """Per scene: the lowest and highest ceiling / grendel (over profiles and batches) at the GPU counts of
    Odin's targets and the best hidden vs grendel at the assigned bound (every row), and whether any
    schedule of odin's windows (with odin's assignment, for the hidden share) could reach each target."""
    heads = [f"ceiling ÷ grendel at {p} (target {t}×)" for p, t in TARGETS.items()]
    heads.append(f"best hidden vs grendel at the assigned bound (target {HIDDEN_TARGET})")
    lines = ["| scene | Gaussians (generated) | " + " | ".join(heads) + " | processor s | peak RSS GiB |",
             "|" + " --- |" * (5 + len(TARGETS))]
    for scene in dict.fromkeys(p["scene"] for p in parts):
        mine = [p for p in parts if p["scene"] == scene]
        cols = []
        for gpus, target in TARGETS.items():
            ratios = [r["ceiling_images_per_s"] / r["grendel_images_per_s"] for p in mine for r in p["rows"]
                      if r["gpus"] == gpus]
            cols.append(verdict(ratios, target) if ratios else "not run")
        cols.append(verdict([hidden_at(r["assigned_bound_seconds"], r["gpus"], r["odin_compute"], 0.0, r["grendel_exposed"])
                             for p in mine for r in p["rows"]], HIDDEN_TARGET))
        generated = f"{mine[0]['gaussians']:,}" + (f" ({mine[0]['generated']:,})"
                                                    if mine[0]["generated"] != mine[0]["gaussians"] else "")
        seconds = sum(p["processor_seconds"] for p in mine)
        rss = max(p["peak_rss_mb"] for p in mine) / 1024
        lines.append(f"| {scene} | {generated} | " + " | ".join(cols) + f" | {seconds:.0f} | {rss:.2f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scenes", default=",".join(SCENES), help="comma-separated presets")
    parser.add_argument("--profiles", default=",".join(PROFILES))
    parser.add_argument("--gpus", default=",".join(map(str, GPUS)))
    parser.add_argument("--batches", default="1,2", help="batch sizes as multiples of the GPUs")
    parser.add_argument("--steps", type=int, default=20, help="batches simulated per run")
    parser.add_argument("--generate", type=int,
                        help="a preset with more Gaussians is generated as a stand-in of about this many "
                             "(default: pregel simulate's, 2 million for a preset of more than 8 million)")
    parser.add_argument("--dir", default="grendel_compare", help="where each part's JSON is kept")
    parser.add_argument("--out", help="also write the markdown tables here")
    parser.add_argument("--table-only", action="store_true", help="simulate nothing; tables of the parts there")
    parser.add_argument("--max-gb", type=float, default=6.0, help="address-space cap of this process")
    parser.add_argument("--host-sends", action="store_true", help="the sender's time of odin's and barrier's "
                        "messages on a host thread beside each GPU (pregel simulate --host-sends); use its own --dir")
    args = parser.parse_args()
    cap = int(args.max_gb * 2 ** 30)
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    scenes, profiles = args.scenes.split(","), args.profiles.split(",")
    unknown = [s for s in scenes if s not in PRESETS]
    if unknown:
        raise SystemExit(f"grendel_compare: unknown scene(s) {','.join(unknown)}; presets: {', '.join(PRESETS)}")
    gpu_counts = [int(x) for x in args.gpus.split(",")]
    multiples = [int(x) for x in args.batches.split(",")]
    os.makedirs(args.dir, exist_ok=True)
    for name in ([] if args.table_only else scenes):
        todo = [(p, k) for p in profiles for k in multiples if not os.path.exists(part_path(args.dir, name, p, k))]
        if not todo:
            continue
        scene = odin_preset(name, gpu_counts, generated=args.generate)
        for profile, k in todo:
            part = run_part(scene, name, profile, k, gpu_counts, args.steps, args.host_sends)
            path = part_path(args.dir, name, profile, k)
            with open(path + ".tmp", "w") as f:
                json.dump(part, f, indent=1)
            os.replace(path + ".tmp", path)
    parts = [json.load(open(part_path(args.dir, s, p, k))) for s in scenes for p in profiles for k in multiples
             if os.path.exists(part_path(args.dir, s, p, k))]
    mixed = [f"{p['scene']}_{p['profile']}_b{p['multiple']}" for p in parts if p.get("host_sends", False) != args.host_sends]
    if mixed:
        raise SystemExit(f"grendel_compare: {args.dir} holds parts {'without' if args.host_sends else 'with'} "
                         f"--host-sends ({', '.join(mixed[:4])}): use another --dir")
    text = table(parts) + "\n\n" + reach(parts) + "\n"
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
