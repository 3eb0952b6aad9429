"""The ahead-of-time schedule of a window's steps, computed by vertex programs on the engine.

``plan_schedule`` loads the step graph (``odin_sched.odin.depgraph``) on every rank and runs

* ``Levels``: the number of edges on the longest path from any source to each vertex;
* ``CriticalPath`` (on the reversed graph): the heaviest cost path from each vertex to a sink,
  its own cost included, and with ``hop_cost`` each edge between two ranks priced as a transfer (the
  priority of a step: the work and the hops that still depend on it);
* ``Assignment``: the rank of every vertex (of ``num_ranks``); a cell version lives with its cell's owner, and the
  images of a batch are spread over the ranks by a deterministic greedy that keeps the batch
  balanced and prefers the rank owning the most bytes of the cells an image reads.

The results are gathered to every rank in global vertex order. Level and priority do not depend
on the number of ranks; the assignment is to ``num_ranks`` ranks (default ``comm.size``).
"""

from dataclasses import dataclass

import numpy as np

from odin_sched.odin.depgraph import StepGraph, check_costs, reversed_graph
from pregel.dgraph import ArraySource, load_graph
from pregel.engine import run
from pregel.errors import InputError
from pregel.job import gather_values
from pregel.program import VertexProgram


class Levels(VertexProgram):
    """level[v] = the number of edges on the longest path ending at v (0 at sources).

    Each vertex sends level + 1 along its out-edges while its level changes (max combiner).
    Output: int64 [N].
    """

    combiner = "max"

    def init(self, ctx):
        return np.zeros(ctx.num_local)

    def message(self, ctx, level):
        return level + 1.0

    def apply(self, ctx, level, gathered):
        new = np.maximum(level, gathered)
        return new, new > level

    def output(self, ctx, level):
        return level.astype(np.int64)


class CriticalPath(VertexProgram):
    """priority[v] = cost[v] + the largest of (priority[s] + edge cost of v -> s) over v's successors s,
    run on the *reversed* graph (successors are then in-neighbours): the bottom level. cost: [N]
    float64 by global vertex id; hops: None (edges cost nothing) or ``Hops``, what an edge between two
    ranks costs. Output: float64 [N].
    """

    combiner = "max"

    def __init__(self, cost: np.ndarray, hops: "Hops | None" = None):
        self.cost, self.hops = cost, hops

    @property
    def per_edge(self) -> bool:
        return self.hops is not None

    def edge_message(self, ctx, src_values, dst_values, weights):
        return src_values + self.hops.edge_cost(ctx.edge_dst, ctx.edge_src)  # reversed: dst -> src in the steps

    def check_input(self, ctx):
        if len(self.cost) != ctx.num_vertices:
            return f"CriticalPath got {len(self.cost)} costs for {ctx.num_vertices} vertices"
        return None

    def init(self, ctx):
        return self.cost[ctx.global_ids].copy()

    def message(self, ctx, priority):
        return priority

    def apply(self, ctx, priority, gathered):
        new = np.maximum(priority, self.cost[ctx.global_ids] + gathered)
        return new, new > priority


@dataclass
class Hops:
    """What an edge u -> v of a step graph costs on a critical path: ``latency`` + ``per_byte`` x the
    bytes of its cell (``cell_bytes`` [K], the cell of its version end: parameters one way, gradients the
    other) when ``rank`` [N] puts u and v on different ranks, else 0."""

    steps: StepGraph
    rank: np.ndarray
    cell_bytes: np.ndarray
    latency: float
    per_byte: float

    def edge_cost(self, u: np.ndarray, v: np.ndarray) -> np.ndarray:
        """[E] float64 cost of the edges ``u`` [E] -> ``v`` [E] (global vertex ids)."""
        version = np.where(self.steps.is_image(v), u, v)  # every edge has a cell version end
        cell = self.steps.version_cell[self.steps.version_index(version)]
        remote = self.rank[u] != self.rank[v]
        return np.where(remote, self.latency + self.per_byte * self.cell_bytes[cell], 0.0)


class Assignment(VertexProgram):
    """The rank of every vertex of a step graph, in two supersteps.

    Superstep 0: each cell version sends ``one_hot(owner) · cell_bytes`` ([P] wide, summed) to the
    images that read it, so each image learns its affinity row [P] (bytes of its cells each rank
    owns) and contributes it to the ``affinity`` aggregator ([I, P], rows by image). Superstep 1:
    every rank runs ``greedy_assignment`` on the same aggregated matrix and each image keeps its
    rank. Versions: rank = cell_owner[cell]. Output: int64 [N].
    """

    combiner = "sum"

    def __init__(self, step_graph: StepGraph, image_cost, cell_bytes, cell_owner, num_ranks: int):
        # image_cost [I] float64; cell_bytes [K] float64; cell_owner [K] int64 in [0, num_ranks)
        self.steps, self.image_cost = step_graph, image_cost
        self.cell_bytes, self.cell_owner, self.num_ranks = cell_bytes, cell_owner, num_ranks

    def init(self, ctx):
        ids, rank = ctx.global_ids, np.full(ctx.num_local, -1, np.int64)
        version = ~self.steps.is_image(ids)
        rank[version] = self.cell_owner[self.steps.version_cell[self.steps.version_index(ids[version])]]
        return rank

    def message(self, ctx, rank):
        if ctx.superstep > 0:
            return None
        ids = ctx.global_ids
        version = ~self.steps.is_image(ids)
        row = np.zeros((ctx.num_local, self.num_ranks))
        cells = self.steps.version_cell[self.steps.version_index(ids[version])]
        row[np.flatnonzero(version), rank[version]] = self.cell_bytes[cells]
        return row, version

    def apply(self, ctx, rank, gathered):
        ids = ctx.global_ids
        image = self.steps.is_image(ids)
        if ctx.superstep == 0:
            affinity = np.zeros((self.steps.num_images, self.num_ranks))
            affinity[ids[image]] = gathered[image]
            ctx.aggregate("affinity", affinity)
            return rank, True
        shape = (self.steps.num_batches, self.steps.batch_size)
        chosen = greedy_assignment(self.image_cost.reshape(shape),
                                   ctx.aggregated["affinity"].reshape(shape + (self.num_ranks,))).ravel()
        rank = rank.copy()
        rank[image] = chosen[ids[image]]
        return rank, False


def greedy_assignment(cost: np.ndarray, affinity: np.ndarray) -> np.ndarray:
    """Ranks [S, B] of the images of S batches, each batch on its own.

    cost: [S, B] predicted cost per image; affinity: [S, B, P] bytes of the image's cells each rank
    owns. Per batch, images go in order of decreasing cost (ties: by position); each goes to the
    rank of highest affinity among those whose load after adding it stays at most
    ``max(batch_total / P, smallest load + cost)``; ties: lowest load, then lowest rank. So every
    batch's largest load is at most ``batch_total / P + its largest cost``. Vectorised over batches.
    """
    num_batches, batch_size, size = affinity.shape
    rows = np.arange(num_batches)
    order = np.argsort(-cost, axis=1, kind="stable")
    share = cost.sum(axis=1) / size
    loads = np.zeros((num_batches, size))
    ranks = np.empty((num_batches, batch_size), np.int64)
    for turn in range(batch_size):
        image = order[:, turn]
        c = cost[rows, image]
        bound = np.maximum(share, loads.min(axis=1) + c)
        allowed = loads + c[:, None] <= bound[:, None]
        near = affinity[rows, image]
        best = np.where(allowed, near, -np.inf).max(axis=1)
        candidate = allowed & (near == best[:, None])
        lightest = np.where(candidate, loads, np.inf).min(axis=1)
        choice = np.argmax(candidate & (loads == lightest[:, None]), axis=1)
        loads[rows, choice] += c
        ranks[rows, image] = choice
    return ranks


@dataclass
class Schedule:
    """The plan of a window, per vertex of its step graph (global order).

    level [N] int64: longest path (edges) from a source (None when not asked for: the runtime's windows
    do not use it, only ``--schedule-out`` writes it); priority [N] float64: heaviest cost path
    to a sink; rank [N] int64: the rank that runs or holds the vertex; phase [N] int64: the
    bulk-synchronous phase (images of batch b 2b, versions of batch b 2b + 1, initial versions -1).
    """

    level: np.ndarray | None
    priority: np.ndarray
    rank: np.ndarray
    phase: np.ndarray


def plan_schedule(comm, step_graph: StepGraph, image_cost: np.ndarray, cell_bytes: np.ndarray,
                  cell_owner: np.ndarray, version_cost: np.ndarray | None = None,
                  num_ranks: int | None = None, hop_cost: tuple = (0.0, 0.0), levels: bool = True) -> Schedule:
    """Plan a window's schedule (collective; the same result on every rank).

    image_cost: [I] predicted cost of each image step; cell_bytes: [K] size of each cell;
    cell_owner: [K] int rank in ``[0, num_ranks)`` owning each cell; version_cost: [V] update cost
    of each cell version (default 0); num_ranks: the ranks to assign to (default ``comm.size``; the
    simulator plans for many virtual GPUs on one process); hop_cost: (per edge, per byte of its cell)
    that an edge between two ranks adds to a path in the priority (``Hops``; in the costs' units);
    levels: whether to run ``Levels`` (else ``Schedule.level`` is None). Level does not depend on
    num_ranks; the priority does only through hop_cost.
    """
    num_ranks = comm.size if num_ranks is None else int(num_ranks)
    error, inputs = None, None
    try:
        if num_ranks < 1:
            raise InputError(f"num_ranks must be at least 1, got {num_ranks}")
        inputs = _checked(num_ranks, step_graph, image_cost, cell_bytes, cell_owner, version_cost)
    except InputError as err:
        error = err
    comm.agree(error)
    image_cost, cell_bytes, cell_owner, cost = inputs
    graph = load_graph(comm, ArraySource(step_graph.graph), "range")
    level = _everywhere(graph, run(graph, Levels()).values) if levels else None
    rank = _everywhere(graph, run(graph, Assignment(step_graph, image_cost, cell_bytes, cell_owner,
                                                    num_ranks)).values)
    reverse = load_graph(comm, ArraySource(reversed_graph(step_graph.graph)), "range")
    hops = Hops(step_graph, rank, cell_bytes, *map(float, hop_cost)) if any(hop_cost) else None
    priority = _everywhere(reverse, run(reverse, CriticalPath(cost, hops)).values)
    return Schedule(level, priority, rank, step_graph.phase())


def _checked(size, step_graph, image_cost, cell_bytes, cell_owner, version_cost):
    """The inputs of ``plan_schedule`` checked and converted; the vertex cost [N] last."""
    image_cost = check_costs(image_cost, step_graph.num_images, "image_cost")
    cell_bytes = check_costs(cell_bytes, step_graph.num_cells, "cell_bytes")
    num_versions = step_graph.num_versions
    version_cost = (np.zeros(num_versions) if version_cost is None
                    else check_costs(version_cost, num_versions, "version_cost"))
    owner = np.asarray(cell_owner)
    if owner.shape != (step_graph.num_cells,) or not np.issubdtype(owner.dtype, np.integer):
        raise InputError(f"cell_owner must be [{step_graph.num_cells}] integer ranks, got {owner.dtype} "
                         f"{owner.shape}")
    if owner.size and (owner.min() < 0 or owner.max() >= size):
        raise InputError(f"cell_owner holds ranks outside [0, {size})")
    return image_cost, cell_bytes, owner.astype(np.int64), np.concatenate([image_cost, version_cost])


def _everywhere(graph, values: np.ndarray) -> np.ndarray:
    """Every rank's ``values`` [n, ...] in global vertex order [N, ...], on every rank."""
    return graph.comm.bcast(gather_values(graph, values))
