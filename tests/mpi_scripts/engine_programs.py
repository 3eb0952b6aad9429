"""Vertex programs that probe engine semantics (used by tests/mpi_scripts/run_programs.py)."""

import numpy as np

from pregel.program import VertexProgram
from vertex_programs import BreadthFirst, PageRank, ShortestPaths, WeakComponents


class MinLabelNoCombiner(WeakComponents):
    """WCC with combiner None: the minimum is taken in apply (must equal combiner 'min')."""

    combiner = None

    def apply(self, ctx, label, messages):
        counts = np.diff(messages.indptr)
        gathered = np.full(ctx.num_local, np.inf)
        has = counts > 0
        if messages.values.size:
            gathered[has] = np.minimum.reduceat(messages.values, messages.indptr[:-1][has])
        return super().apply(ctx, label, gathered)


class PageRankNoCombiner(PageRank):
    """PageRank with combiner None: the sum is taken in apply (must equal combiner 'sum')."""

    combiner = None

    def apply(self, ctx, rank, messages):
        counts = np.diff(messages.indptr)
        gathered = np.zeros(ctx.num_local)
        has = counts > 0
        if messages.values.size:
            gathered[has] = np.add.reduceat(messages.values, messages.indptr[:-1][has])
        return super().apply(ctx, rank, gathered)


class ComputeCounter(BreadthFirst):
    """BFS whose output is how many supersteps each vertex computed (active or received)."""

    def init(self, ctx):
        dist, active = super().init(ctx)
        return {"dist": dist, "computed": np.zeros(ctx.num_local)}, active

    def message(self, ctx, state):
        return state["dist"] + 1.0

    def apply(self, ctx, state, gathered):
        dist, active = super().apply(ctx, state["dist"], gathered)
        return {"dist": dist, "computed": state["computed"] + 1}, active

    def output(self, ctx, state):
        return state["computed"]


class ShortestPathsPerEdge(ShortestPaths):
    """sssp whose edges add their weights in ``edge_message`` (a message per edge, on a front or over
    every row) instead of in the fused gather (``weight_op = 'add'``): the same distances."""

    weighted = False  # the weights reach edge_message, not the gather

    def edge_message(self, ctx, src_values, dst_values, weights):
        return src_values if self.unit_weights else src_values + weights


class SendersEdgeIds(VertexProgram):
    """One superstep in which only the even vertices send; each edge's message is built from the
    global ids that ``edge_message`` reads, ``src * 10**6 + dst``, min-combined: a vertex ends with
    its smallest even in-neighbour's id times 10**6 plus its own id (inf without one)."""

    combiner = "min"
    max_supersteps = 1

    def init(self, ctx):
        return np.full(ctx.num_local, np.inf), ctx.global_ids % 2 == 0

    def message(self, ctx, state):
        return np.zeros(ctx.num_local)

    def edge_message(self, ctx, src_values, dst_values, weights):
        return ctx.edge_src * 1e6 + ctx.edge_dst + src_values

    def apply(self, ctx, state, gathered):
        return gathered, False


class Aggregates(VertexProgram):
    """Runs 3 supersteps (stopped by master) and outputs, per vertex, the aggregator values seen:
    [sum of out-degrees, max id, min id, superstep count at the stop]."""

    def init(self, ctx):
        self._contribute(ctx)
        return np.zeros((ctx.num_local, 4))

    def _contribute(self, ctx):
        ctx.aggregate("degree_sum", ctx.out_degree.sum())
        ctx.aggregate("max_id", ctx.global_ids.max(initial=-1), "max")
        ctx.aggregate("min_id", ctx.global_ids.min(initial=ctx.num_vertices), "min")
        ctx.aggregate("steps", 1 if ctx.rank == 0 else 0)
        ctx.aggregate("steps", 0)  # several calls on a rank are reduced too

    def apply(self, ctx, state, gathered):
        seen = ctx.aggregated
        row = [seen["degree_sum"], seen["max_id"], seen["min_id"], ctx.superstep]
        self._contribute(ctx)
        return np.tile(row, (ctx.num_local, 1)).astype(float), True

    def master(self, ctx, aggregates):
        return ctx.superstep >= 2


class SendTo(VertexProgram):
    """Superstep 0: vertex v sends v + 1 to vertex (7 v + 3) mod N with ``send_to``; output the
    combined value per vertex (NaN where nothing arrived)."""

    def __init__(self, combiner):
        self.combiner = combiner

    def init(self, ctx):
        return np.full(ctx.num_local, np.nan)

    def message(self, ctx, state):
        ids = ctx.global_ids
        ctx.send_to((7 * ids + 3) % ctx.num_vertices, ids + 1.0)
        return None

    def apply(self, ctx, state, gathered):
        if self.combiner is None:  # sum the raw messages per receiver
            receiver = np.repeat(np.arange(ctx.num_local), np.diff(gathered.indptr))
            gathered = np.bincount(receiver, weights=gathered.values, minlength=ctx.num_local)
        return np.where(ctx.received, gathered, np.nan), False


class MeanOfNeighbours(VertexProgram):
    """One superstep: the mean of in-neighbours' ids (0 with no in-neighbour), combiner 'mean'."""

    combiner = "mean"

    def init(self, ctx):
        return ctx.global_ids.astype(float)

    def message(self, ctx, ids):
        return ids

    def apply(self, ctx, ids, gathered):
        return gathered, False


class WideMessages(VertexProgram):
    """One superstep of [n, 5] float32 rows ``wide_rows(ids)``: the vertices whose id is not a multiple
    of 3 send their row along their out-edges, and every vertex v sends twice its row to vertex
    (7 v + 3) mod N with ``send_to``; output the combined rows (the engine's identity where nothing
    arrived: 0 for sum and mean, -inf for max, inf for min)."""

    def __init__(self, combiner):
        self.combiner = combiner

    def init(self, ctx):
        return wide_rows(ctx.global_ids)

    def message(self, ctx, rows):
        ids = ctx.global_ids
        ctx.send_to((7 * ids + 3) % ctx.num_vertices, 2 * rows)
        return rows, ids % 3 != 0

    def apply(self, ctx, rows, gathered):
        return gathered, False


def wide_rows(ids):
    """[n, 5] float32 rows of the vertices ``ids`` [n] for ``WideMessages``."""
    return np.sin(np.outer(ids + 1.0, np.arange(1, 6))).astype(np.float32)


class FeatureSum(VertexProgram):
    """One superstep over [n, F] float32 rows: the weighted sum of in-neighbours' features."""

    weighted = True

    def init(self, ctx):
        return ctx.features

    def message(self, ctx, x):
        return x

    def apply(self, ctx, x, gathered):
        return gathered, False


class Attention(VertexProgram):
    """One superstep of 2-head attention over [n, 4] float64 rows: per edge j -> i the logit is
    leaky_relu(x_j[:2] + x_i[2:]) per head (self-loops in the graph masked out, then one self term
    added), the value is x_j split into 2 heads of 2 channels; output the softmax-weighted sums."""

    combiner = "softmax"

    def init(self, ctx):
        return ctx.features[:, :4].astype(np.float64)

    def message(self, ctx, x):
        return x

    def destination_values(self, ctx, x):
        return x[:, 2:]

    def edge_message(self, ctx, src, dst, weights):
        logits = _leaky(src[:, :2] + dst)
        logits[ctx.edge_src == ctx.edge_dst] = -np.inf
        return logits, src.reshape(-1, 2, 2)

    def apply(self, ctx, x, parts):
        own = parts.with_self(_leaky(x[:, :2] + x[:, 2:]), x.reshape(-1, 2, 2))
        return own.normalized().reshape(-1, 4), False


def _leaky(v):
    return np.where(v > 0, v, 0.2 * v)


class Fetch(VertexProgram):
    """One superstep in which vertex v reads, with ``ctx.fetch``, the state row of vertex (7 v + 3) mod N,
    the first column of vertex v // 2's (ids asked many times, many of them owned elsewhere), and, if v
    is a multiple of 5 (some ranks ask nothing), vertex N - 1 - v's; the state is [3 v, v + 0.5].
    Output [N, 4]: those rows (NaN where v asked nothing)."""

    max_supersteps = 1

    def init(self, ctx):
        return np.stack([3.0 * ctx.global_ids, ctx.global_ids + 0.5], axis=1)

    def message(self, ctx, state):
        return None

    def apply(self, ctx, state, gathered):
        ids, n = ctx.global_ids, ctx.num_vertices
        some = ids % 5 == 0
        last = np.full(ctx.num_local, np.nan)
        last[some] = ctx.fetch(n - 1 - ids[some], state[:, 1])
        return np.column_stack([ctx.fetch((7 * ids + 3) % n, state), ctx.fetch(ids // 2, state[:, 0]), last]), False
