"""The superstep loop: message → exchange → gather → apply → halt votes and aggregators.

``run(graph, program)`` runs a ``VertexProgram`` on a loaded ``DistributedGraph`` (collectively,
on every rank) and returns a ``RunResult``. The gather runs on the ``kernels`` segment reductions:
when the program has a combiner and no per-edge transform, messages are reduced straight from
the senders' values in one fused pass over the in-edges (``gather_reduce``).
"""

import time
from dataclasses import dataclass

import numpy as np
from tqdm import tqdm

from kernels.gather import gather_reduce
from kernels.scatter import scatter_reduce
from pregel.errors import InputError
from pregel.exchange import Outgoing, exchange
from pregel.program import COMBINERS, Context, Messages, VertexProgram
from pregel.stats import SuperstepStats

IDENTITY = {"sum": 0.0, "mean": 0.0, "min": np.inf, "max": -np.inf}


@dataclass
class RunResult:
    """Outcome of ``run`` on one rank.

    state: the final state of the owned vertices; values: ``program.output`` of it as a NumPy
    array [n] / [n, F]; supersteps: how many ran; stats: [supersteps]
    ``SuperstepStats`` of this rank; aggregated: the last reduced aggregators; stopped_by: why the
    run ended ('halted', 'master' or 'max_supersteps'); compute_seconds: wall time of the loop.
    """

    state: object
    values: np.ndarray
    supersteps: int
    stats: list
    aggregated: dict
    stopped_by: str
    compute_seconds: float


def run(graph, program: VertexProgram, max_supersteps: int | None = None,
        progress: bool = False) -> RunResult:
    """Run ``program`` on ``graph`` until no vertex is active, ``master`` stops it, or
    ``max_supersteps`` (default: the program's, else unlimited) supersteps have run."""
    if program.combiner not in COMBINERS:
        raise ValueError(f"combiner must be one of {COMBINERS}, got {program.combiner!r}")
    comm = graph.comm
    limit = max_supersteps if max_supersteps is not None else program.max_supersteps
    ctx = Context(graph)
    problem = program.check_input(ctx)
    comm.agree(None if problem is None else InputError(problem))
    started = time.perf_counter()
    state, active = _split_active(program.init(ctx), graph.num_local)
    ctx.aggregated, _ = _reduce_aggregates(comm, ctx, int(active.sum()))
    stats, stopped_by = [], "max_supersteps"
    quiet = not progress or comm.rank != 0
    bar = tqdm(total=limit, desc="supersteps", unit="step", leave=False,
               disable=True if quiet else None)  # None: only on a terminal
    gatherer = _Gatherer(graph, program)
    while limit is None or ctx.superstep < limit:
        step = SuperstepStats(edges_processed=len(graph.in_indices))
        t0 = time.perf_counter()
        ctx.active, ctx._direct = active, []
        outgoing = _outgoing(ctx, program, state, active)
        t1 = time.perf_counter()
        incoming = exchange(graph, outgoing, with_counts=program.combiner == "mean")
        t2 = time.perf_counter()
        gathered, received = gatherer.gather(ctx, outgoing, incoming)
        ctx.received = received
        new_state, new_active = _split_active(program.apply(ctx, state, gathered), graph.num_local)
        computing = active | received
        state = _merge(state, new_state, computing)
        active = computing & new_active
        t3 = time.perf_counter()
        ctx.aggregated, total_active = _reduce_aggregates(comm, ctx, int(active.sum()))
        stop = program.master(ctx, ctx.aggregated) if comm.rank == 0 else None
        stop = bool(comm.bcast(stop)) if type(program).master is not VertexProgram.master else False
        t4 = time.perf_counter()
        step.compute_seconds = (t1 - t0) + (t3 - t2)
        step.comm_seconds = (t2 - t1) + (t4 - t3)
        step.active = int(active.sum())
        step.messages_sent, step.messages_received = incoming.rows_sent, incoming.rows_received
        step.bytes_sent, step.bytes_received = incoming.bytes_sent, incoming.bytes_received
        stats.append(step)
        ctx.superstep += 1
        bar.update(1)
        bar.set_postfix(active=total_active)
        if stop:
            stopped_by = "master"
            break
        if total_active == 0:
            stopped_by = "halted"
            break
    bar.close()
    elapsed = time.perf_counter() - started
    values = _as_numpy(program.output(ctx, state))
    return RunResult(state, values, ctx.superstep, stats, ctx.aggregated, stopped_by, elapsed)


def _split_active(result, n):
    """(state, active [n] bool) from a hook's return value (``active`` defaults to all True)."""
    if isinstance(result, tuple):
        state, active = result
    else:
        state, active = result, True
    if np.isscalar(active) or np.ndim(active) == 0:
        return state, np.full(n, bool(active))
    active = np.asarray(active, dtype=bool)
    if active.shape != (n,):
        raise ValueError(f"active must be a bool or a [{n}] bool array, got shape {active.shape}")
    return state, active


def _merge(old, new, computing):
    """``new`` where ``computing`` [n], ``old`` elsewhere (arrays, torch tensors or dicts of them)."""
    if computing.all():
        return new
    if isinstance(new, dict):
        return {key: _merge(old[key], new[key], computing) for key in new}
    if hasattr(new, "detach"):  # torch
        import torch

        mask = torch.from_numpy(computing).reshape((-1,) + (1,) * (new.dim() - 1))
        return torch.where(mask, new, old)
    mask = computing.reshape((-1,) + (1,) * (np.ndim(new) - 1))
    return np.where(mask, new, old)


def _reduce_aggregates(comm, ctx: Context, local_active: int):
    """Reduce the pending aggregators of every rank; returns (aggregated dict, global active)."""
    pending, ctx._pending_aggregates = ctx._pending_aggregates, {}
    everyone = comm.allgather((pending, local_active))
    reduced = {}
    for contributions, _ in everyone:
        for name, (op, value) in contributions.items():
            reduced[name] = value if name not in reduced else _COMBINE[op](reduced[name], value)
    aggregated = {name: (v.item() if np.ndim(v) == 0 else v) for name, v in reduced.items()}
    return aggregated, sum(active for _, active in everyone)


def _as_numpy(values):
    return values.detach().cpu().numpy() if hasattr(values, "detach") else np.asarray(values)


def _wire(values) -> np.ndarray:
    """Message rows as float32/float64 (integers and booleans are reduced in float64, exact below 2**53)."""
    values = _as_numpy(values)
    if values.dtype not in (np.float32, np.float64):
        values = values.astype(np.float64)
    return np.ascontiguousarray(values)


def _outgoing(ctx: Context, program: VertexProgram, state, active) -> Outgoing:
    """Call ``program.message`` and combine the direct messages on this rank (partial gather)."""
    sent = program.message(ctx, state)
    senders = active
    if isinstance(sent, tuple):
        sent, senders = sent
        senders = np.asarray(senders, dtype=bool)
    values = None
    if sent is not None:
        values = _wire(sent)
        if values.shape[0] != ctx.num_local:
            raise ValueError(f"message() must return one row per owned vertex ({ctx.num_local}), "
                             f"got {values.shape[0]}")
    ids, direct, counts = _combine_direct(ctx._direct, program.combiner)
    return Outgoing(values, None if senders.all() else senders, ids, direct, counts)


def _combine_direct(direct: list, combiner):
    """Messages from ``ctx.send_to``, pre-reduced per destination with the combiner.

    Returns (ids [k] unique global ids, values [k] / [k, F], counts [k] int64 for mean, else None).
    Without a combiner every message travels as it is.
    """
    if not direct:
        return np.zeros(0, np.int64), np.zeros(0), (np.zeros(0, np.int64) if combiner == "mean" else None)
    ids = np.concatenate([i for i, _ in direct])
    values = _wire(np.concatenate([v for _, v in direct]))
    if combiner is None:
        return ids, values, None
    unique, inverse = np.unique(ids, return_inverse=True)
    reduced, counts = scatter_reduce(inverse, values, len(unique), "sum" if combiner == "mean" else combiner)
    return unique, reduced, (counts if combiner == "mean" else None)


class _Gatherer:
    """Combines what a rank received into one value (or ``Messages``) per owned vertex."""

    def __init__(self, graph, program: VertexProgram):
        self.graph, self.program, self.combiner = graph, program, program.combiner
        self.per_edge = type(program).edge_message is not VertexProgram.edge_message
        self.weights = graph.in_weights
        if self.weights is None and self.per_edge:
            self.weights = np.ones(len(graph.in_indices), np.float32)
        self.in_degree = graph.in_degree.astype(np.float64)
        self.edge_rows = np.arange(len(graph.in_indices), dtype=np.int64) if self.per_edge else None

    def gather(self, ctx: Context, out: Outgoing, inc):
        """(gathered [n] / [n, F] or ``Messages``, received [n] bool) for this superstep."""
        g, n = self.graph, self.graph.num_local
        dtype = inc.dtype or np.dtype(np.float64)
        own = out.values if out.values is not None else np.zeros((n,) + inc.row_shape, dtype)
        ext = np.concatenate([own, inc.ghost_values]) if g.num_ghosts else own
        sent_ext = None
        if out.values is None or out.senders is not None or inc.ghost_sent is not None:
            own_sent = (np.zeros(n, bool) if out.values is None
                        else np.ones(n, bool) if out.senders is None else out.senders)
            ghost_sent = np.ones(g.num_ghosts, bool) if inc.ghost_sent is None else inc.ghost_sent
            sent_ext = np.concatenate([own_sent, ghost_sent])
        if self.combiner is None:
            return self._messages(ctx, ext, sent_ext, inc)
        return self._reduce(ctx, ext, sent_ext, inc)

    def _edge_values(self, ctx, ext):
        """Per-edge messages [E_r] / [E_r, F] (materialised, for per-edge transforms and no combiner)."""
        g = self.graph
        src_values = ext[g.in_indices]
        if self.per_edge:
            return _wire(self.program.edge_message(ctx, src_values, self.weights))
        if self.program.weighted and g.in_weights is not None:
            return src_values * g.in_weights.reshape((-1,) + (1,) * (src_values.ndim - 1))
        return src_values

    def _reduce(self, ctx, ext, sent_ext, inc):
        g, op = self.graph, self.combiner
        reduce_op = "sum" if op == "mean" else op
        identity = IDENTITY[op]
        if self.per_edge:
            edge_values = self._edge_values(ctx, ext)
            if sent_ext is not None:
                edge_values[~sent_ext[g.in_indices]] = identity
            gathered = gather_reduce(g.in_indptr, self.edge_rows, edge_values, reduce_op, check=False)
        else:
            if sent_ext is not None:
                ext = ext.copy()
                ext[~sent_ext] = identity
            weights = g.in_weights if self.program.weighted else None
            gathered = gather_reduce(g.in_indptr, g.in_indices, ext, reduce_op, weights, check=False)
        count = self.in_degree if sent_ext is None else gather_reduce(
            g.in_indptr, g.in_indices, sent_ext.astype(np.float64), "sum", check=False)
        if len(inc.direct_ids):
            local = g.local_index(inc.direct_ids)
            direct, direct_count = scatter_reduce(local, inc.direct_values.astype(gathered.dtype),
                                                  g.num_local, reduce_op, check=False)
            if op == "mean":
                direct_count = np.bincount(local, weights=inc.direct_counts, minlength=g.num_local)
            gathered = _COMBINE[reduce_op](gathered, np.where(_rows(direct_count > 0, direct), direct,
                                                              identity).astype(gathered.dtype))
            count = count + direct_count
        received = count > 0
        if op == "mean":
            gathered = gathered / _rows(np.maximum(count, 1), gathered).astype(gathered.dtype)
        gathered[~received] = identity
        return gathered, received

    def _messages(self, ctx, ext, sent_ext, inc):
        g, n = self.graph, self.graph.num_local
        values = self._edge_values(ctx, ext)
        receivers = np.repeat(np.arange(n, dtype=np.int64), np.diff(g.in_indptr))
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


def _rows(mask, like):
    """``mask`` [n] reshaped to broadcast over the rows of ``like`` [n] / [n, F]."""
    return mask.reshape((-1,) + (1,) * (np.ndim(like) - 1))


_COMBINE = {"sum": np.add, "min": np.minimum, "max": np.maximum}
