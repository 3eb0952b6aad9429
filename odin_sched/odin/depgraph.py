"""The dependency graph of the training steps of one planning window.

A window has S batches of B images (cameras); all images of a batch read the same parameters, then
every cell (a spatial group of Gaussians, K in all) touched by the batch gets one optimizer update.
The graph has two kinds of vertices:

* image steps ``i`` in ``[0, I)``, ``I = S · B``: image ``i`` is position ``i % B`` of batch ``i // B``;
* cell versions ``I + j``: version ``j`` is (cell c, batch b), the state of c after batch b's update,
  for every batch b that touches c (some image of b sees c), plus an initial version (c, -1) for
  every cell touched in the window. Versions are ordered by (cell, batch), so the versions of one
  cell are consecutive and the version a batch reads is the one just before the version it writes.

Edges: version (c, b_prev) → image i of batch b (i reads c; b_prev is the last batch before b
that touches c, or -1) and image i → version (c, b) (i's gradient for c), for every cell i sees.
Every edge goes from an earlier to a later *phase* (initial versions -1, images of batch b 2b, versions
of batch b 2b + 1), so the graph is a DAG.
"""

from dataclasses import dataclass

import h5py
import numpy as np

from pregel.atomic import atomic_output
from pregel.edge_order import sorted_unique
from pregel.errors import InputError
from pregel.generate import edges_to_csr
from pregel.graph_io import GraphData, write_graph


@dataclass
class StepGraph:
    """The step graph and the lookups a runtime needs.

    graph: the directed CSR over sources, N = I + V vertices; num_images I; batch_size B;
    num_cells K; image_camera, image_batch, image_position: [I] int64;
    version_cell, version_batch: [V] int64 (batch -1: the initial version);
    image_reads_indptr [I + 1], image_reads [R] int64: the version vertices each image reads,
    ascending cell; image_writes_indptr [I + 1], image_writes [R]: those it writes (same cells).
    """

    graph: GraphData
    num_images: int
    batch_size: int
    num_cells: int
    image_camera: np.ndarray
    image_batch: np.ndarray
    image_position: np.ndarray
    version_cell: np.ndarray
    version_batch: np.ndarray
    image_reads_indptr: np.ndarray
    image_reads: np.ndarray
    image_writes_indptr: np.ndarray
    image_writes: np.ndarray

    @property
    def num_vertices(self) -> int:
        return self.graph.num_nodes

    @property
    def num_batches(self) -> int:
        return self.num_images // self.batch_size

    @property
    def num_versions(self) -> int:
        return self.num_vertices - self.num_images

    @property
    def images(self) -> slice:
        """The vertex ids of the image steps (they come first), to slice an array over vertices [N]."""
        return slice(0, self.num_images)

    @property
    def versions(self) -> slice:
        """The vertex ids of the cell versions (after the images), to slice an array over vertices [N]."""
        return slice(self.num_images, self.num_vertices)

    def is_image(self, ids) -> np.ndarray:
        """Whether each vertex of ``ids`` [k] is an image step (else a cell version)."""
        return np.asarray(ids) < self.num_images

    def version_index(self, vertices) -> np.ndarray:
        """Version index [k] (into ``version_cell``, ``version_batch``) of the cell-version vertices [k]."""
        return np.asarray(vertices) - self.num_images

    def version_vertex(self, versions) -> np.ndarray:
        """Vertex ids [k] of the version indices [k] (the inverse of ``version_index``)."""
        return np.asarray(versions) + self.num_images

    def version_of(self, cell, batch) -> np.ndarray:
        """Vertex ids [k] of the versions (cell [k], batch [k]); -1 where no such version exists."""
        cell, batch = np.broadcast_arrays(np.asarray(cell, np.int64), np.asarray(batch, np.int64))
        keys = _version_key(self.version_cell, self.version_batch, self.num_batches)
        wanted = _version_key(cell, batch, self.num_batches)
        if not len(keys):
            return np.full(wanted.shape, -1, np.int64)
        at = np.minimum(np.searchsorted(keys, wanted), len(keys) - 1)
        return np.where(keys[at] == wanted, self.num_images + at, -1)

    def phase(self) -> np.ndarray:
        """Bulk-synchronous phase [N] int64: images of batch b 2b, versions of batch b 2b + 1,
        initial versions -1 (every edge goes to a later phase)."""
        return np.concatenate([2 * self.image_batch, np.where(self.version_batch < 0, -1,
                                                              2 * self.version_batch + 1)])


def _version_key(cell, batch, num_batches):
    """Sort key of versions: by cell, then batch (initial first)."""
    return cell * (num_batches + 1) + batch + 1


def build_step_graph(batches: np.ndarray, visible: np.ndarray) -> StepGraph:
    """Build the step graph of a window.

    batches: [S, B] int camera ids (image i is ``batches.ravel()[i]``); visible: [C, K] bool, the
    cells each camera may see. Raises ``InputError`` on shapes or camera ids out of range.
    """
    batches, visible = np.asarray(batches), np.asarray(visible)
    if batches.ndim != 2 or batches.shape[1] < 1 or not np.issubdtype(batches.dtype, np.integer):
        raise InputError(f"batches must be an [S, B] integer array with B >= 1, got {batches.dtype} "
                         f"{batches.shape}")
    if visible.ndim != 2 or visible.dtype != bool:
        raise InputError(f"visible must be a [C, K] bool array, got {visible.dtype} {visible.shape}")
    num_cameras, num_cells = visible.shape
    if batches.size and (batches.min() < 0 or batches.max() >= num_cameras):
        raise InputError(f"batches holds camera ids outside [0, {num_cameras})")
    num_batches, batch_size = batches.shape
    num_images = batches.size
    camera = batches.ravel().astype(np.int64)
    image_batch = np.arange(num_images, dtype=np.int64) // batch_size
    # (image, cell) pairs, by image then cell
    pair_image, pair_cell = np.nonzero(visible[camera])
    pair_batch = image_batch[pair_image]
    touched_cells = sorted_unique(pair_cell)
    keys = sorted_unique(np.concatenate([_version_key(pair_cell, pair_batch, num_batches),
                                         _version_key(touched_cells, -1, num_batches)]))
    version_cell, version_batch = keys // (num_batches + 1), keys % (num_batches + 1) - 1
    writes = num_images + np.searchsorted(keys, _version_key(pair_cell, pair_batch, num_batches))
    reads = writes - 1  # the previous version of the same cell (the initial one at worst)
    num_nodes = num_images + len(keys)
    indptr, indices = edges_to_csr(num_nodes, np.concatenate([reads, pair_image]),
                                   np.concatenate([pair_image, writes]))
    per_image = np.zeros(num_images + 1, np.int64)
    np.cumsum(np.bincount(pair_image, minlength=num_images), out=per_image[1:])
    return StepGraph(GraphData(indptr, indices, directed=True), num_images, batch_size, num_cells,
                     camera, image_batch, np.arange(num_images, dtype=np.int64) % batch_size,
                     version_cell, version_batch, per_image, reads, per_image.copy(), writes)


def reversed_graph(graph: GraphData) -> GraphData:
    """The transpose of ``graph`` (every edge u → v becomes v → u; weights and vertex data dropped)."""
    src = np.repeat(np.arange(graph.num_nodes, dtype=np.int64), np.diff(graph.indptr))
    indptr, indices = edges_to_csr(graph.num_nodes, graph.indices, src)
    return GraphData(indptr, indices, directed=True)


def check_costs(cost, count: int, name: str) -> np.ndarray:
    """``cost`` as float64 [count] after checking it is finite and non-negative (else ``InputError``)."""
    cost = np.asarray(cost, dtype=np.float64)
    if cost.shape != (count,):
        raise InputError(f"{name} must have shape ({count},), got {cost.shape}")
    if not np.isfinite(cost).all() or (cost < 0).any():
        raise InputError(f"{name} must be finite and non-negative")
    return cost


def critical_path(step_graph: StepGraph, cost: np.ndarray) -> float:
    """The cost of the heaviest path: cost [N] per vertex, summed along the path.

    A dynamic program over the phases (every edge goes to a later phase), vectorised per phase.
    """
    cost = check_costs(cost, step_graph.num_vertices, "cost")
    g = step_graph.graph
    src = np.repeat(np.arange(g.num_nodes, dtype=np.int64), np.diff(g.indptr))
    phase = step_graph.phase()
    finish = cost.copy()  # heaviest path ending at each vertex, its own cost included
    by_phase = np.argsort(phase[src], kind="stable")
    edge_src, edge_dst = src[by_phase], np.asarray(g.indices, np.int64)[by_phase]
    bounds = np.searchsorted(phase[edge_src], np.arange(-1, 2 * step_graph.num_batches + 1))
    reach = np.zeros(g.num_nodes)  # heaviest predecessor path of each vertex
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        np.maximum.at(reach, edge_dst[lo:hi], finish[edge_src[lo:hi]])
        done = np.unique(edge_dst[lo:hi])
        finish[done] = cost[done] + reach[done]
    return float(finish.max(initial=0.0))


def parallelism(step_graph: StepGraph, cost: np.ndarray) -> float:
    """Work / critical path: cost [N] per vertex (images: their predicted cost; versions: their
    update cost); work = cost.sum(). 0.0 when there is no work."""
    path = critical_path(step_graph, cost)
    return float(np.sum(cost)) / path if path > 0 else 0.0


def write_schedule(path, step_graph: StepGraph, schedule) -> None:
    """Write the step graph (the graph file format, so ``pregel inspect`` reads it) and the
    schedule, atomically: /steps/{camera,batch,position,rank,level,priority} [I] and
    /versions/{cell,batch,rank,level} [V]. ``schedule``: an ``odin_sched.odin.schedule.Schedule``."""
    for field in ("level", "priority", "rank"):
        if len(getattr(schedule, field)) != step_graph.num_vertices:
            raise ValueError(f"schedule.{field} has {len(getattr(schedule, field))} rows, "
                             f"expected {step_graph.num_vertices}")
    images, versions = step_graph.images, step_graph.versions
    datasets = {
        "steps/camera": step_graph.image_camera, "steps/batch": step_graph.image_batch,
        "steps/position": step_graph.image_position, "steps/rank": schedule.rank[images],
        "steps/level": schedule.level[images], "steps/priority": schedule.priority[images],
        "versions/cell": step_graph.version_cell, "versions/batch": step_graph.version_batch,
        "versions/rank": schedule.rank[versions], "versions/level": schedule.level[versions],
    }
    with atomic_output(path, ".h5") as temp:
        write_graph(temp, step_graph.graph)
        with h5py.File(temp, "a") as f:
            for name, values in datasets.items():
                f.create_dataset(name, data=values)
