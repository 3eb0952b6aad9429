"""User vertex programs for tests/cudasim/test_device_run.py (run as FILE.py:CLASS)."""

from pregel.program import VertexProgram


class EvenWeightedMean(VertexProgram):
    """One superstep: each vertex gets the mean of ``weight * id`` over its in-edges from even ids
    (0 when it has none). Written once over ``ctx.xp``: runs on NumPy arrays and on torch tensors."""

    combiner = "mean"
    weighted = True
    max_supersteps = 1

    def init(self, ctx):
        return ctx.xp.astype(ctx.global_ids, ctx.xp.float64)

    def message(self, ctx, state):
        return state, ctx.global_ids % 2 == 0

    def apply(self, ctx, state, gathered):
        return gathered, False


class EdgeIdSums(VertexProgram):
    """One superstep: each vertex gets the sum over its in-edges of (source id + 1000 x its own id),
    read from ``ctx.edge_src`` and ``ctx.edge_dst`` in ``edge_message`` (the edges' ids on the device
    path, as on the host)."""

    combiner = "sum"
    max_supersteps = 1

    def init(self, ctx):
        return ctx.xp.astype(ctx.global_ids, ctx.xp.float64)

    def message(self, ctx, state):
        return state

    def edge_message(self, ctx, src_values, dst_values, weights):
        xp = ctx.xp
        return xp.astype(ctx.edge_src, xp.float64) + 1000.0 * xp.astype(ctx.edge_dst, xp.float64)

    def apply(self, ctx, state, gathered):
        return gathered, False


class NoCombiner(VertexProgram):
    """Every message delivered one by one (``combiner = None``): not on the GPU yet."""

    combiner = None


class SendsDirect(VertexProgram):
    """Messages to arbitrary vertices with ``ctx.send_to``: not on the GPU yet."""

    combiner = "sum"

    def message(self, ctx, state):
        ctx.send_to([0], [1.0])
        return state
