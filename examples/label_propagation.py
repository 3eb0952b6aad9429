"""Community detection by label propagation: a user-written vertex program without a combiner.

Every vertex starts with its own id as label; in each superstep it takes the label that most of
its neighbours hold (ties: the smallest label), following edges both ways. Because the mode of a
multiset cannot be pre-combined, the program sets ``combiner = None`` and receives every message
as a CSR (``Messages``), reduced here with vectorised NumPy — no Python loop over vertices. Every
vertex sends each superstep (labels are synchronous); an aggregator counts the labels that
changed and the master hook stops the run when none did.

Run it on any graph file, with any number of ranks::

    mpiexec -n 2 .venv/bin/pregel run examples/label_propagation.py:LabelPropagation \\
        --graph g.h5 --out communities.h5 --max-supersteps 10
"""

import numpy as np

from pregel.program import VertexProgram


class LabelPropagation(VertexProgram):
    """Synchronous label propagation until no label changes (at most ``max_supersteps``)."""

    combiner = None
    symmetric = True
    max_supersteps = 20

    def init(self, ctx):
        return ctx.global_ids.astype(np.float64)

    def message(self, ctx, labels):
        return labels, np.ones(ctx.num_local, dtype=bool)  # every vertex sends, changed or not

    def apply(self, ctx, labels, messages):
        counts = np.diff(messages.indptr)
        receiver = np.repeat(np.arange(ctx.num_local), counts)
        # Count each (receiver, label) pair, then keep the most frequent label per receiver,
        # preferring the smallest label on ties.
        pairs, tally = np.unique(np.stack([receiver, messages.values]), axis=1, return_counts=True)
        best = np.lexsort((pairs[1], -tally, pairs[0]))
        first = np.concatenate([[True], pairs[0][best][1:] != pairs[0][best][:-1]])
        new = labels.copy()
        new[pairs[0][best][first].astype(np.int64)] = pairs[1][best][first]
        ctx.aggregate("changed", np.count_nonzero(new != labels))
        return new, True

    def master(self, ctx, aggregates):
        return aggregates["changed"] == 0

    def output(self, ctx, labels):
        return labels.astype(np.int64)
