"""The status file of a training run, read by the dashboard (``pregel view --watch``, ``--dashboard``).

The trainers write ``OUT.status.json`` beside their output ``OUT.h5`` (and ``OUT.status.png``, the
first held-out view beside its ground truth, at evaluation points), each atomically (a temporary file,
then a rename), so a reader never sees half a file and a crashed or finished run keeps its last state.
Written at evaluation points, at the end and otherwise at most every ``EVERY_SECONDS`` (at Odin window
ends or single-process step ends), the JSON holds::

    run            {mode, ranks, steps, batch_size, scene, out}
    step, done, wall_s, images_per_s, num_gaussians, loss (the last step's)
    loss_curve     {steps, values}: the loss per step, averaged over at most CURVE_POINTS bins
    psnr           {steps, values}: held-out PSNR at each evaluation so far
    ranks          Odin only: {fields, rows [ranks][fields]} time and traffic per rank so far, and
                   timeline {kinds, spans [[rank, kind, start_s, end_s], ...]} of the latest window
"""
import json
import os
import time

import numpy as np

from pregel.atomic import atomic_output

EVERY_SECONDS = 1.0
CURVE_POINTS = 400
SPAN_KINDS = ("compute", "send", "recv", "wait", "barrier")
STATUS_SUFFIX = ".status.json"


def status_paths(out_path) -> tuple[str, str]:
    """(status JSON, held-out PNG) paths of a run writing ``out_path``."""
    stem = os.path.splitext(os.fspath(out_path))[0]
    return stem + STATUS_SUFFIX, stem + ".status.png"


def latest_status(folder) -> str | None:
    """The most recently written status JSON in ``folder`` (None when there is none)."""
    names = [os.path.join(folder, n) for n in os.listdir(folder) if n.endswith(STATUS_SUFFIX)]
    return max(names, key=os.path.getmtime) if names else None


def loss_curve(losses: np.ndarray) -> dict:
    """{steps, values}: ``losses`` [S] (step 1..S) as at most CURVE_POINTS bin means at the bins' last steps."""
    n = len(losses)
    edges = np.unique(np.linspace(0, n, min(n, CURVE_POINTS) + 1).round().astype(np.int64))
    sums = np.add.reduceat(losses, edges[:-1]) if n else np.zeros(0)
    return {"steps": edges[1:].tolist(), "values": (sums / np.diff(edges)).tolist()}


def window_spans(comm, spans) -> list | None:
    """Every rank's dataflow spans of one window (``DataflowResult.spans``) as
    [[rank, kind index in SPAN_KINDS, start_s, end_s], ...] on rank 0 (collective; None elsewhere)."""
    rows = np.array([[comm.rank, SPAN_KINDS.index(s.kind), s.start, s.end] for s in spans or ()],
                    np.float64).reshape(-1, 4)
    table = comm.gather_rows(rows)
    return None if table is None else [[int(r), int(k), round(a, 6), round(b, 6)] for r, k, a, b in table]


class TrainStatus:
    """Writes the status file of the run writing ``out_path`` (see the module docstring)."""

    def __init__(self, out_path, mode: str, ranks: int, steps: int, batch_size: int, scene_path):
        self.json_path, self.png_path = status_paths(out_path)
        self.run = {"mode": mode, "ranks": ranks, "steps": steps, "batch_size": batch_size,
                    "scene": os.path.basename(os.fspath(scene_path)), "out": os.path.basename(os.fspath(out_path))}
        self.last_write = -np.inf

    def due(self, force: bool = False) -> bool:
        """Whether ``update`` would write now."""
        return force or time.perf_counter() - self.last_write >= EVERY_SECONDS

    def update(self, step: int, losses: np.ndarray, psnr_steps: list, psnr_values: list, num_gaussians: int,
               wall_s: float, force: bool = False, view=None, ranks: dict | None = None) -> None:
        """Write the status after ``step`` steps if ``force`` or EVERY_SECONDS have passed since the last.

        losses: [>= step] loss per step; view: None, or a function writing the held-out view's PNG to
        the path it is given; ranks: Odin's per-rank dict (see the module docstring).
        """
        if not self.due(force):
            return
        self.last_write = time.perf_counter()
        if view is not None:
            with atomic_output(self.png_path, ".png") as temp:
                view(temp)
        status = {"run": self.run, "step": int(step), "done": step >= self.run["steps"], "wall_s": wall_s,
                  "images_per_s": step * self.run["batch_size"] / wall_s if wall_s > 0 else 0.0,
                  "num_gaussians": int(num_gaussians), "loss": float(losses[step - 1]),
                  "loss_curve": loss_curve(np.asarray(losses[:step], np.float64)),
                  "psnr": {"steps": [int(s) for s in psnr_steps], "values": [float(v) for v in psnr_values]},
                  "has_view": os.path.exists(self.png_path)}
        if ranks is not None:
            status["ranks"] = ranks
        with atomic_output(self.json_path, ".json") as temp, open(temp, "w") as f:
            json.dump(status, f)
