"""Weakly connected components by min-label propagation, each rank's own block merged at once."""

import numpy as np

from kernels.local_components import local_components
from pregel.program import VertexProgram


class WeakComponents(VertexProgram):
    """Every vertex ends with the smallest vertex id of its weakly connected component.

    Labels spread along edges in both directions; a vertex whose label dropped sends it again. On host
    arrays each rank first joins the components of the edges among its own vertices (``_Blocks``):
    labels start as the smallest id of each such block, and a label that reaches one vertex of a block
    is sent at once to the rest of it (``ctx.send_to``), so supersteps count hops between blocks, not the
    graph's diameter (a 1000 x 1000 grid: 1,999 supersteps before, 2 on one rank). On the GPU labels
    start as the vertex's own id. Output: int64 [N].
    """

    combiner = "min"
    symmetric = True
    uses_features = False  # /nodes/features are not loaded

    def __init__(self):
        self.blocks = None  # set by init on host arrays

    def init(self, ctx):
        xp = ctx.xp
        if xp is not np:
            return xp.astype(ctx.global_ids, xp.int64)
        root = local_components(ctx.graph.in_indptr, ctx.graph.in_indices, ctx.num_local)
        self.blocks = _Blocks(root)
        return ctx.global_ids[root]  # ids ascend with rows: the block's smallest id

    def message(self, ctx, label):
        if self.blocks is not None:
            rows, lower = self.blocks.lowered(label, ctx.active)
            if len(rows):
                ctx.send_to(ctx.global_ids[rows], lower)
        return label

    def apply(self, ctx, label, gathered):
        xp = ctx.xp
        new = xp.astype(xp.minimum(label, gathered), xp.int64)
        return new, new < label


class _Blocks:
    """The components of the edges among a rank's own rows, grouped for a minimum per block.

    root: [n] int64 each row's block's smallest row (``kernels.local_components``); rows are held as
    int32 below 2**31 of them."""

    def __init__(self, root: np.ndarray):
        index = np.int32 if len(root) < 2**31 else np.int64
        _, block = np.unique(root, return_inverse=True)
        self.block = block.astype(index)  # [n] each row's block, 0..B-1
        self.order = np.argsort(self.block, kind="stable").astype(index)  # rows block by block
        self.starts = np.concatenate([[0], np.cumsum(np.bincount(self.block))[:-1]]).astype(np.int64)

    def lowered(self, label: np.ndarray, active: np.ndarray):
        """(rows [k], labels [k]): the rows whose block holds an active row with a smaller label
        (``label`` [n] int64, ``active`` [n] bool), and the smallest such label of each one's block."""
        if not len(label):
            return np.zeros(0, np.int64), label
        candidate = np.where(active, label, np.iinfo(np.int64).max)
        best = np.minimum.reduceat(candidate[self.order], self.starts)[self.block]
        rows = np.flatnonzero(best < label)
        return rows, best[rows]
