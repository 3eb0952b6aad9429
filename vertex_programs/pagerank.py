"""PageRank as a vertex program, converging like ``networkx.pagerank``."""

import math

import numpy as np

from pregel.errors import InputError
from pregel.program import Option, VertexProgram


class PageRank(VertexProgram):
    """x ← α · (Aᵀ D⁻¹ x + (dangling mass) / N) + (1 − α) / N, from x = 1/N.

    Each vertex sends ``x / out_degree`` along its out-edges (summed at the receiver); the rank of
    dangling vertices (no out-edges) is spread uniformly through an aggregator. The run stops
    when the L1 change of x falls below ``N · tol`` (as networkx) or after ``max_iter`` supersteps.
    Edge weights are ignored. Output: float64 [N], summing to 1.
    """

    combiner = "sum"
    uses_features = False  # /nodes/features are not loaded
    options = (Option("alpha", float, 0.85, "PageRank damping"),
               Option("tol", float, 1e-6, "PageRank: stop when L1 change < N * tol"),
               Option("max_iter", int, 100, "PageRank iteration cap"))
    TOP = 5  # vertices named by ``summary``

    def __init__(self, alpha: float = 0.85, tol: float = 1e-6, max_iter: int = 100):
        if not 0.0 <= alpha <= 1.0:  # NaN fails too
            raise InputError(f"PageRank.alpha must lie in [0, 1], got {alpha}")
        if not (math.isfinite(tol) and tol > 0):
            raise InputError(f"PageRank.tol must be a positive number, got {tol}")
        if max_iter < 1:
            raise InputError(f"PageRank.max_iter must be at least 1, got {max_iter}")
        self.alpha, self.tol, self.max_supersteps = alpha, tol, max_iter

    def summary(self, values) -> list[str]:
        top = largest(values, self.TOP)
        return ["top vertices: " + ", ".join(f"{v} ({values[v]:.6f})" for v in top)]

    def warnings(self, stopped_by: str) -> list[str]:
        if stopped_by == "max_supersteps":
            return [f"PageRank did not converge within PageRank.max_iter {self.max_supersteps}"]
        n = getattr(self, "_num_vertices", 0)
        if stopped_by == "master" and n * self.tol >= 2:
            # ranks sum to 1, so their L1 change is at most 2: the test passes after the first superstep
            # (as networkx's does), whatever the graph; at the default 1e-6 that is every graph of 2M vertices
            return [f"PageRank stopped after one superstep: N x PageRank.tol = {n:,} x {self.tol:g} = "
                    f"{n * self.tol:g} is not below 2, the largest L1 change ranks summing to 1 can make, so "
                    f"the convergence test always passes; the values are one power iteration from uniform. "
                    f"Give a PageRank.tol below 2 / N = {2 / n:.2g} (e.g. {10 ** np.floor(np.log10(0.002 / n)):g})"]
        return []

    def init(self, ctx):
        # fixed for the run: 1 / out-degree [n] (1 for dangling vertices, which send nothing
        # anyone receives) and the dangling vertices' local ids [d]
        xp = ctx.xp
        self._num_vertices = ctx.num_vertices  # for ``warnings``
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

    def progress(self, ctx, aggregates) -> str:
        return f"L1 change {aggregates['change']:.3g}, stops below {ctx.num_vertices * self.tol:.3g}"


def largest(values: np.ndarray, k: int) -> np.ndarray:
    """Ids of the ``k`` largest of ``values`` [N] (float), largest first, ties by ascending id:
    ``np.argsort(-values, kind="stable")[:k]`` in O(N) (a partition, then a sort of the candidates;
    the full sort took 0.1 s of ``pregel run pagerank`` at N = 1M). With NaNs among the k largest
    it sorts them all, as that expression does."""
    candidates = np.arange(len(values))
    if 0 < k < len(values):
        threshold = np.partition(values, len(values) - k)[len(values) - k]  # the k-th largest
        above = np.flatnonzero(values >= threshold)  # ascending ids; at least k of them unless NaN
        candidates = above if len(above) >= k else candidates
    return candidates[np.argsort(-values[candidates], kind="stable")[:k]]
