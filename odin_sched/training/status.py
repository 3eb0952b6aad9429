"""The status file of a training run, read by the dashboard (``pregel view --watch``, ``--dashboard``).

The trainers write ``OUT.status.json`` beside their output ``OUT.h5`` (and ``OUT.status.png``, the
first held-out view beside its ground truth, at evaluation points), each atomically (a temporary file,
then a rename), so a reader never sees half a file and a crashed or finished run keeps its last state.
Written at evaluation points, at the end and otherwise at most every ``EVERY_SECONDS`` (at Odin window
ends or single-process step ends). The training thread only hands the numbers (and the held-out view
that the evaluation rendered anyway) to a writer thread, which builds the JSON, encodes the PNG and
writes them; a status not yet written when a newer one comes is replaced by it (its view kept). A
write that fails is one warning line, once, and training goes on. The JSON holds::

    run            {mode, ranks, steps, batch_size, scene, out}
    step, done, wall_s, images_per_s, num_gaussians, loss (the last step's)
    loss_curve     {steps, values}: the loss per step, averaged over at most CURVE_POINTS bins
    psnr           {steps, values}: held-out PSNR at each evaluation so far
    ranks          Odin only: {fields, rows [ranks][fields]} time and traffic per rank so far, and
                   timeline {kinds, spans [[rank, kind, start_s, end_s], ...]} of the latest window
"""
import atexit
import json
import os
import threading
import time

import numpy as np

from pregel.atomic import atomic_output
from pregel.errors import warn

EVERY_SECONDS = 2.0
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
    """Writes the status file of the run writing ``out_path`` (see the module docstring) from a writer thread."""

    def __init__(self, out_path, mode: str, ranks: int, steps: int, batch_size: int, scene_path):
        self.json_path, self.png_path = status_paths(out_path)
        self.run = {"mode": mode, "ranks": ranks, "steps": steps, "batch_size": batch_size,
                    "scene": os.path.basename(os.fspath(scene_path)), "out": os.path.basename(os.fspath(out_path))}
        self.last_write = -np.inf
        self._pending = None    # (status fields, losses, view): the newest status not yet taken by the writer
        self._busy = False      # the writer is writing one
        self._failed = False
        self._closed = False
        self._cond = threading.Condition()
        self._thread = None
        self.writer_seconds = 0.0  # processor seconds of the ended writer threads (time.thread_time)

    def due(self, force: bool = False) -> bool:
        """Whether ``update`` would write now."""
        return force or time.perf_counter() - self.last_write >= EVERY_SECONDS

    def update(self, step: int, losses: np.ndarray, psnr_steps: list, psnr_values: list, num_gaussians: int,
               wall_s: float, force: bool = False, view=None, ranks: dict | None = None) -> None:
        """Have the status after ``step`` steps written if ``force`` or EVERY_SECONDS have passed since the last.

        losses: [>= step] loss per step; view: None, or a function writing the held-out view's PNG to
        the path it is given (run on the writer thread); ranks: Odin's per-rank dict (see the module docstring).
        """
        if not self.due(force):
            return
        self.last_write = time.perf_counter()
        status = {"run": self.run, "step": int(step), "done": step >= self.run["steps"], "wall_s": wall_s,
                  "images_per_s": step * self.run["batch_size"] / wall_s if wall_s > 0 else 0.0,
                  "num_gaussians": int(num_gaussians), "loss": float(losses[step - 1]),
                  "psnr": {"steps": [int(s) for s in psnr_steps], "values": [float(v) for v in psnr_values]}}
        if ranks is not None:
            status["ranks"] = ranks
        with self._cond:
            if self._pending is not None and view is None:
                view = self._pending[2]  # a replaced status's held-out view is still new
            self._pending = (status, np.array(losses[:step], np.float64), view)
            if self._thread is None:  # closed at the latest when the process exits (a crashed run's last status)
                self._thread = threading.Thread(target=self._write_loop, name="pregel-status", daemon=True)
                self._thread.start()
                atexit.register(self.close)
            self._cond.notify_all()

    def flush(self) -> None:
        """Wait until every status handed to ``update`` is written."""
        with self._cond:
            self._cond.wait_for(lambda: self._pending is None and not self._busy)

    def close(self) -> None:
        """Write what is pending and end the writer thread (``update`` starts a new one)."""
        with self._cond:
            thread, self._thread, self._closed = self._thread, None, True
            self._cond.notify_all()
        if thread is not None:
            thread.join()
            atexit.unregister(self.close)
        self._closed = False

    def _write_loop(self) -> None:
        try:
            self._write_pending()
        finally:
            self.writer_seconds += time.thread_time()  # this thread's whole processor time

    def _write_pending(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._pending is not None or self._closed)
                if self._pending is None:
                    return
                (status, losses, view), self._pending, self._busy = self._pending, None, True
            try:
                self._write(status, losses, view)
            except Exception as err:  # the run goes on without its dashboard
                if not self._failed:
                    warn(f"{self.json_path}: the dashboard's status file could not be written ({err})")
                self._failed = True
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def _write(self, status: dict, losses: np.ndarray, view) -> None:
        if view is not None:
            with atomic_output(self.png_path, ".png") as temp:
                view(temp)
        status = {**status, "loss_curve": loss_curve(losses), "has_view": os.path.exists(self.png_path)}
        text = json.dumps(status)  # one shot: C's encoder (json.dump encodes piecewise in Python, 3x the time)
        with atomic_output(self.json_path, ".json") as temp, open(temp, "w") as f:
            f.write(text)
