"""PageRank as a vertex program, converging like ``networkx.pagerank``."""

import numpy as np

from pregel.program import VertexProgram


class PageRank(VertexProgram):
    """x ← α · (Aᵀ D⁻¹ x + (dangling mass) / N) + (1 − α) / N, from x = 1/N.

    Each vertex sends ``x / out_degree`` along its out-edges (summed at the receiver); the rank of
    dangling vertices (no out-edges) is spread uniformly through an aggregator. The run stops
    when the L1 change of x falls below ``N · tol`` (as networkx) or after ``max_iter`` supersteps.
    Edge weights are ignored. Output: float64 [N], summing to 1.
    """

    combiner = "sum"

    def __init__(self, alpha: float = 0.85, tol: float = 1e-6, max_iter: int = 100):
        self.alpha, self.tol, self.max_supersteps = alpha, tol, max_iter

    def check_input(self, ctx):
        if not 0.0 <= self.alpha <= 1.0:
            return f"--alpha must lie in [0, 1], got {self.alpha}"
        if not (np.isfinite(self.tol) and self.tol > 0):
            return f"--tol must be positive, got {self.tol}"
        return None

    def init(self, ctx):
        # fixed for the run: 1 / out-degree [n] (1 for dangling vertices, which send nothing
        # anyone receives) and the dangling vertices' local ids [d]
        xp = ctx.xp
        self._inverse_degree = 1.0 / xp.astype(xp.maximum(ctx.out_degree, 1), xp.float64)
        self._dangling = xp.flatnonzero(ctx.out_degree == 0)
        rank = xp.full(ctx.num_local, 1.0 / max(ctx.num_vertices, 1))
        ctx.aggregate("dangling", rank[self._dangling].sum())
        return rank

    def message(self, ctx, rank):
        return rank * self._inverse_degree

    def apply(self, ctx, rank, gathered):
        n = ctx.num_vertices
        new = gathered  # a fresh array: updated in place
        new += ctx.aggregated["dangling"] / n
        new *= self.alpha
        new += (1.0 - self.alpha) / n
        ctx.aggregate("dangling", new[self._dangling].sum())
        ctx.aggregate("change", ctx.xp.abs(new - rank).sum())
        return new, True

    def master(self, ctx, aggregates) -> bool:
        return aggregates["change"] < ctx.num_vertices * self.tol
