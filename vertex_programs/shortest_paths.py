"""Single-source shortest paths (delta-stepping in supersteps) and breadth-first search."""

import numpy as np

from pregel.program import Option, VertexProgram


class _FromSource(VertexProgram):
    """Shared by SSSP and BFS: distances start at 0 at the source, inf elsewhere; a vertex whose
    distance dropped is active and sends again; min-combined."""

    combiner = "min"
    uses_features = False  # /nodes/features are not loaded
    rowwise = True  # a superstep on a small front runs on its rows alone
    options = (Option("source", int, 0, "source vertex for sssp and bfs"),)

    def __init__(self, source: int):
        self.source = source

    def check_input(self, ctx):
        if not 0 <= self.source < ctx.num_vertices:
            return f"{type(self).__name__}.source {self.source} is not a vertex (the graph has {ctx.num_vertices})"
        return None

    def init(self, ctx):
        at_source = ctx.global_ids == self.source
        return ctx.xp.where(at_source, 0.0, np.inf), at_source

    def apply(self, ctx, dist, gathered):
        new = ctx.xp.minimum(dist, gathered)
        return new, new < dist


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

    def __init__(self, source: int, delta: float = 0.0):
        super().__init__(source)
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
        g = ctx.graph
        self.unit_weights = not _weights(g)
        self.window = self.delta or (np.inf if self.unit_weights else
                                     self.MEAN_WEIGHTS_IN_WINDOW * _mean_weight(g))
        dist, pending = super().init(ctx)
        _aggregate_nearest(ctx, dist, pending)
        return dist, pending

    def _sending(self, ctx, dist):
        """[k] bool: the pending rows within the window of the nearest pending distance."""
        nearest = ctx.aggregated.get(_NEAREST, np.inf)  # none known: all send
        return ctx.active & (dist <= nearest + self.window)

    def message(self, ctx, dist):
        values = dist + 1.0 if self.unit_weights else dist
        return values, self._sending(ctx, dist)

    def apply(self, ctx, dist, gathered):
        new = ctx.xp.minimum(dist, gathered)
        pending = (new < dist) | (ctx.active & ~self._sending(ctx, dist))
        _aggregate_nearest(ctx, new, pending)
        return new, pending

    def progress(self, ctx, aggregates) -> str:
        nearest = aggregates.get(_NEAREST, np.inf)
        return "" if np.isinf(nearest) else f"nearest pending distance {nearest:.6g}"


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


def _mean_weight(graph) -> float:
    """The mean weight of the whole graph's edges (a collective: every rank calls it)."""
    local = _weights(graph)
    totals = graph.comm.allgather((sum(float(w.sum(dtype=np.float64)) for w in local),
                                   sum(len(w) for w in local)))
    count = sum(n for _, n in totals)
    return sum(total for total, _ in totals) / count if count else 0.0


class BreadthFirst(_FromSource):
    """Hop counts from the source along out-edges. Output: int64 [N], −1 where unreachable."""

    def message(self, ctx, dist):
        return dist + 1.0

    def output(self, ctx, dist):
        xp = ctx.xp
        return xp.astype(xp.where(xp.isinf(dist), -1, dist), xp.int64)
