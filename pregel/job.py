"""One job from files to file: load a graph, run a vertex program, write ``/values`` and statistics.

The result file holds ``/values`` ([N] or [N, F], global vertex order), ``/original_ids`` [N] when
the graph file has ``/nodes/original_ids`` (a graph converted from tables), ``/stats/per_superstep``
([ranks, supersteps, fields], fields named in its ``fields`` attribute) and root attributes:
``algorithm``, ``ranks``, ``partitioner``, ``device``, ``supersteps``, ``stopped_by``, ``load_seconds``,
``compute_seconds`` (wall time of the superstep loop on rank 0), the hub settings ``hub_partial_gather``,
``hub_shadow_nodes``, ``hub_threshold`` (the degree above which a vertex was a hub, ``inf`` for none)
and ``hub_in_hubs`` (how many vertices' in-edges were gathered partially), with ``device='cuda'`` also
``cuda_aware_mpi`` and ``bytes_staged`` (summed over ranks), and, per statistic, its total and
its imbalance (max/mean over ranks); a job may add attributes and per-vertex datasets (``outputs``).
Rank 0 writes it from the gathered slices, atomically.
"""

import os
import time
from dataclasses import dataclass

import h5py
import numpy as np

from pregel.atomic import atomic_h5, check_writable
from pregel.dgraph import load_graph
from pregel.engine import RunResult, run
from pregel.errors import InputError
from pregel.graph_io import ORIGINAL_IDS
from pregel.stats import FIELDS, summarize

DEVICES = ("cpu", "cuda")


@dataclass
class JobReport:
    """What a job did, on every rank (``values`` and ``stats_table`` only on rank 0)."""

    result: RunResult
    graph: object
    load_seconds: float
    values: np.ndarray | None
    stats_table: np.ndarray | None  # [ranks, supersteps, fields]


def run_job(comm, graph_source, program, out_path=None, *, algorithm: str, partitioner: str = "range",
            max_supersteps: int | None = None, progress: bool = False, hubs=None,
            extra_attrs: dict | None = None, outputs=None, checkpoint=None, device: str = "cpu",
            ghost_memory: int | None = None) -> JobReport:
    """Load ``graph_source`` on every rank, run ``program``, and write the result to ``out_path``.

    ``hubs``: a ``pregel.dgraph.HubOptions`` (default: both hub strategies on).
    ``outputs``: optional ``f(report) -> (attrs, datasets)``, called on every rank after the run
    when there is an ``out_path``: more root attributes (rank 0's are written) and
    ``{name: local rows [n, ...]}`` written beside ``/values`` in global vertex order.
    ``checkpoint``: a ``pregel.checkpoint.Checkpointer`` (checkpoints and restart).
    ``device``: ``'cpu'`` (host arrays) or ``'cuda'``: each rank runs on its GPU
    (``pregel.device_path``; partial gather off, and what is not supported there yet, including
    ``hubs`` that ask for partial gather, is refused with one ``InputError``).
    ``ghost_memory``: ``pregel.engine.run``'s (None: its default).
    """
    problem = None
    try:
        if device not in DEVICES:
            raise InputError(f"device must be one of {', '.join(DEVICES)}, got {device!r}")
        if out_path is not None:
            check_writable(out_path)
    except InputError as err:
        problem = err
    comm.agree(problem)
    gpu = None
    if device == "cuda":
        from pregel.device_path import Gpu

        gpu, hubs = Gpu.open(comm, program, hubs, checkpoint)
    started = time.perf_counter()
    graph = load_graph(comm, graph_source, partitioner, symmetric=program.symmetric,
                       features=getattr(program, "uses_features", True), hubs=hubs)
    load_seconds = time.perf_counter() - started
    result = run(graph, program, max_supersteps, progress, checkpoint, device=gpu, ghost_memory=ghost_memory)
    device_attrs = {"device": device, **({} if gpu is None else gpu.attributes(comm))}
    values = gather_values(graph, result.values)
    table = comm.gather_rows(np.array([s.as_row() for s in result.stats]).reshape(-1, len(FIELDS)))
    if table is not None:
        table = table.reshape(comm.size, result.supersteps, len(FIELDS))
    report = JobReport(result, graph, load_seconds, values, table)
    if out_path is not None:
        more_attrs, datasets = outputs(report) if outputs is not None else ({}, {})
        datasets = {name: gather_values(graph, rows) for name, rows in datasets.items()}
        if comm.rank == 0:
            attrs = {"algorithm": algorithm, "ranks": comm.size, "partitioner": partitioner,
                     "supersteps": result.supersteps, "stopped_by": result.stopped_by,
                     "load_seconds": load_seconds, "compute_seconds": result.compute_seconds,
                     **graph.hub_attributes(), **device_attrs, **(extra_attrs or {}), **more_attrs}
            source = graph_source if isinstance(graph_source, (str, os.PathLike)) else None
            write_values(out_path, values, attrs, table, datasets, ids_from=source)
    comm.barrier()  # the file is complete when every rank returns
    return report


def gather_values(graph, values: np.ndarray) -> np.ndarray | None:
    """Every rank's ``values`` [n, ...] in global vertex order [N, ...] on rank 0 (None elsewhere)."""
    comm = graph.comm
    gathered = comm.gather_rows(np.ascontiguousarray(values))
    ids = comm.gather_rows(graph.owned)
    if comm.rank != 0:
        return None
    if np.array_equal(ids, np.arange(len(ids))):
        return gathered
    ordered = np.empty_like(gathered)
    ordered[ids] = gathered
    return ordered


def write_values(path, values: np.ndarray, attrs: dict, stats_table: np.ndarray,
                 datasets: dict | None = None, ids_from=None) -> None:
    """Write the result file (see the module docstring), atomically; ``datasets`` maps more
    dataset names to arrays [N, ...] in global vertex order. ``ids_from``: a graph file whose
    ``/nodes/original_ids`` (a converted table's vertex ids), if any, is copied as ``/original_ids``."""
    with atomic_h5(path) as f:
        f.create_dataset("values", data=values)
        if ids_from is not None:
            with h5py.File(ids_from, "r") as graph:
                if ORIGINAL_IDS in graph:
                    graph.copy(graph[ORIGINAL_IDS], f, "original_ids")
        for name, rows in (datasets or {}).items():
            f.create_dataset(name, data=rows)
        stats = f.create_dataset("stats/per_superstep", data=stats_table)
        stats.attrs["fields"] = list(FIELDS)
        for key, value in attrs.items():
            f.attrs[key] = value
        for key, value in summarize(stats_table).items():
            if not key.endswith("_per_rank"):
                f.attrs[f"stats_{key}"] = value
