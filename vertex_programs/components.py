"""Weakly connected components by min-label propagation."""

from pregel.program import VertexProgram


class WeakComponents(VertexProgram):
    """Every vertex ends with the smallest vertex id of its weakly connected component.

    Labels start as the vertex's own id and spread along edges in both directions; a vertex whose
    label dropped sends it again. Output: int64 [N].
    """

    combiner = "min"
    symmetric = True
    uses_features = False  # /nodes/features are not loaded
    rowwise = True  # a superstep on a small front runs on its rows alone

    def init(self, ctx):
        return ctx.xp.astype(ctx.global_ids, ctx.xp.int64)

    def message(self, ctx, label):
        return label

    def apply(self, ctx, label, gathered):
        xp = ctx.xp
        new = xp.astype(xp.minimum(label, gathered), xp.int64)
        return new, new < label
