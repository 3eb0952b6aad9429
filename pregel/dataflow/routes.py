"""The deliveries of a plan as NumPy tables (``Routes``), built once the plan and the program's payload sizes
are checked.

The outputs of a vertex u to the vertices of one other rank travel as one message: a broadcasting u's payload
once, or the concatenation of a per-edge u's payloads in ascending destination id (no copy is made when they
already lie back to back in one array, in that order: ``Firing.route``); vertices on u's own rank get the
payload without MPI. Routing tables are built from the plan with NumPy; the run loops over fired vertices and
messages, and touches single edges only to hand ``fire`` its inputs.
"""

import numpy as np

from pregel.dataflow.plan import DataflowPlan, DataflowProgram
from pregel.edge_order import sorted_unique


class Routes:
    """The deliveries of a plan as NumPy tables, seen from rank ``me``.

    A group is (source u, destination rank r) with at least one out-neighbour of u on r; a group
    whose r is not u's rank is a message, tagged by its index among all messages in (u, r) order.
    Edges are sorted by (u, r, destination), so a group's edges and a vertex's groups are ranges.
    """

    def __init__(self, plan: DataflowPlan, program: DataflowProgram, size: int, me: int | None = None):
        n = plan.graph.num_nodes
        self.plan = plan
        src, dst = _check_plan(plan, size)
        sizes = np.asarray(program.payload_size(src, dst), dtype=np.int64).reshape(-1)
        self.broadcast = np.asarray(program.broadcasts(np.arange(n, dtype=np.int64)), dtype=bool).reshape(-1)
        _check_sizes(sizes, self.broadcast, src, dst)
        order = np.lexsort((dst, plan.rank[dst], src))
        self.src, self.dst, self.sizes = src[order], dst[order], sizes[order]
        key = self.src * size + plan.rank[self.dst]
        first = np.flatnonzero(np.diff(key, prepend=-1) != 0)
        self.group_ptr = np.append(first, len(key))  # [G + 1]: the edges of each group
        groups = len(first)
        self.group_of_edge = np.repeat(np.arange(groups), np.diff(self.group_ptr))
        self.group_src, self.group_rank = self.src[first], plan.rank[self.dst[first]]
        self.group_source_rank = plan.rank[self.group_src]
        per_edge = np.add.reduceat(self.sizes, first) if groups else np.zeros(0, np.int64)
        self.group_size = np.where(self.broadcast[self.group_src], self.sizes[first], per_edge)
        self.remote = self.group_source_rank != self.group_rank
        self.tag = np.where(self.remote, np.cumsum(self.remote) - 1, -1)
        self.num_messages = int(self.remote.sum())
        self.vertex_groups = np.searchsorted(self.group_src, np.arange(n + 1))  # [N + 1]
        before = np.cumsum(self.sizes) - self.sizes  # element offset of each edge within its group
        self.offset = np.where(self.broadcast[self.src], 0, before - before[first][self.group_of_edge])
        # a vertex's groups in sending order: the one whose most urgent reader has the highest priority first
        urgent = np.maximum.reduceat(plan.priority[self.dst], first) if groups else np.zeros(0)
        self.send_order = np.lexsort((np.arange(groups), -urgent, self.group_src))
        if me is not None:
            self.select(me)

    def select(self, me: int) -> "Routes":
        """Set the tables of rank ``me`` (its in-edges, its incoming and outgoing messages); returns self."""
        n, rank = self.plan.graph.num_nodes, self.plan.rank
        mine = np.flatnonzero(rank[self.dst] == me)
        mine = mine[np.lexsort((self.src[mine], self.dst[mine]))]  # my in-edges by (dst, src)
        self.in_ptr = np.searchsorted(self.dst[mine], np.arange(n + 1))  # [N + 1]
        self.in_src, self.in_group = self.src[mine], self.group_of_edge[mine]
        self.in_offset, self.in_size = self.offset[mine], self.sizes[mine]
        self.missing = np.bincount(self.dst[mine], minlength=n)  # distinct in-neighbours of mine
        self.uses = np.bincount(self.in_group, minlength=len(self.group_src))  # my edges reading each group
        self.incoming = np.flatnonzero(self.remote & (self.group_rank == me))  # by (u, source rank)
        self.outgoing = np.flatnonzero(self.remote & (self.group_source_rank == me))
        return self


def _check_plan(plan: DataflowPlan, size: int) -> tuple[np.ndarray, np.ndarray]:
    """The plan's distinct edges as (src, dst) [E] int64 sorted by (src, dst), after checking it."""
    graph, n = plan.graph, plan.graph.num_nodes
    for name in ("rank", "priority", "phase"):
        shape = np.shape(getattr(plan, name))
        if shape != (n,):
            raise ValueError(f"DataflowPlan.{name} must have shape ({n},), got {shape}")
    if n and (plan.rank.min() < 0 or plan.rank.max() >= size):
        raise ValueError(f"DataflowPlan.rank must lie in [0, {size}) for a job of {size} ranks")
    if plan.sequence is not None and (np.shape(plan.sequence) != (n,) or plan.lookahead < 0
                                      or (n and np.asarray(plan.sequence).min() < -1)):
        raise ValueError(f"DataflowPlan.sequence must have shape ({n},) with values >= -1 and lookahead >= 0, "
                         f"got shape {np.shape(plan.sequence)} and lookahead {plan.lookahead}")
    if not plan.hold_share >= 0:
        raise ValueError(f"DataflowPlan.hold_share must be at least 0 (math.inf: never), got {plan.hold_share}")
    src = np.repeat(np.arange(n, dtype=np.int64), np.diff(graph.indptr))
    key = sorted_unique(src * n + graph.indices.astype(np.int64))
    src, dst = key // max(n, 1), key % max(n, 1)
    bad = np.flatnonzero(plan.phase[src] >= plan.phase[dst])
    if bad.size:
        u, v = src[bad[0]], dst[bad[0]]
        raise ValueError(f"DataflowPlan.phase must increase along every edge, but edge {u} -> {v} goes "
                         f"from phase {plan.phase[u]} to {plan.phase[v]} (is the graph a DAG?)")
    return src, dst


def _check_sizes(sizes, broadcast, src, dst) -> None:
    if sizes.shape != src.shape or (sizes < 0).any():
        raise ValueError(f"payload_size must return [{len(src)}] sizes >= 0, got shape {sizes.shape}")
    if broadcast.shape != (len(broadcast),):
        raise ValueError("broadcasts must return one bool per vertex")
    first = sizes[np.searchsorted(src, src)]  # the size on each source's first out-edge
    bad = np.flatnonzero(broadcast[src] & (sizes != first))
    if bad.size:
        u = src[bad[0]]
        raise ValueError(f"payload_size: broadcasting vertex {u} has out-edges of different sizes "
                         f"({first[bad[0]]} and {sizes[bad[0]]} elements to vertex {dst[bad[0]]})")
