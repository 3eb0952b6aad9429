"""Single-source shortest paths (Bellman-Ford in supersteps) and breadth-first search."""

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
    """Distances along weighted out-edges (weight 1.0 where the file has none).

    Weights must be non-negative. Output: float64 [N], ``inf`` where unreachable. On a graph without
    weights every edge adds 1.0, so the vertex sends ``dist + 1`` and the engine's fused gather runs
    (as for bfs) instead of a message per edge.
    """

    def __init__(self, source: int):
        super().__init__(source)
        self.unit_weights = False  # set by init: the graph has no /graph/weights

    @property
    def per_edge(self) -> bool:
        return not self.unit_weights

    def check_input(self, ctx):
        weights = [w for w in (ctx.graph.in_weights, ctx.graph.part_weights) if w is not None and len(w)]
        if any(w.min() < 0 for w in weights):
            return "sssp needs non-negative edge weights; /graph/weights has negative values"
        return super().check_input(ctx)

    def init(self, ctx):
        self.unit_weights = ctx.graph.in_weights is None and ctx.graph.part_weights is None
        return super().init(ctx)

    def message(self, ctx, dist):
        return dist + 1.0 if self.unit_weights else dist

    def edge_message(self, ctx, src_values, dst_values, weights):
        return src_values + weights


class BreadthFirst(_FromSource):
    """Hop counts from the source along out-edges. Output: int64 [N], −1 where unreachable."""

    def message(self, ctx, dist):
        return dist + 1.0

    def output(self, ctx, dist):
        xp = ctx.xp
        return xp.astype(xp.where(xp.isinf(dist), -1, dist), xp.int64)
