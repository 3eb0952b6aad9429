"""The superstep loop: message → exchange → gather → apply → halt votes and aggregators.

``run(graph, program)`` runs a ``VertexProgram`` on a loaded ``DistributedGraph`` (collectively,
on every rank) and returns a ``RunResult``. The data path of each superstep (what is sent, how
it is combined on arrival) is in ``pregel.superstep``.
"""

import time
from dataclasses import dataclass

import numpy as np
from pregel.arrays import as_numpy
from pregel.errors import InputError
from pregel.hooks import check_active, check_combiners, check_rows
from pregel.progress import Progress
from pregel.program import COMBINERS, REDUCERS, Context, VertexProgram
from pregel.rows import RowMask, own_copy, put_rows, row_context, take_rows
from pregel.stats import FIELDS, SuperstepStats
from pregel.superstep import HostPath


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
        progress: bool = False, checkpoint=None, device=None, ghost_memory: int | None = None) -> RunResult:
    """Run ``program`` on ``graph`` until no vertex is active, ``master`` stops it, or
    ``max_supersteps`` (default: the program's, else unlimited) supersteps have run.

    ``checkpoint``: a ``pregel.checkpoint.Checkpointer`` that may restore the run from a saved
    superstep (``init`` is then called with ``ctx.superstep`` already set, and its state replaced
    by the saved one) and saves one every few supersteps. ``device``: None (host arrays), or a
    ``pregel.device_path.Gpu`` that holds the state, messages and gather on this rank's GPU.
    ``ghost_memory``: on the host, the bytes of other ranks' message rows a rank may hold at once; a
    superstep whose rows would take more goes a slice of columns at a time, with the same result
    (``pregel.column_slices``; default: what would not fit, with the gathered rows, in nine tenths of
    the memory available to each rank)."""
    comm = graph.comm
    limit = max_supersteps if max_supersteps is not None else program.max_supersteps
    ctx = Context(graph) if device is None else device.context(graph)
    try:
        check_combiners(program, COMBINERS)
        problem = program.check_input(ctx)
        problem = None if problem is None else InputError(problem)
    except InputError as err:
        problem = err
    comm.agree(problem)
    started = time.perf_counter()
    saved = checkpoint.load(graph) if checkpoint is not None else None
    ctx.superstep = 0 if saved is None else saved.superstep
    state, active, problem = _split_active(program.init(ctx), graph.num_local, ctx.xp, program, "init")
    ctx.aggregated, _ = _reduce_aggregates(comm, ctx, _count(active), problem)
    stats, stopped_by = [], "max_supersteps"
    if saved is not None:
        state, active, ctx.aggregated = saved.state, saved.active, saved.aggregated
        stats = [SuperstepStats.from_row(row) for row in saved.stats]
    bar = Progress(limit, enabled=progress and comm.rank == 0)
    path = HostPath(graph, program, ctx, state, ghost_memory) if device is None else device.path(graph, program, ctx)
    state_is_ours = False  # whether ``state``'s arrays are the engine's own copy (rows are written in place)
    active_rows = None  # [k] the active rows, ascending, when the last superstep ran on its front
    front_active = RowMask(graph.num_local)  # ``active`` after a superstep on its front
    while limit is None or ctx.superstep < limit:
        step = SuperstepStats(edges_processed=graph.num_local_edges)
        t0 = time.perf_counter()
        ctx.active, ctx._direct = active, []
        front = path.front(active, active_rows)
        outgoing = path.outgoing(state, active) if front is None else path.outgoing(state, active, front)
        t1 = time.perf_counter()
        incoming = path.exchange(outgoing)
        t2 = time.perf_counter()
        if front is None:
            gathered, received = path.gather(outgoing, incoming)
        else:
            rows, gathered, received, step.edges_processed = path.gather_rows(outgoing, incoming, front)
        step.messages_sent, step.messages_received = incoming.rows_sent, incoming.rows_received
        step.bytes_sent, step.bytes_received = incoming.bytes_sent, incoming.bytes_received
        late_exchange = incoming.exchange_seconds  # exchanges that ran inside the gather
        del outgoing, incoming  # the received rows go before apply allocates its own
        if front is None:
            ctx.received = received
            applied = program.apply(ctx, state, gathered)
            del gathered
            new_state, new_active, problem = _split_active(applied, graph.num_local, ctx.xp, program, "apply")
            computing = ctx.xp.full(graph.num_local, True) if program.blockwise else active | received
            state, state_is_ours = _merge(state, new_state, computing), False
            active, active_rows = computing & new_active, None
            step.active = _count(active)
        else:  # the rows that sent or received, alone (VertexProgram.rowwise)
            applied = program.apply(row_context(ctx, rows, active[rows], received), take_rows(state, rows), gathered)
            new_state, new_active, problem = _split_active(applied, len(rows), ctx.xp, program, "apply")
            state = put_rows(state if state_is_ours else own_copy(state), rows, new_state)
            state_is_ours = True
            active_rows = rows[new_active]
            active = front_active.of(active_rows)
            step.active = len(active_rows)
        t3 = time.perf_counter()
        ctx.aggregated, total_active = _reduce_aggregates(comm, ctx, step.active, problem)
        stop = program.master(ctx, ctx.aggregated) if comm.rank == 0 else None
        stop = bool(comm.bcast(stop)) if type(program).master is not VertexProgram.master else False
        t4 = time.perf_counter()
        step.compute_seconds = (t1 - t0) + (t3 - t2) - late_exchange
        step.comm_seconds = (t2 - t1) + (t4 - t3) + late_exchange
        stats.append(step)
        ctx.superstep += 1
        if bar.enabled:
            note = program.progress(ctx, ctx.aggregated)
            bar.update(ctx.superstep, f"{total_active:,} vertices active" + (f", {note}" if note else ""))
        if stop:
            stopped_by = "master"
            break
        if total_active == 0:
            stopped_by = "halted"
            break
        if checkpoint is not None and checkpoint.due(ctx.superstep):
            checkpoint.save(graph, ctx.superstep, state, active, ctx.aggregated, _stats_rows(stats))
    bar.close()
    elapsed = time.perf_counter() - started
    values, problem = as_numpy(program.output(ctx, state)), None
    try:
        check_rows(program, "output", values, graph.num_local)
    except InputError as err:
        problem = err
    comm.agree(problem)
    return RunResult(state, values, ctx.superstep, stats, ctx.aggregated, stopped_by, elapsed)


def _stats_rows(stats) -> np.ndarray:
    """[supersteps, fields] float64 rows of a list of ``SuperstepStats``."""
    return np.array([s.as_row() for s in stats], dtype=np.float64).reshape(len(stats), len(FIELDS))


def _count(active) -> int:
    """The number of True entries of ``active`` [n] bool (a NumPy array or a torch tensor)."""
    return int(np.count_nonzero(active)) if isinstance(active, np.ndarray) else int(active.sum())


def _split_active(result, n, xp, program, hook: str):
    """(state, active [n] bool, problem) from the return value of ``program``'s ``hook`` (``active``
    defaults to all True; ``problem``: the ``InputError`` of an ``active`` that is not bool [n], else
    None, for every rank to agree on); ``xp``: the run's array namespace (``ctx.xp``)."""
    if isinstance(result, tuple):
        state, active = result
    else:
        state, active = result, True
    if np.isscalar(active) or np.ndim(active) == 0:
        return state, xp.full(n, bool(active)), None
    active = xp.asarray(active)
    try:
        check_active(program, hook, active, n)
    except InputError as err:
        return state, xp.full(n, False), err
    return state, active, None


def _merge(old, new, computing):
    """``new`` where ``computing`` [n], ``old`` elsewhere (arrays, torch tensors or dicts of them)."""
    if computing.all():
        return new
    if isinstance(new, dict):
        return {key: _merge(old[key], new[key], computing) for key in new}
    if hasattr(new, "detach"):  # torch
        import torch

        mask = computing if isinstance(computing, torch.Tensor) else torch.from_numpy(computing)
        mask = mask.reshape((-1,) + (1,) * (new.dim() - 1))
        return torch.where(mask, new, old)
    mask = computing.reshape((-1,) + (1,) * (np.ndim(new) - 1))
    return np.where(mask, new, old)


def _reduce_aggregates(comm, ctx: Context, local_active: int, problem: InputError | None = None):
    """Reduce the pending aggregators of every rank; returns (aggregated dict, global active). A
    ``problem`` on any rank is raised on every rank (the same collective carries it)."""
    pending, ctx._pending_aggregates = ctx._pending_aggregates, {}
    everyone = comm.agree(problem, (pending, local_active))
    reduced = {}
    for contributions, _ in everyone:
        for name, (op, value) in contributions.items():
            reduced[name] = value if name not in reduced else REDUCERS[op](reduced[name], value)
    aggregated = {name: (v.item() if np.ndim(v) == 0 else v) for name, v in reduced.items()}
    return aggregated, sum(active for _, active in everyone)
