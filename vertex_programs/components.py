"""Weakly connected components: each rank's own blocks joined first, then labels hooked and jumped."""

import numpy as np

from kernels.local_components import local_components
from pregel.program import VertexProgram


class WeakComponents(VertexProgram):
    """Every vertex ends with the smallest vertex id of its weakly connected component.

    On host arrays each rank first joins the components of the edges among its own vertices (its
    blocks, ``kernels.local_components``, as block-centric systems do): labels start as the smallest id
    of each block. A vertex's label is also a pointer, to a vertex of its component with that id, and
    each superstep does three things at once (FastSV's, Zhang, Azad and Hu 2020): a vertex whose label
    dropped sends it to its neighbours and, if it dropped to what arrived from them, to the vertex it
    pointed to before (hooking that one's tree), and every vertex takes the smallest of its label, what
    arrived and its label's own label (read from its owner, ``ctx.fetch``: pointer jumping). Supersteps
    grow with the logarithm of the component's size, not its diameter, however the vertices are spread
    over ranks: 1 to 19 on a 1000 x 1000 grid (by hash, or with shuffled ids, at P = 1 to 3) where
    min-labels took up to 1,999. The run stops when no label changes. On the GPU labels are min-labels
    from the vertex's own id (supersteps follow the diameter). Output: int64 [N].
    """

    combiner = "min"
    symmetric = True
    uses_features = False  # /nodes/features are not loaded

    def __init__(self):
        self.jumps = False  # pointer jumping (host arrays; set by init)

    def init(self, ctx):
        xp = ctx.xp
        self.jumps = xp is np
        if not self.jumps:
            return xp.astype(ctx.global_ids, xp.int64)
        root = local_components(ctx.graph.in_indptr, ctx.graph.in_indices, ctx.num_local, both_ways=True)
        label = ctx.global_ids[root]  # ids ascend with rows: the block's smallest id
        # sent: the label a vertex last sent (-1: none yet), so also the vertex it pointed to before;
        # hook: whether its label last dropped to what arrived (that vertex does not know it yet)
        return {"label": label, "sent": np.full(len(label), -1, np.int64), "hook": np.zeros(len(label), bool)}

    def message(self, ctx, state):
        if not self.jumps:
            return state
        label, sent = state["label"], state["sent"]
        hooked = np.flatnonzero(state["hook"])
        ctx.send_to(sent[hooked], label[hooked].astype(np.float64))
        return label.astype(np.float64), label != sent

    def apply(self, ctx, state, gathered):
        xp = ctx.xp
        if not self.jumps:
            new = xp.astype(xp.minimum(state, gathered), xp.int64)
            return new, new < state
        label = state["label"]
        jumped = np.minimum(label, ctx.fetch(label, label))
        new = np.minimum(jumped, gathered).astype(np.int64)
        ctx.aggregate("changed", np.count_nonzero(new < label))
        return {"label": new, "sent": label, "hook": gathered < jumped}, True

    def master(self, ctx, aggregates) -> bool:
        return aggregates.get("changed") == 0

    def progress(self, ctx, aggregates) -> str:
        changed = aggregates.get("changed")  # every vertex computes every superstep: this says more
        return "" if changed is None else f"{changed:,} labels changed"

    def output(self, ctx, state):
        return state["label"] if self.jumps else state
