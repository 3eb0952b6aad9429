"""Weakly connected components by min-label propagation, each rank's own block merged at once."""

import numpy as np

from kernels.local_components import local_components
from kernels.scatter import scatter_reduce
from pregel.program import VertexProgram


class WeakComponents(VertexProgram):
    """Every vertex ends with the smallest vertex id of its weakly connected component.

    Labels spread along edges in both directions; a vertex whose label dropped sends it again. On host
    arrays each rank first joins the components of the edges among its own vertices (its blocks,
    ``kernels.local_components``): labels start as the smallest id of each block, and a label that
    reaches one vertex of a block is sent at once to the rest of it (``ctx.send_to``), so supersteps count
    hops between blocks, not the graph's diameter (a 1000 x 1000 grid: 1,999 supersteps before, 1 on one
    rank). On the GPU labels start as the vertex's own id. Output: int64 [N].
    """

    combiner = "min"
    symmetric = True
    uses_features = False  # /nodes/features are not loaded

    def __init__(self):
        self.root = None  # [n] each owned row's block, as its smallest row (host arrays; set by init)

    def init(self, ctx):
        xp = ctx.xp
        if xp is not np:
            return xp.astype(ctx.global_ids, xp.int64)
        self.root = local_components(ctx.graph.in_indptr, ctx.graph.in_indices, ctx.num_local)
        return ctx.global_ids[self.root]  # ids ascend with rows: the block's smallest id

    def message(self, ctx, label):
        if self.root is not None and len(label):
            # the smallest label of each block's active rows, to the rows of the block above it
            candidate = np.where(ctx.active, label, np.inf)
            best = scatter_reduce(self.root, candidate, len(label), "min", check=False)[0][self.root]
            rows = np.flatnonzero(best < label)
            if len(rows):
                ctx.send_to(ctx.global_ids[rows], best[rows])
        return label

    def apply(self, ctx, label, gathered):
        xp = ctx.xp
        new = xp.astype(xp.minimum(label, gathered), xp.int64)
        return new, new < label
