"""A rank's record of a distributed run: its time and traffic (``RankMetrics``), kept window by window with
its timeline's spans and labels (``RankRecord``), written to /metrics/per_rank (``RANK_FIELDS``) and
printed by ``pregel train --stats`` (``format_per_rank``)."""
import time
from dataclasses import dataclass, field, fields

import numpy as np

from odin_sched.odin.planner import image_ranks
from pregel.memory import peak_rss_bytes


@dataclass
class RankMetrics:
    """Time and traffic of one rank over the whole run."""

    compute_seconds: float = 0.0
    comm_seconds: float = 0.0
    wait_seconds: float = 0.0
    plan_seconds: float = 0.0
    processor_seconds: float = 0.0  # processor time (process_time) the rank used while training
    images: int = 0
    messages_sent: int = 0
    bytes_sent: int = 0
    peak_rss_bytes: int = 0    # the process's peak resident set (pregel.memory.peak_rss_bytes)
    model_bytes: int = 0       # peak bytes of Gaussian state held: owned state plus the window's cached cells
    window_end_bytes: int = 0  # bytes sent at window ends (losses, violation counts, cell metadata)
    images_let_go: int = 0     # images started before their batch's turn: the hold given up (--hold-share)
    spans: list = field(default_factory=list)

    def as_row(self) -> np.ndarray:
        """The counters [fields] in ``RANK_FIELDS`` order."""
        return np.array([getattr(self, name) for name in RANK_FIELDS], np.float64)


#: per-rank metrics written to /metrics/per_rank (the counters of ``RankMetrics``)
RANK_FIELDS = tuple(f.name for f in fields(RankMetrics) if f.name != "spans")


class RankRecord:
    """One rank's ``metrics`` and timeline ``labels`` (timeline step id -> label) over a run.

    rank: this rank; total_images: images of the whole run (steps x B; cell versions get timeline ids
    after them); tracing: whether spans are kept. Times are relative to ``start()``.
    """

    def __init__(self, rank: int, total_images: int, tracing: bool):
        self.rank, self.total_images, self.tracing = rank, total_images, tracing
        self.metrics = RankMetrics()
        self.labels = {}
        self.versions_seen = 0  # cell versions of the windows before this one (for timeline ids)
        self.started = None

    def start(self) -> float:
        """Mark the run's start (time 0 of the timeline); returns it (``time.perf_counter``)."""
        self.started = time.perf_counter()
        return self.started

    def planned(self, seconds: float, t0: float, t1: float, window) -> None:
        """The planning of ``window`` took ``seconds`` (in a thread or not); the trainer waited for it
        [t0, t1]."""
        self.metrics.plan_seconds += seconds
        self.metrics.wait_seconds += t1 - t0
        self.span("compute", t0, t1, f"plan steps {window.start + 1}-{window.stop}")

    def window_run(self, result, called: float, returned: float, window, updated: dict) -> None:
        """Add one window's dataflow run to the metrics. The run's clock starts after its opening
        barrier, whose time (``returned - called - elapsed``) is waiting too. updated: {version:
        Gaussians stepped}."""
        m = self.metrics
        m.compute_seconds += result.compute_seconds
        m.comm_seconds += result.comm_seconds
        m.wait_seconds += result.wait_seconds + max(0.0, returned - called - result.elapsed_seconds)
        m.images += int(np.count_nonzero(image_ranks(window) == self.rank))
        m.messages_sent += result.messages_sent
        m.bytes_sent += result.bytes_sent
        m.images_let_go += result.let_go
        if self.tracing and result.spans is not None:
            offset = returned - result.elapsed_seconds - self.started
            for kind, a, b, v in result.spans:
                m.spans.append((kind, a + offset, b + offset, self._step_id(window, v, updated)))
        self.versions_seen += window.steps.num_versions

    def window_ended(self, t0: float, t1: float, window, sent: int) -> None:
        """The window-end exchange [t0, t1] (communication) that sent ``sent`` bytes."""
        self.metrics.comm_seconds += t1 - t0
        self.metrics.window_end_bytes += sent
        self.span("send", t0, t1, f"metadata after step {window.stop}")

    def held(self, model_bytes: int) -> None:
        """The Gaussian state held at some point: keep the peak."""
        self.metrics.model_bytes = max(self.metrics.model_bytes, int(model_bytes))

    def finish(self) -> None:
        """Record the process's peak resident set so far (the ``per_rank`` closure of ``train_from_setup``
        calls it when the outputs are all but written: the figure includes that phase)."""
        self.metrics.peak_rss_bytes = peak_rss_bytes()

    def span(self, kind: str, t0: float, t1: float, label: str) -> None:
        """A timeline span outside the dataflow runs (planning, window boundaries), when tracing."""
        if self.tracing:
            step_id = -2 - len(self.labels)
            self.labels[step_id] = label
            self.metrics.spans.append((kind, t0 - self.started, t1 - self.started, step_id))

    def _step_id(self, window, vertex: int, updated: dict) -> int:
        """A run-wide id of a window's vertex for the timeline (-1 for none), labelled in ``self.labels``:
        images by their global index, cell versions after all images."""
        if vertex < 0:
            return -1
        steps = window.steps
        if steps.is_image(vertex):
            image = window.start * steps.batch_size + int(vertex)
            if image not in self.labels:
                self.labels[image] = (f"image {image} (step {image // steps.batch_size + 1}, camera "
                                      f"{int(steps.image_camera[vertex])}, renders "
                                      f"{int(window.image_rows[vertex])} Gaussians of "
                                      f"{int(steps.image_reads_indptr[vertex + 1] - steps.image_reads_indptr[vertex])} "
                                      f"cells)")
            return image
        version = int(steps.version_index(vertex))
        step_id = self.total_images + self.versions_seen + version
        batch = int(steps.version_batch[version])
        self.labels.setdefault(step_id, f"cell {int(steps.version_cell[version])} "
                                        + (f"after step {window.start + batch + 1} (sums "
                                           f"{int(window.version_writers[version])} images, steps "
                                           f"{updated.get(version, 0)} Gaussians)" if batch >= 0 else
                                           f"at step {window.start + 1}"))
        return step_id


def format_per_rank(result) -> str:
    """The per-rank time and traffic table of a distributed run's ``TrainResult``, and its speed."""
    header = "rank " + " ".join(f"{name:>15}" for name in RANK_FIELDS)
    rows = [f"{r:>4} " + " ".join(f"{v:>15.3f}" if "seconds" in name else f"{int(v):>15,}"
                                  for name, v in zip(RANK_FIELDS, row))
            for r, row in enumerate(result.per_rank)]
    return "\n".join([header, *rows, f"{result.steps / result.wall_time_s:.2f} steps/s, "
                                      f"{result.visibility_violations} visibility violations"])
