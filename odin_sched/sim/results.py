"""A simulated run's result (``SimResult``), the table ``pregel simulate`` prints and the file it writes."""
from dataclasses import dataclass, field

import numpy as np

from odin_sched.odin.options import OdinOptions
from odin_sched.sim.costmodel import CostProfile
from odin_sched.sim.grendel import hidden_vs_grendel
from odin_sched.sim.presets import published_grendel_steps


@dataclass
class SimResult:
    """One simulated run: seconds per rank and in all, and the dependency graph's parallelism."""

    mode: str
    gpus: int
    steps: int
    seconds: float
    compute: np.ndarray   # [P] seconds
    comm: np.ndarray      # [P]
    wait: np.ndarray      # [P]
    plan_seconds: float
    parallelism: float
    stale_reads: int = 0
    max_staleness_seen: int = 0
    spans: list = field(default_factory=list)  # per rank: [(kind, start, end, vertex)] of the first window
    traced: object = None  # with trace: the first window's plan (a ``planner.Window``)
    arrivals: np.ndarray | None = None  # with trace: [m, 3] (rank, source vertex, seconds) of its messages
    bound_seconds: float = 0.0  # no schedule of these windows can take less (see ``simulate``)
    assigned_bound_seconds: float = 0.0  # nor any with their assignment (``bounds.assigned_bound``)
    window: int = OdinOptions.window  # batches per planning window
    bytes_sent: float = 0.0  # bytes between GPUs (grendel: its all-to-alls)
    memory_bytes: float = 0.0  # the most bytes of model state one GPU holds (owned + cached; buffers)
    migration_bytes: float = 0.0  # bytes of cells moved between owners at window ends (sharded profiles)
    migration_seconds: float = 0.0  # seconds those moves took, on the critical path
    migrated_cells: int = 0  # cells moved
    messages_sent: float = 0.0  # messages between GPUs, summed over GPUs and windows (odin's modes)
    planning_wait: float = 0.0  # GPU-seconds of ``wait`` spent on planning that outlasted a window (sharded)

    @property
    def steps_per_second(self) -> float:
        return self.steps / self.seconds

    @property
    def ceiling_steps_per_second(self) -> float:
        """The most steps/s any schedule of the same windows could reach: per window, the larger of
        its work over the processors and its critical path, plus the window-end costs every mode pays."""
        return self.steps / self.bound_seconds if self.bound_seconds else 0.0

    @property
    def assigned_ceiling_steps_per_second(self) -> float:
        """The most steps/s any schedule of the same windows with the same assignment could reach: per
        window the larger of the ceiling's terms, the busiest rank's time and the heaviest path with every
        edge between two ranks charged its message's transfer (``bounds.assigned_bound``), plus the same
        window-end costs."""
        return self.steps / self.assigned_bound_seconds if self.assigned_bound_seconds else 0.0

    @property
    def wait_fraction(self) -> float:
        return float(self.wait.sum() / (self.gpus * self.seconds))


def write_results(path, gpu_counts, results: dict, profile: CostProfile, attrs: dict) -> None:
    """The simulate result file: /gpus, /steps_per_second/{mode}, /wait_fraction/{mode}, /window/{mode},
    /memory_per_gpu/{mode} (bytes; with a sharded profile or grendel), /plan_seconds_per_window/{mode}
    (this machine's wall time of ``plan_cells``; 0 for grendel),
    /speedup_vs_barrier, /hidden_fraction, /ceiling_steps_per_second, /ceiling_vs_barrier, /parallelism,
    /stale_reads, /max_staleness_seen, and with grendel: /speedup_vs_grendel/{mode} for the other modes,
    /hidden_vs_grendel (odin), and for a Mip360 preset with batch = GPUs /published_grendel/{gpus,
    steps_per_second} (Grendel-GS's README); the cost profile and ``attrs`` as root attributes."""
    import h5py

    from pregel.atomic import atomic_output

    by = {m: results[m] for m in results}
    with atomic_output(path, ".h5") as temp, h5py.File(temp, "w") as f:
        f.create_dataset("gpus", data=np.asarray(gpu_counts, np.int64))
        for m, runs in by.items():
            f.create_dataset(f"steps_per_second/{m}", data=[x.steps_per_second for x in runs])
            f.create_dataset(f"wait_fraction/{m}", data=[x.wait_fraction for x in runs])
            f.create_dataset(f"wait_seconds/{m}", data=[x.wait.sum() for x in runs])
            f.create_dataset(f"window/{m}", data=[x.window for x in runs])
            f.create_dataset(f"memory_per_gpu/{m}", data=[x.memory_bytes for x in runs])
            f.create_dataset(f"plan_seconds_per_window/{m}", data=[x.plan_seconds / -(-x.steps // x.window)
                                                                  for x in runs])
        if "odin" in by and "barrier" in by:
            f.create_dataset("speedup_vs_barrier", data=[o.steps_per_second / b.steps_per_second
                                                         for o, b in zip(by["odin"], by["barrier"])])
            f.create_dataset("hidden_fraction", data=[hidden_fraction(o, b) for o, b in zip(by["odin"], by["barrier"])])
            f.create_dataset("ceiling_steps_per_second", data=[o.ceiling_steps_per_second for o in by["odin"]])
            f.create_dataset("ceiling_vs_barrier", data=[o.ceiling_steps_per_second / b.steps_per_second
                                                         for o, b in zip(by["odin"], by["barrier"])])
        if "grendel" in by:
            for m in (m for m in by if m != "grendel"):
                f.create_dataset(f"speedup_vs_grendel/{m}", data=[x.steps_per_second / g.steps_per_second
                                                                  for x, g in zip(by[m], by["grendel"])])
            if "odin" in by:
                f.create_dataset("hidden_vs_grendel", data=[hidden_vs_grendel(o.comm, o.wait, g.comm, g.wait)
                                                            for o, g in zip(by["odin"], by["grendel"])])
        first = next(iter(by.values()))
        f.create_dataset("parallelism", data=[x.parallelism for x in first])
        if "odin-fast" in by:
            f.create_dataset("stale_reads", data=[x.stale_reads for x in by["odin-fast"]])
            f.create_dataset("max_staleness_seen", data=[x.max_staleness_seen for x in by["odin-fast"]])
        gpus, speed = published_grendel_steps(str(attrs.get("layout", "")))
        if gpus and not attrs.get("batch_size"):  # published runs with batch = GPUs, as this one
            f.create_dataset("published_grendel/gpus", data=np.asarray(gpus, np.int64))
            f.create_dataset("published_grendel/steps_per_second", data=np.asarray(speed))
        for k, v in {**_profile_attrs(profile), **attrs}.items():
            f.attrs[k] = v


def hidden_fraction(odin: SimResult, barrier: SimResult) -> float:
    """1 - wait_odin / wait_barrier (summed over GPUs); 0 when the barrier run never waits."""
    total = barrier.wait.sum()
    return float(1.0 - odin.wait.sum() / total) if total > 0 else 0.0


def _profile_attrs(profile: CostProfile) -> dict:
    from dataclasses import asdict

    return {f"profile_{k}": (list(v) if isinstance(v, tuple) else v) for k, v in asdict(profile).items()
            if v is not None}  # HDF5 has no None: a profile without the term has no attribute for it


def format_table(gpu_counts, results: dict) -> str:
    """The printed table: steps/s and wait fraction per mode, speedup, hidden fraction, ceiling,
    parallelism and the window each mode ran with."""
    modes = list(results)
    head = "GPUs " + " ".join(f"{m + ' st/s':>15} {m + ' wait':>15}" for m in modes)
    if "odin" in results and "barrier" in results:
        head += f" {'odin/barrier':>12} {'hidden':>7} {'ceiling/barrier':>15}"
    if "odin" in results and "grendel" in results:
        head += f" {'odin/grendel':>12} {'hidden vs grendel':>17} {'ceiling/grendel':>15}"
    head += f" {'parallelism':>11} {'windows ' + '/'.join(modes):>20}"
    lines = [head]
    for i, p in enumerate(gpu_counts):
        row = f"{p:>4} " + " ".join(f"{results[m][i].steps_per_second:>15.2f} {results[m][i].wait_fraction:>15.3f}"
                                    for m in modes)
        if "odin" in results and "barrier" in results:
            o, b = results["odin"][i], results["barrier"][i]
            row += (f" {o.steps_per_second / b.steps_per_second:>12.3f} {hidden_fraction(o, b):>7.3f}"
                    f" {o.ceiling_steps_per_second / b.steps_per_second:>15.3f}")
        if "odin" in results and "grendel" in results:
            o, g = results["odin"][i], results["grendel"][i]
            row += (f" {o.steps_per_second / g.steps_per_second:>12.3f} "
                    f"{hidden_vs_grendel(o.comm, o.wait, g.comm, g.wait):>17.3f}"
                    f" {o.ceiling_steps_per_second / g.steps_per_second:>15.3f}")
        row += f" {results[modes[0]][i].parallelism:>11.1f} {'/'.join(str(results[m][i].window) for m in modes):>20}"
        lines.append(row)
    return "\n".join(lines)
