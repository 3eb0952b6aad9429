"""The data path of one superstep: what a rank sends and how it combines what it receives.

Sender side (``Superstep.outgoing``): the program's per-vertex message values; for source-side
(hub) edges, the partial aggregate of each hub's share, reduced here (*partial gather*); and the
messages to arbitrary vertices from ``ctx.send_to``, pre-reduced per destination. Receiver side
(``Superstep.gather``): a segment reduction over the destination-side in-edges (one fused
``gather_reduce`` pass when there is no per-edge transform), merged with the partial aggregates
and direct messages that arrived.
"""

from functools import cache, cached_property

import numpy as np

from kernels._checks import check_weight_op
from kernels.by_column import column_edges, rows_of_positions
from kernels.gather import gather_reduce, gather_reduce_sent, sent_edges, sent_positions
from kernels.scatter import scatter_reduce
from pregel.arrays import wire
from pregel.column_slices import SlicedIncoming, column_slices
from pregel.edge_order import row_ids, stable_order
from pregel.exchange import Outgoing, exchange
from pregel.hooks import check_rows
from pregel.program import COMBINERS, REDUCERS, Messages, VertexProgram
from pregel.rows import RowMask, row_context, take_rows
from pregel.softmax_parts import SoftmaxParts

IDENTITY = {"sum": 0.0, "mean": 0.0, "min": np.inf, "max": -np.inf}
#: ``EdgeIds.sent_positions``' passes over every edge before it builds an index of the edges by column:
#: the index takes as long as 4 passes on a 10M-vertex grid (40M edges) and 58 on a 10M-vertex
#: power-law graph (100M edges, ids in random order), so a run pays at most about 5.5x (the grid: many
#: passes) or 3.7x (the power-law graph: 21 passes) the cheaper of passes alone and the index
PASSES_BEFORE_INDEX = 20
#: a superstep runs on its front (``HostPath.front``) when its rows and their out-edges are at most this
#: share of the rank's rows and edges: with one fused pass over every edge, or with a message per edge
#: (measured on 1M-vertex grids and power-law graphs: below these the front's superstep is the faster)
FRONT_SHARE = {"fused": 1 / 50, "per_edge": 1 / 10}


def load_gather_kernel(graph, state, program: VertexProgram) -> None:
    """Load (from numba's cache, or compile) the gather kernel for messages shaped like ``state``
    ([n] / [n, F] array or tensor; anything else is skipped) and ``program``'s weights, so that the
    first superstep does not pay for it: messages usually have the state's dtype and width
    (PageRank, SSSP, components)."""
    if not hasattr(state, "shape") or state.ndim not in (1, 2):
        return
    rows = wire(state[:0])
    weights = graph.in_weights[:0] if program.weighted and graph.in_weights is not None else None
    gather_reduce(graph.in_indptr[:1], graph.in_indices[:0], rows, "sum", weights, weight_op=program.weight_op,
                  ghosts=rows, check=False)


class EdgeIds:
    """Per-edge index arrays of a rank's edges, built once per run and only when a path needs them."""

    def __init__(self, graph):
        self.graph = graph
        self.by_column = None  # (col_indptr, positions) of the destination-side edges by column, once built
        self.passes = 0  # sent_positions' calls that passed over every edge

    @cached_property
    def dst_rows(self) -> np.ndarray:
        """[E_d] local destination row of each destination-side edge."""
        return row_ids(self.graph.in_indptr)

    @cached_property
    def in_counts(self) -> np.ndarray:
        """[n] int64 number of destination-side in-edges of each owned vertex."""
        return np.diff(self.graph.in_indptr)

    @cached_property
    def ext_ids(self) -> np.ndarray:
        """[n + g] global ids of the owned then ghost rows (the rows ``in_indices`` points at)."""
        return np.concatenate([self.graph.owned, self.graph.ghost_ids])

    @cached_property
    def dst_side(self) -> tuple:
        """(weights, ids, dst rows) of the destination-side edges (``side``; ``ids`` computes once)."""
        weights, ids, rows = self.side(False, slice(None), lambda: self.dst_rows)
        return weights, cache(ids), rows

    def sent_positions(self, columns: np.ndarray) -> np.ndarray:
        """[k] int64 positions, in CSR order, of the destination-side edges whose column (a row of
        the owned-then-ghost rows) is in ``columns`` [m] (distinct). The first ``PASSES_BEFORE_INDEX``
        calls pass over every edge (``kernels.gather.sent_positions``); later ones read the columns'
        edges (``column_edges``) from the edge positions grouped by column, sorted then
        (``stable_order``: 4 bytes an edge), in time proportional to them. The index costs
        at most about as much as those passes, so a run that never needs it (a search of a
        power-law graph: a few supersteps with a small front) pays nothing for it, and one that does
        (a search across a mesh: thousands of supersteps) pays it once."""
        g = self.graph
        if self.by_column is None and self.passes < PASSES_BEFORE_INDEX:
            self.passes += 1
            sent = np.zeros(g.num_local + g.num_ghosts, bool)
            sent[columns] = True
            mean_in_edges = len(g.in_indices) / max(1, len(sent))  # a column's, for the output's first size
            return sent_positions(g.in_indices, sent, 2 * int(mean_in_edges * len(columns)), check=False)
        if self.by_column is None:
            positions, counts = stable_order(g.in_indices, g.num_local + g.num_ghosts)
            self.by_column = (np.concatenate([[0], np.cumsum(counts)]), positions)
        return column_edges(*self.by_column, columns)

    @cached_property
    def part_rows(self) -> np.ndarray:
        """[E_s] row (position in ``part_dst``) of each source-side edge."""
        g = self.graph
        return np.repeat(np.arange(len(g.part_dst), dtype=np.int64), np.diff(g.part_indptr))

    @cached_property
    def src_side(self) -> tuple:
        """(weights, ids, hub rows) of the source-side edges (``side``; ``ids`` computes once)."""
        weights, ids, rows = self.side(True, slice(None), lambda: self.part_rows)
        return weights, cache(ids), rows

    def weights(self, source_side: bool):
        """[E_s] / [E_d] float32 weights of the source-side or destination-side edges, or None."""
        return self.graph.part_weights if source_side else self.graph.in_weights

    def side(self, source_side: bool, positions, rows) -> tuple:
        """(weights [k] or None, ids, rows) of the edges at ``positions`` ([k] int64 or a slice) of one
        side's CSR, given ``rows()``, their CSR rows [k] (local destination rows, or hub rows). ``ids()``
        returns their (src, dst) global ids [k]; both are computed only when a program needs them
        (a program without ``destination_values`` that reads no edge ids never builds an [E] of rows)."""
        g = self.graph
        weights = self.weights(source_side)
        weights = None if weights is None else weights[positions]
        if source_side:
            return weights, lambda: (g.owned[g.part_src[positions]], g.part_dst[rows()]), rows
        return weights, lambda: (self.ext_ids[g.in_indices[positions]], g.owned[rows()]), rows


class FrontBuffers:
    """The [n] arrays into which a superstep on its front spreads its senders' message rows and mask,
    kept for the run: allocating them afresh took a third of such a superstep at 10M vertices.
    Each superstep's ``Outgoing`` reads them only until that superstep ends."""

    def __init__(self, num_rows: int):
        self.num_rows = num_rows
        self.senders = RowMask(num_rows)  # True at the last spread's sender rows only
        self.values = None  # [n] / [n, F] of the last spread's dtype and row shape

    def spread(self, values, front, sender_rows):
        """(values [n] / [n, F] with ``values`` [k] / [k, F] at ``front`` [k], or None when ``values``
        is None; senders [n] bool, True at ``sender_rows`` only)."""
        senders = self.senders.of(sender_rows)
        if values is None:
            return None, senders
        shape = (self.num_rows,) + values.shape[1:]
        if self.values is None or self.values.shape != shape or self.values.dtype != values.dtype:
            self.values = np.empty(shape, values.dtype)
        self.values[front] = values
        return self.values, senders


class Superstep:
    """One superstep's settings (read from the program each superstep) and both sides of its data path."""

    def __init__(self, graph, program: VertexProgram, ctx, edge_ids: EdgeIds, buffers: "FrontBuffers"):
        self.graph, self.program, self.ctx, self.edges, self.buffers = graph, program, ctx, edge_ids, buffers
        self.combiner = program.combiner
        if self.combiner not in COMBINERS:
            raise ValueError(f"combiner must be one of {COMBINERS}, got {self.combiner!r}")
        check_weight_op(program.weight_op)
        self.per_edge = program.per_edge
        self.dst_values = None      # [n, k] destination terms for per-edge transforms
        self.hub_dst_values = None  # [h, k] the same for this rank's source-side hub rows
        self.sender_rows = None  # [s] the rows that send, in a superstep on a front (``_spread``)

    @property
    def with_counts(self) -> bool:
        """Whether messages travel with their counts (the ``mean`` combiner divides by them)."""
        return self.combiner == "mean"

    # ------------------------------------------------------------------ sender side

    def outgoing(self, state, active, front=None) -> Outgoing:
        """Call ``message`` (and ``destination_values``), reduce source-side partials, combine
        direct messages; returns what this rank sends. ``front``: [k] the active rows (ascending),
        on which alone a ``rowwise`` program's ``message`` is called (``HostPath.front``), or None."""
        ctx = self.ctx
        if front is None:
            sent = self.program.message(ctx, state)
            senders = active
        else:
            sent = self.program.message(row_context(ctx, front, active[front]), take_rows(state, front))
            senders = np.ones(len(front), bool)
        if isinstance(sent, tuple):
            sent, senders = sent
            senders = np.asarray(senders, dtype=bool)
        values = None
        if sent is not None:
            values = check_message_rows(self.program, wire(sent), self.graph.num_local if front is None else len(front))
        if front is not None:
            values, senders = self._spread(values, senders, front)
        if self.per_edge:
            self._destination_values(state)
        all_send = bool(senders.all())
        parts = [] if values is None else [self._partials(values, None if all_send else senders)]
        parts += [(ids, wire(v), np.ones(len(ids), np.int64)) for ids, v in ctx._direct]
        ids, direct, counts = self._combine_direct(parts, values)
        return Outgoing(values, None if all_send else senders, ids, direct, counts)

    def _spread(self, values, senders, front):
        """The message rows ``values`` [k] / [k, F] (or None) and ``senders`` [k] bool of the rows
        ``front`` [k] as [n] arrays (``values`` unset elsewhere: only senders' rows are read), in
        ``FrontBuffers`` kept across supersteps; ``self.sender_rows`` keeps the rows that send."""
        self.sender_rows = front[senders]
        return self.buffers.spread(values, front, self.sender_rows)

    def _destination_values(self, state):
        """The program's destination terms [n, k], and those of this rank's source-side rows [h, k]
        (fetched from their owners through the plan computed at load)."""
        dst = self.program.destination_values(self.ctx, state)
        self.dst_values = None if dst is None else wire(dst)
        g = self.graph
        if self.dst_values is None or not g.any_source_side:
            return
        received = g.comm.alltoallv_known(self.dst_values[g.dst_send_index], g.dst_send_counts,
                                          g.dst_recv_counts)
        self.hub_dst_values = np.empty((len(g.part_dst),) + self.dst_values.shape[1:], self.dst_values.dtype)
        self.hub_dst_values[g.dst_recv_rows] = received

    def _partials(self, values, senders):
        """Partial aggregates of this rank's source-side edges: (hub ids, rows, counts)."""
        g = self.graph
        if not len(g.part_src):
            return np.zeros(0, np.int64), values[:0], np.zeros(0, np.int64)
        # per source-side edge, whether its source sent: read by the two per-edge paths (the reductions'
        # kernel skips non-senders itself)
        sent_edge = None if senders is None or self.combiner not in (None, "softmax") else senders[g.part_src]
        if self.combiner is None:
            per_edge = self._edge_values(values[g.part_src], *self.edges.src_side, source_side=True)
            keep = np.ones(len(per_edge), bool) if sent_edge is None else sent_edge
            return g.part_dst[self.edges.part_rows][keep], per_edge[keep], np.ones(int(keep.sum()), np.int64)
        if self.combiner == "softmax":
            rows = self._source_softmax(values, sent_edge)
            counts = None if sent_edge is None else np.bincount(self.edges.part_rows, weights=sent_edge,
                                                                minlength=len(g.part_dst)).astype(np.int64)
        else:
            rows, counts = self._reduce_edges(g.part_indptr, g.part_src, values, senders, source_side=True)
        counts = np.diff(g.part_indptr) if counts is None else counts
        keep = counts > 0
        return g.part_dst[keep], rows[keep], counts[keep]

    def _source_softmax(self, values, sent_edge):
        """Partial softmax rows [h, 2H + H·C] of the source-side hub rows: the program's one-pass
        gather when it has one and every owned vertex sent (no per-edge arrays), else per edge."""
        g, fused = self.graph, None
        if sent_edge is None and self.hub_dst_values is not None:
            fused = self.program.fused_softmax(self.ctx, values, self.hub_dst_values, g.part_indptr, g.part_src,
                                               g.owned, g.part_dst)
        if fused is not None:
            return SoftmaxParts(*fused).to_rows()
        logits, vals = self._edge_values(values[g.part_src], *self.edges.src_side, source_side=True)
        if sent_edge is not None:
            logits = np.where(sent_edge[:, None], logits, -np.inf)
        return SoftmaxParts.of_rows(g.part_indptr, logits, vals).to_rows()

    def _combine_direct(self, parts, values):
        """Concatenate (ids, rows, counts) parts; pre-reduce per destination with the combiner."""
        ids = np.concatenate([p[0] for p in parts]) if parts else np.zeros(0, np.int64)
        counts = np.concatenate([p[2] for p in parts]) if parts else np.zeros(0, np.int64)
        row_shape = () if values is None else values.shape[1:]
        dtype = np.float64 if values is None else values.dtype
        rows = (np.concatenate([p[1].reshape((len(p[0]),) + p[1].shape[1:]) for p in parts])
                if parts and len(ids) else np.zeros((0,) + row_shape, dtype))
        mean = self.combiner == "mean"
        if self.combiner in (None, "softmax") or not len(ids):
            if self.combiner == "softmax" and self.ctx._direct:
                raise ValueError("send_to cannot be used with the softmax combiner")
            return ids, rows, (counts if mean else None)
        unique, inverse = np.unique(ids, return_inverse=True)
        if len(unique) == len(ids):
            return ids, rows, (counts if mean else None)
        reduced, _ = scatter_reduce(inverse, rows, len(unique), "sum" if mean else self.combiner, check=False)
        total = np.bincount(inverse, weights=counts, minlength=len(unique)).astype(np.int64)
        return unique, reduced, (total if mean else None)

    # ------------------------------------------------------------------ shared by both sides

    def _edge_values(self, src_values, weights, ids, dst_rows, source_side):
        # weights [E] or None; ids: () -> (src, dst) [E] global ids (``EdgeIds.side``); dst_rows: () -> [E]
        # rows of the destination terms (local rows, or hub rows on the source side)
        """Per-edge messages [E] / [E, F] (or (logits, values) for softmax) of a set of edges."""
        if not self.per_edge:
            if self.program.weighted and weights is not None:
                weights = weights.reshape((-1,) + (1,) * (src_values.ndim - 1))
                return src_values + weights if self.program.weight_op == "add" else src_values * weights
            return src_values
        if weights is None:
            weights = np.ones(len(src_values), np.float32)
        dst_values = None
        if self.dst_values is not None:
            dst_values = self.hub_dst_values[dst_rows()] if source_side else self.dst_values[dst_rows()]
        self.ctx._set_edges(ids)
        out = self.program.edge_message(self.ctx, src_values, dst_values, weights)
        self.ctx._set_edges(None)
        if self.combiner == "softmax":
            logits, vals = (wire(o) for o in out)
            return logits, vals
        return wire(out)

    def _reduce_edges(self, indptr, columns, values, sent, source_side, ghosts=None, into=None):
        """(rows [R] / [R, F] of op over each CSR row's edges from senders (mean gives sums; divided
        later), counts [R] int64 of the edges reduced, or None when every column sent).

        indptr [R + 1], columns [E] rows of ``values`` (then of ``ghosts``, rows ``len(values)`` on,
        when given: only without per-edge values); sent: [len(values) (+ len(ghosts))] bool or None
        (all sent); source_side: the edges are this rank's source-side (hub) edges; into: [R, F] where
        to write the rows (``gather_reduce``'s ``out``; only without per-edge values), or None. Edges
        from columns that did not send are skipped, so a superstep in which few vertices send computes
        per-edge messages for their edges only.
        """
        op = "sum" if self.combiner == "mean" else self.combiner
        if self.per_edge:
            if sent is None:
                side = self.edges.src_side if source_side else self.edges.dst_side
                counts = None
            else:
                indptr, positions = sent_edges(indptr, columns, sent, check=False)
                side = self.edges.side(source_side, positions, cache(lambda: row_ids(indptr)))
                columns, counts = columns[positions], np.diff(indptr)
            per_edge = self._edge_values(values[columns], *side, source_side=source_side)
            reduced = gather_reduce(indptr, np.arange(len(columns), dtype=np.int64), per_edge, op, check=False)
            return reduced, counts
        weights = self.edges.weights(source_side) if self.program.weighted else None
        weight_op = self.program.weight_op
        if sent is None:
            return gather_reduce(indptr, columns, values, op, weights, weight_op=weight_op, ghosts=ghosts,
                                 check=False, out=into), None
        return gather_reduce_sent(indptr, columns, values, sent, op, weights, weight_op=weight_op, ghosts=ghosts,
                                  check=False, out=into)

    # ------------------------------------------------------------------ receiver side

    def gather(self, out: Outgoing, inc, into=None):
        """(gathered [n] / [n, F], ``Messages`` or ``SoftmaxParts``; received [n] bool). ``into``: [n, F]
        where a combiner's rows are written (``gathered`` is then ``into``: a slice of a wider array's
        columns, ``pregel.column_slices``), or None for a new array."""
        g, n = self.graph, self.graph.num_local
        dtype = inc.dtype or np.dtype(np.float64)
        own = out.values if out.values is not None else np.zeros((n,) + inc.row_shape, dtype)
        sent_ext = None
        if out.values is None or out.senders is not None or inc.ghost_sent is not None:
            own_sent = (np.zeros(n, bool) if out.values is None
                        else np.ones(n, bool) if out.senders is None else out.senders)
            ghost_sent = np.ones(g.num_ghosts, bool) if inc.ghost_sent is None else inc.ghost_sent
            sent_ext = np.concatenate([own_sent, ghost_sent])
        if self.combiner is None:
            return self._messages(inc.extended(own), sent_ext, inc)
        if self.combiner == "softmax":
            return self._softmax(own, sent_ext, inc)
        if self.combiner == "mean" and not self.per_edge and sent_ext is None and not len(inc.direct_ids):
            # every in-edge sent and nothing else arrives: the kernel divides by the row's edge count
            weights = g.in_weights if self.program.weighted else None
            gathered = gather_reduce(g.in_indptr, g.in_indices, own, "mean", weights,
                                     weight_op=self.program.weight_op, ghosts=inc.ghost_values, check=False,
                                     out=into)
            return gathered, self.edges.in_counts > 0
        if self.per_edge:
            gathered, count = self._reduce_edges(g.in_indptr, g.in_indices, inc.extended(own), sent_ext, False)
        else:  # the owned and ghost rows read where they lie
            gathered, count = self._reduce_edges(g.in_indptr, g.in_indices, own, sent_ext, False,
                                                 ghosts=inc.ghost_values, into=into)
        count = self.edges.in_counts if count is None else count
        op = self.combiner
        if len(inc.direct_ids):  # partial aggregates and direct messages touch only their rows
            if IDENTITY[op] != 0:  # gather_reduce gives 0 for rows without edges
                gathered[count == 0] = IDENTITY[op]
            rows, inverse = np.unique(g.local_index(inc.direct_ids), return_inverse=True)
            reduce_op = "sum" if op == "mean" else op
            direct, direct_count = scatter_reduce(inverse, inc.direct_values.astype(gathered.dtype),
                                                  len(rows), reduce_op, check=False)
            if op == "mean":
                direct_count = np.bincount(inverse, weights=inc.direct_counts, minlength=len(rows))
            gathered[rows] = REDUCERS[reduce_op](gathered[rows], direct)
            count = count.astype(np.float64)
            count[rows] += direct_count
        return finish_gather(gathered, count, op, np)

    def gather_rows(self, out: Outgoing, inc, front):
        """The gather of a superstep on a small front (``HostPath.front``; ``min`` or ``max``
        combiner): (rows [r] int64 ascending, the owned rows that sent or received, a superset of
        ``front`` [k]; gathered [r] / [r, F], the combiner's identity where nothing arrived;
        received [r] bool; the number of edges read, these and the source-side edges that
        ``outgoing`` passed). Reads only the edges of the columns that sent, found by
        ``EdgeIds.sent_positions``, and the direct messages."""
        g, n, op = self.graph, self.graph.num_local, self.combiner
        ghost_rows = (np.arange(g.num_ghosts) if inc.ghost_sent is None else np.flatnonzero(inc.ghost_sent))
        own_rows = self.sender_rows if out.values is not None else np.zeros(0, np.int64)
        if inc.dtype is None:  # no rank sent rows along edges
            ghost_rows = ghost_rows[:0]
        positions = self.edges.sent_positions(np.concatenate([own_rows, n + ghost_rows]))
        edge_rows = rows_of_positions(g.in_indptr, positions)  # ascending, as the positions are
        columns = g.in_indices[positions]
        src_values = np.empty((len(columns),) + inc.row_shape, inc.dtype or np.dtype(np.float64))
        mine = columns < n
        if out.values is not None:
            src_values[mine] = out.values[columns[mine]]
        src_values[~mine] = inc.ghost_values[columns[~mine] - n]
        per_edge = self._edge_values(src_values, *self.edges.side(False, positions, lambda: edge_rows),
                                     source_side=False)
        starts = np.flatnonzero(np.diff(edge_rows, prepend=-1))  # each receiving row's first edge
        touched = edge_rows[starts]
        reduced = REDUCERS[op].reduceat(per_edge, starts, axis=0) if len(starts) else per_edge[:0]
        if len(inc.direct_ids):  # partial aggregates and direct messages, merged row by row
            receivers = np.concatenate([touched, g.local_index(inc.direct_ids)])
            touched, inverse = np.unique(receivers, return_inverse=True)
            merged = np.concatenate([reduced, inc.direct_values.astype(reduced.dtype)])
            reduced, _ = scatter_reduce(inverse, merged, len(touched), op, check=False)
        rows = _union_of_sorted(front, touched)
        gathered = np.full((len(rows),) + reduced.shape[1:], IDENTITY[op], reduced.dtype)
        received = np.zeros(len(rows), bool)
        at = np.searchsorted(rows, touched)
        gathered[at], received[at] = reduced, True
        return rows, gathered, received, len(positions) + len(g.part_src)

    def _softmax(self, own, sent_ext, inc):
        g = self.graph
        fused = None
        if sent_ext is None and self.dst_values is not None:  # the program's one-pass gather, if any
            ghosts = inc.ghost_values if len(inc.ghost_values) else None  # read where they lie: no copy
            fused = self.program.fused_softmax(self.ctx, own, self.dst_values, g.in_indptr, g.in_indices,
                                               self.edges.ext_ids, g.owned, ghosts=ghosts)
        if fused is not None:
            parts = SoftmaxParts(*fused)
        else:
            ext = inc.extended(own)
            logits, vals = self._edge_values(ext[g.in_indices], *self.edges.dst_side, source_side=False)
            if sent_ext is not None:
                logits = np.where(sent_ext[g.in_indices][:, None], logits, -np.inf)
            parts = SoftmaxParts.of_rows(g.in_indptr, logits, vals)
        if len(inc.direct_ids):
            incoming = SoftmaxParts.from_rows(inc.direct_values.astype(parts.acc.dtype), parts.m.shape[1])
            parts = parts.merged(g.local_index(inc.direct_ids), incoming)
        return parts, np.isfinite(parts.m).any(axis=1)

    def _messages(self, ext, sent_ext, inc):
        g, n = self.graph, self.graph.num_local
        values = self._edge_values(ext[g.in_indices], *self.edges.dst_side, source_side=False)
        receivers = self.edges.dst_rows
        if sent_ext is not None:
            keep = sent_ext[g.in_indices]
            values, receivers = values[keep], receivers[keep]
        if len(inc.direct_ids):
            receivers = np.concatenate([receivers, g.local_index(inc.direct_ids)])
            values = np.concatenate([values, inc.direct_values.astype(values.dtype)])
        order = np.argsort(receivers, kind="stable")
        counts = np.bincount(receivers, minlength=n)
        indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        return Messages(indptr, values[order]), counts > 0


def finish_gather(gathered, count, combiner: str, xp):
    """(gathered, received) from the reduced rows ``gathered`` [n] / [n, F] (sums for mean) and the
    number of messages each row got, ``count`` [n]: means divided by their counts, the combiner's
    identity where nothing arrived, ``received = count > 0``. ``xp``: the arrays' namespace
    (``numpy``, or a ``pregel.arrays.TorchNamespace``)."""
    received = count > 0
    if combiner == "mean":  # in place: ``gathered`` is this superstep's own buffer
        gathered /= xp.astype(rows_like(xp.maximum(count, 1), gathered), gathered.dtype)
    if IDENTITY[combiner] != 0:
        gathered[~received] = IDENTITY[combiner]
    return gathered, received


class HostPath:
    """The data path of a run on host arrays: ``Superstep`` on both sides, ``exchange`` between.

    The engine calls ``front``, ``outgoing``, ``exchange`` and ``gather`` (or ``gather_rows`` when
    ``front`` gave rows) once each per superstep (as it does on ``pregel.device_path.DevicePath``)."""

    def __init__(self, graph, program: VertexProgram, ctx, state, ghost_memory: int | None = None):
        """``ghost_memory``: bytes of ghost rows a rank may hold at once (``pregel.column_slices``;
        None: ``default_ghost_memory``, found by each superstep that may be sliced)."""
        self.graph, self.program, self.ctx, self.edges = graph, program, ctx, EdgeIds(graph)
        self.buffers = FrontBuffers(graph.num_local)
        self.superstep = None
        self.ghost_memory = ghost_memory
        load_gather_kernel(graph, state, program)

    def front(self, active, active_rows=None) -> np.ndarray | None:
        """[k] the active rows (ascending) when this superstep runs on them alone, else None
        (``active`` [n] bool; ``active_rows``: its True rows when known, or None).

        It does when the program is ``rowwise`` (and not ``blockwise``) with a ``min`` or ``max``
        combiner (exact in any order: the result equals the full superstep's) and no
        ``destination_values``, and the active rows and their out-edges are at most ``FRONT_SHARE`` of
        the rank's rows and edges. A program that is not (or no longer) run on fronts drops the index of
        edges by column (``EdgeIds.sent_positions``): 4 bytes an edge it would otherwise hold to the end
        (built again if it returns to fronts)."""
        program, g = self.program, self.graph
        if not runs_on_fronts(program):
            self.edges.by_column = None  # a program that stopped running on fronts (sssp relaxing locally)
            return None
        budget = FRONT_SHARE["per_edge" if program.per_edge else "fused"] * (g.num_local + g.num_local_edges)
        if active_rows is None and np.count_nonzero(active) > budget:
            return None
        front = np.flatnonzero(active) if active_rows is None else active_rows
        return front if len(front) + g.out_degree[front].sum() <= budget else None

    def outgoing(self, state, active, front=None) -> Outgoing:
        """A new superstep's ``Superstep.outgoing``."""
        self.superstep = Superstep(self.graph, self.program, self.ctx, self.edges, self.buffers)
        return self.superstep.outgoing(state, active, front)

    def exchange(self, out: Outgoing):
        """``pregel.exchange.exchange`` of ``out`` (with counts for the ``mean`` combiner), or its first
        slice of columns when the ghost rows are to come a slice at a time (``pregel.column_slices``)."""
        columns = None if runs_on_fronts(self.program) else column_slices(self.graph, self.program, out,
                                                                              self.ghost_memory)
        if columns is not None:
            return SlicedIncoming(self.graph, out, columns, self.superstep.with_counts)
        return exchange(self.graph, out, with_counts=self.superstep.with_counts)

    def gather(self, out: Outgoing, inc):
        """This superstep's ``Superstep.gather`` (of each slice of columns, for a ``SlicedIncoming``)."""
        if isinstance(inc, SlicedIncoming):
            return inc.gather(self.superstep)
        return self.superstep.gather(out, inc)

    def gather_rows(self, out: Outgoing, inc, front):
        """This superstep's ``Superstep.gather_rows``."""
        return self.superstep.gather_rows(out, inc, front)


def runs_on_fronts(program: VertexProgram) -> bool:
    """Whether ``program``'s supersteps may run on their fronts (``HostPath.front``): it is ``rowwise``
    (and not ``blockwise``) with a ``min`` or ``max`` combiner and no ``destination_values``. A rank
    decides on its own whether a superstep does."""
    return (program.rowwise and not program.blockwise and program.combiner in ("min", "max")
            and type(program).destination_values is VertexProgram.destination_values)


def check_message_rows(program, values, n: int):
    """``values`` [n] / [n, F] returned by ``program.message()``, or the one-line error naming it."""
    return check_rows(program, "message", values, n)


def _union_of_sorted(a, b):
    """[m] the distinct values of ``a`` and ``b`` (each ascending and distinct), ascending: a merge of
    two runs (``np.union1d`` hashes or sorts them afresh, several times slower)."""
    both = np.sort(np.concatenate([a, b]), kind="stable")  # timsort: two ascending runs
    return both[np.diff(both, prepend=-1) != 0]


def rows_like(mask, like):
    """``mask`` [n] reshaped to broadcast over the rows of ``like`` [n] / [n, F]."""
    return mask.reshape((-1,) + (1,) * (np.ndim(like) - 1))
