"""Single-source shortest paths (delta-stepping in supersteps) and breadth-first search."""

import numpy as np

from kernels.local_paths import local_edge_count, local_out_edges, relax_locally
from pregel.program import Option, VertexProgram


class _FromSource(VertexProgram):
    """Shared by SSSP and BFS: distances start at 0 at the source, inf elsewhere; a vertex whose
    distance dropped is active and sends again; min-combined.

    A search still running after ``local_after`` supersteps (a graph of long paths: a mesh, a road
    network) switches, on host arrays and when ranks own both ends of at least ``LOCAL_SHARE`` of the
    edges, to relaxing each rank's own edges to their fixed point inside every superstep (Dijkstra
    from the rows whose distance dropped, ``kernels.local_paths``); then only the rows with edges to
    other ranks send, so supersteps count the hops between ranks. Power-law graphs finish before it
    (about 30 supersteps), where Dijkstra over the whole graph would be slower than the supersteps.
    A subclass that changes ``message`` or ``edge_message`` never switches (the relaxation adds the
    weights itself).
    """

    combiner = "min"
    uses_features = False  # /nodes/features are not loaded
    options = (Option("source", int, 0, "source vertex for sssp and bfs"),
               Option("local_after", int, 64, "after LOCAL_AFTER supersteps, sssp and bfs relax each rank's own "
                                              "edges to their fixed point in every superstep (when ranks own "
                                              "both ends of most edges; 0: from the start)"))
    #: the share of the edges, at least, whose both ends one rank owns for the switch to local relaxation
    #: (a range-partitioned mesh: 0.99 and more; by hash, or with ids in no spatial order: 1 / P)
    LOCAL_SHARE = 0.9

    def __init__(self, source: int, local_after: int = 64):
        self.source = source
        self.local_after = local_after  # supersteps before the switch to local relaxation
        self.may_go_local = False  # set by init: host arrays, LOCAL_SHARE of the edges local, own messages
        self.relaxing = False  # whether this superstep relaxes the rank's own edges
        self.local = None  # local_out_edges' arrays, built by the first superstep that relaxes
        self.sends_out = None  # [n] bool with them: the rows with out-edges this rank does not hold
        self.edge_totals = None  # set by init: ``_edge_totals``

    @property
    def rowwise(self) -> bool:
        """Until the switch a superstep on a small front runs on its rows alone; relaxing locally reads
        every owned row (read by the engine each superstep)."""
        return not self.relaxing

    @property
    def blockwise(self) -> bool:
        """After the switch: relaxing locally lowers rows that heard nothing this superstep."""
        return self.relaxing

    def check_input(self, ctx):
        if self.local_after < 0:
            return f"--local-after must be 0 or more, got {self.local_after}"
        if not 0 <= self.source < ctx.num_vertices:
            return f"{type(self).__name__}.source {self.source} is not a vertex (the graph has {ctx.num_vertices})"
        return None

    def init(self, ctx):
        self.edge_totals = totals = _edge_totals(ctx.graph)
        own_messages = (type(self).message in (ShortestPaths.message, BreadthFirst.message)
                        and type(self).edge_message is VertexProgram.edge_message)
        self.may_go_local = (ctx.xp is np and own_messages
                             and totals["local"] >= self.LOCAL_SHARE * totals["edges"])
        self.relaxing, self.local, self.sends_out = False, None, None
        self._switch_after(ctx, ctx.superstep)  # a run restored from a checkpoint switches as it did
        at_source = ctx.global_ids == self.source
        return ctx.xp.where(at_source, 0.0, np.inf), at_source

    def apply(self, ctx, dist, gathered):
        new = ctx.xp.minimum(dist, gathered)
        if self.relaxing:
            return new, self._relax_locally(ctx, dist, new)
        self._switch_after(ctx, ctx.superstep + 1)
        return new, new < dist

    def progress(self, ctx, aggregates) -> str:
        return "each rank's own edges relaxed locally" if self.local is not None else ""

    def _switch_after(self, ctx, superstep: int) -> None:
        """From the superstep after ``superstep`` on, relax locally (when allowed and due)."""
        self.relaxing = self.relaxing or (self.may_go_local and superstep >= self.local_after)

    def _relax_locally(self, ctx, dist, new):
        """[n] pending, after lowering ``new`` [n] in place by relaxing this rank's own edges from the
        rows whose distance dropped below ``dist`` [n] (every row: the switch turned ``rowwise`` off):
        the rows that dropped and have edges this rank does not hold (to other ranks' rows, or hub
        edges sent from here). Only they send: every other edge has been relaxed. The first call
        builds the out-edges, after the engine dropped its index for fronts (``HostPath.front``)."""
        if self.local is None:
            g = ctx.graph
            weights = g.in_weights if self.weighted else None  # bfs counts hops on a weighted graph too
            self.local = local_out_edges(g.in_indptr, g.in_indices, weights, g.num_local)
            self.sends_out = ctx.out_degree > np.diff(self.local[0])
        relax_locally(*self.local, new, np.flatnonzero(new < dist))
        return (new < dist) & self.sends_out


class ShortestPaths(_FromSource):
    """Distances along weighted out-edges (weight 1.0 where the file has none), by delta-stepping.

    Weights must be non-negative. Output: float64 [N], ``inf`` where unreachable. A vertex whose
    distance dropped is pending; each superstep only the pending vertices within ``delta`` of the
    smallest pending distance (a ``min`` aggregator) relax their out-edges, the rest wait. Far
    vertices would otherwise relax their edges again each time their distance drops (Bellman-Ford:
    on a 1000 x 1000 grid with random weights every edge about 50 times), while vertices close to
    the nearest pending one seldom drop again. ``delta`` = 0 takes 5 times the mean edge weight;
    ``inf`` is Bellman-Ford. Any ``delta`` gives the same distances: they are the fixed point
    ``dist[v] = min(dist[u] + w(u, v))``, whatever order the relaxations come in.

    Each edge's weight is added to the message in the engine's fused gather (``weight_op = 'add'``),
    with no message per edge. On a graph without weights every edge adds 1.0: the vertex sends
    ``dist + 1`` (as bfs), and every pending vertex lies at the same distance and sends.

    Long searches relax each rank's own edges locally (``_FromSource``).
    """

    weighted = True
    weight_op = "add"

    options = _FromSource.options + (
        Option("delta", float, 0.0, "sssp's window: the pending vertices within DELTA of the nearest "
                                    "one relax their edges each superstep (0: 5 x the mean edge weight; "
                                    "inf: Bellman-Ford)"),)
    #: the window ``delta`` = 0 takes, in mean edge weights: with weights uniform in (0, 1], a 1000 x 1000
    #: grid takes 4% more supersteps than Bellman-Ford and relaxes 35x fewer edges, and a power-law
    #: graph (distances shorter than the window) runs as Bellman-Ford (README, "Weighted searches")
    MEAN_WEIGHTS_IN_WINDOW = 5.0

    def __init__(self, source: int, delta: float = 0.0, local_after: int = 64):
        super().__init__(source, local_after)
        self.delta = delta
        self.unit_weights = False  # set by init: the graph has no /graph/weights
        self.window = np.inf  # set by init: delta, or its default from the weights

    def check_input(self, ctx):
        if not self.delta >= 0:  # NaN too
            return f"sssp's --delta must be 0 (its default) or more, got {self.delta}"
        if any(len(w) and w.min() < 0 for w in _weights(ctx.graph)):
            return "sssp needs non-negative edge weights; /graph/weights has negative values"
        return super().check_input(ctx)

    def init(self, ctx):
        dist, pending = super().init(ctx)
        totals = self.edge_totals
        self.unit_weights = not _weights(ctx.graph)
        self.window = self.delta or (np.inf if self.unit_weights else
                                     self.MEAN_WEIGHTS_IN_WINDOW * totals["weight_sum"] / max(1, totals["edges"]))
        _aggregate_nearest(ctx, dist, pending)
        return dist, pending

    def _sending(self, ctx, dist):
        """[k] bool: the pending rows within the window of the nearest pending distance (all of them
        once relaxing locally)."""
        if self.relaxing:
            return ctx.active
        nearest = ctx.aggregated.get(_NEAREST, np.inf)  # none known: all send
        return ctx.active & (dist <= nearest + self.window)

    def message(self, ctx, dist):
        values = dist + 1.0 if self.unit_weights else dist
        return values, self._sending(ctx, dist)

    def apply(self, ctx, dist, gathered):
        new = ctx.xp.minimum(dist, gathered)
        if self.relaxing:
            pending = self._relax_locally(ctx, dist, new)
        else:
            pending = (new < dist) | (ctx.active & ~self._sending(ctx, dist))
            self._switch_after(ctx, ctx.superstep + 1)
        _aggregate_nearest(ctx, new, pending)
        return new, pending

    def progress(self, ctx, aggregates) -> str:
        nearest = aggregates.get(_NEAREST, np.inf)
        notes = [] if np.isinf(nearest) else [f"nearest pending distance {nearest:.6g}"]
        return ", ".join(notes + [note for note in [super().progress(ctx, aggregates)] if note])


#: the aggregator that carries the smallest pending distance to the next superstep
_NEAREST = "sssp_nearest_pending"


def _aggregate_nearest(ctx, dist, pending) -> None:
    """Contribute the smallest of ``dist`` [k] where ``pending`` [k] to the ``_NEAREST`` minimum."""
    if len(dist):
        ctx.aggregate(_NEAREST, ctx.xp.where(pending, dist, np.inf).min(), "min")


def _weights(graph) -> list:
    """This rank's edge weights: [E_d] and [E_s] float32 (destination- and source-side edges), or []
    when the graph has none."""
    return [w for w in (graph.in_weights, graph.part_weights) if w is not None]


def _edge_totals(graph) -> dict:
    """Over the whole graph (a collective: every rank calls it): ``weight_sum`` of its edges' weights
    (0 without weights), ``edges``, and ``local``: the edges whose both ends one rank owns."""
    local = (sum(float(w.sum(dtype=np.float64)) for w in _weights(graph)), graph.num_local_edges,
             local_edge_count(graph.in_indices, graph.num_local))
    totals = np.sum(graph.comm.allgather(local), axis=0)
    return {"weight_sum": float(totals[0]), "edges": int(totals[1]), "local": int(totals[2])}


class BreadthFirst(_FromSource):
    """Hop counts from the source along out-edges. Output: int64 [N], −1 where unreachable."""

    def message(self, ctx, dist):
        return dist + 1.0

    def output(self, ctx, dist):
        xp = ctx.xp
        return xp.astype(xp.where(xp.isinf(dist), -1, dist), xp.int64)
