"""Weakly connected components by min-label propagation."""

import numpy as np

from pregel.program import VertexProgram


class WeakComponents(VertexProgram):
    """Every vertex ends with the smallest vertex id of its weakly connected component.

    Labels start as the vertex's own id and spread along edges in both directions; a vertex whose
    label dropped sends it again. Output: int64 [N].
    """

    combiner = "min"
    symmetric = True

    def init(self, ctx):
        return ctx.global_ids.copy()

    def message(self, ctx, label):
        return label

    def apply(self, ctx, label, gathered):
        new = np.minimum(label, gathered).astype(np.int64)
        return new, new < label
