"""One rank's execution policy, whatever carries the messages (``Firing``): which local vertices are ready, which
fires next, what each fire's inputs are, and where its outputs go (checked, and a per-edge vertex's payloads to
one rank joined into one message). ``DataflowPlan.sequence`` holds ready vertices back until their turn
(``_SequenceGate``), or until the rank has idled long enough (``DataflowPlan.hold_share``).

``run_dataflow`` drives a ``Firing`` over MPI (``pregel.dataflow.runtime``); the simulator
(``odin_sched.sim.window_run``) drives the same class with a virtual clock and simulated transfers.
"""

import heapq
import math

import numpy as np

from pregel.dataflow.plan import DataflowContext, DataflowPlan, DataflowProgram
from pregel.dataflow.routes import Routes


class Firing:
    """The execution policy of one rank, whatever carries the messages: which local vertices are
    ready (all inputs arrived), which fires next (highest priority, ties by lowest id), what each
    fire's inputs are, and where its outputs go. ``run_dataflow`` drives it with MPI; a simulator
    (``odin_sched.sim.window_run``) drives the same class with a virtual clock and simulated transfers.

    routes: the plan's ``Routes`` with rank ``rank`` selected; carry: False to route no payloads
    (``fire`` then gets empty inputs and its return value is ignored; sizes still count).
    """

    def __init__(self, plan: DataflowPlan, program: DataflowProgram, routes: Routes, rank: int, size: int,
                 carry: bool = True):
        self.plan, self.program, self.routes, self.rank, self.carry = plan, program, routes, rank, carry
        self.ctx = DataflowContext(rank, size, plan)
        self.local = np.flatnonzero(plan.rank == rank)
        self.servable = np.zeros(len(plan.rank), bool)
        self.servable[self.local] = program.servable(self.local)
        self.missing, self.uses = routes.missing.copy(), routes.uses.copy()
        self.held = {}  # group -> its payload array, or a local per-edge group's fire output (dict)
        self.ready = []  # heap of (-priority, vertex)
        self.gate = None if plan.sequence is None else _SequenceGate(plan.sequence, self.local, plan.lookahead)
        self.sequenced = [0.0, 0]  # seconds and count of this rank's fires of sequenced vertices (``record``)
        self.idle_since = None  # when the rank last found nothing ready (``idle``), None since it fired
        self.counts = dict.fromkeys(("fired", "messages_sent", "bytes_sent", "messages_received",
                                     "bytes_received", "let_go"), 0)
        for v in self.local[self.missing[self.local] == 0].tolist():
            self._push(v)

    @property
    def done(self) -> bool:
        """Whether every vertex of this rank has fired."""
        return self.counts["fired"] == len(self.local)

    def pop(self) -> int:
        """The ready vertex to fire next (there must be one)."""
        self.idle_since = None
        return self._begins(heapq.heappop(self.ready)[1])

    def pop_servable(self) -> int | None:
        """The ready servable vertex to fire next at a serving point (highest priority, ties by lowest id),
        or None when no ready vertex is servable."""
        best = min((entry for entry in self.ready if self.servable[entry[1]]), default=None)
        if best is None:
            return None
        self.ready.remove(best)
        heapq.heapify(self.ready)
        return self._begins(best[1])

    def _begins(self, v: int) -> int:
        """``v`` begins firing: the ready vertices its sequence's gate held back (``DataflowPlan.sequence``)
        and now lets go are queued. Returns ``v``."""
        if self.gate is not None:
            for w in self.gate.begins(v):
                heapq.heappush(self.ready, (-float(self.plan.priority[w]), w))
        return v

    def bsp_order(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """BSP mode: (phases [F], the local vertices in firing order [n], the end of each phase's
        vertices in that order [F]): by phase, then priority (higher first), then id."""
        plan, local = self.plan, self.local
        phases = np.unique(plan.phase)
        order = local[np.lexsort((local, -plan.priority[local], plan.phase[local]))]
        return phases, order, np.searchsorted(plan.phase[order], phases, side="right")

    def inputs(self, v: int) -> dict:
        """{in-neighbour: read-only payload} of ``v`` (empty without payloads); drops payloads that
        no vertex here still reads."""
        r = self.routes
        a, b = r.in_ptr[v], r.in_ptr[v + 1]
        inputs = {}
        if self.carry:
            for u, g, offset, n in zip(r.in_src[a:b].tolist(), r.in_group[a:b].tolist(),
                                       r.in_offset[a:b].tolist(), r.in_size[a:b].tolist()):
                held = self.held[g]
                payload = held[v].view() if isinstance(held, dict) else held[offset:offset + n]
                payload.flags.writeable = False
                inputs[u] = payload
        groups = r.in_group[a:b]
        self.uses[groups] -= 1
        for g in groups[self.uses[groups] == 0].tolist():
            self.held.pop(g, None)
        self.counts["fired"] += 1
        return inputs

    def route(self, u: int, out):
        """Deliver ``u``'s output to its out-neighbours here and yield (group, payload) for the other
        ranks (the concatenation of the per-edge payloads for each; None without payloads) in sending
        order, the group with the highest-priority reader first (``Routes.send_order``), each as soon as
        its payload is joined: a transport sends it before the next is joined, so the most urgent message
        does not wait for the others' sender time. Consume it whole."""
        r = self.routes
        g0, g1 = r.vertex_groups[u], r.vertex_groups[u + 1]
        if g0 == g1:
            return
        a, b = r.group_ptr[g0], r.group_ptr[g1]
        payload = None
        if self.carry and r.broadcast[u]:
            payload = _payload(out, u, int(r.sizes[a]), "its broadcast payload")
        elif self.carry:
            _check_keys(out, u, r.dst[a:b])
            for v, n in zip(r.dst[a:b].tolist(), r.sizes[a:b].tolist()):
                _payload(out[v], u, n, f"its payload for vertex {v}")
        for g in r.send_order[g0:g1].tolist():
            if r.group_rank[g] == self.rank:
                self.deliver(g, payload if r.broadcast[u] else out)
                continue
            if self.carry and not r.broadcast[u]:
                payload = _joined([out[v] for v in r.dst[r.group_ptr[g]:r.group_ptr[g + 1]].tolist()])
            self.counts["messages_sent"] += 1
            self.counts["bytes_sent"] += 4 * int(r.group_size[g])
            yield g, payload

    def deliver(self, g: int, payload) -> None:
        """Hold group ``g``'s payload for its readers here; queue those that became ready."""
        r = self.routes
        if self.carry:
            self.held[g] = payload
        missing = self.missing
        for v in r.dst[r.group_ptr[g]:r.group_ptr[g + 1]].tolist():  # distinct readers, few: a loop beats NumPy's calls
            missing[v] -= 1
            if not missing[v]:
                self._push(v)

    def received(self, g: int, payload) -> None:
        """Deliver a message from another rank (and count it)."""
        self.deliver(g, payload)
        self.counts["messages_received"] += 1
        self.counts["bytes_received"] += 4 * int(self.routes.group_size[g])

    def record(self, v: int, seconds: float) -> None:
        """``v``'s fire took ``seconds`` of its rank's compute (its own, not what it served): the mean of the
        sequenced ones sets how long a held vertex waits (``idle``)."""
        if self.gate is not None and self.plan.sequence[v] >= 0:
            self.sequenced[0] += seconds
            self.sequenced[1] += 1

    def idle(self, now: float) -> float | None:
        """The rank has nothing ready at ``now`` (seconds on its transport's clock), as since ``idle_since``:
        when it stops waiting for messages to let a held vertex go (``DataflowPlan.hold_share``: the held vertex
        of the lowest sequence, the highest priority there, ties by lowest id), or None to wait for messages
        alone (it holds none, has timed no sequenced fire, or holds them until their turn). Once that time has
        come the vertex is queued here instead (``ready``; None is returned)."""
        self.idle_since = now if self.idle_since is None else self.idle_since
        if self.gate is None or not self.gate.waiting or not self.sequenced[1] or math.isinf(self.plan.hold_share):
            return None
        until = self.idle_since + self.plan.hold_share * self.sequenced[0] / self.sequenced[1]
        if now < until:
            return until
        v = self.gate.take(self.plan.priority)
        heapq.heappush(self.ready, (-float(self.plan.priority[v]), v))
        self.counts["let_go"] += 1
        return None

    def _push(self, v: int) -> None:
        if self.gate is None or not self.gate.hold_back(v):
            heapq.heappush(self.ready, (-float(self.plan.priority[v]), v))


class _SequenceGate:
    """The ready vertices of one rank that ``DataflowPlan.sequence`` holds back: a vertex of sequence s fires
    only once every local vertex of a sequence below s - ``lookahead`` has begun.

    sequence: [N] int64 (-1: free); local: [n] the rank's vertices."""

    def __init__(self, sequence: np.ndarray, local: np.ndarray, lookahead: int):
        self.sequence, self.lookahead = sequence, lookahead
        mine = sequence[local]
        self.left = np.bincount(mine[mine >= 0])  # local vertices not begun, per sequence
        self.front = 0  # the lowest sequence with a local vertex not begun
        self._advance()
        self.waiting = {}  # sequence -> its ready vertices held back

    def hold_back(self, v: int) -> bool:
        """Whether ready vertex ``v`` must wait; if so it is kept here until ``begins`` lets it go."""
        s = int(self.sequence[v])
        if s <= self.front + self.lookahead:
            return False
        self.waiting.setdefault(s, []).append(v)
        return True

    def begins(self, v: int) -> list:
        """``v`` begins firing: the held vertices that may now fire."""
        s = int(self.sequence[v])
        if s < 0:
            return []
        self.left[s] -= 1
        limit = self.front + self.lookahead
        self._advance()
        return [w for t in range(limit + 1, self.front + self.lookahead + 1) for w in self.waiting.pop(t, ())]

    def take(self, priority: np.ndarray) -> int:
        """Take out of the gate the held vertex of the lowest sequence with the highest ``priority`` [N] (ties
        by lowest id); it fires before its turn. Returns it."""
        s = min(self.waiting)
        held = self.waiting[s]
        v = min(held, key=lambda w: (-priority[w], w))
        held.remove(v)
        if not held:
            del self.waiting[s]
        return v

    def _advance(self) -> None:
        while self.front < len(self.left) and self.left[self.front] == 0:
            self.front += 1


def _payload(array, u: int, n: int, what: str) -> np.ndarray:
    """``array`` if it is a contiguous 1-D float32 array of ``n`` elements, else a clear error."""
    if (not isinstance(array, np.ndarray) or array.dtype != np.float32 or array.shape != (n,)
            or not array.flags.c_contiguous):
        got = (f"{array.dtype} array of shape {array.shape}" if isinstance(array, np.ndarray)
               else type(array).__name__)
        raise ValueError(f"fire of vertex {u}: {what} must be a contiguous float32 array of shape "
                         f"({n},), got {got}")
    return array


def _joined(parts: list) -> np.ndarray:
    """The concatenation of the 1-D float32 arrays ``parts``: without a copy (a view of their array) when
    they are views that lie back to back, in this order, in one contiguous array; else a new array."""
    if len(parts) == 1:
        return parts[0]
    base = parts[0].base
    if (isinstance(base, np.ndarray) and base.flags.c_contiguous and base.dtype == np.float32
            and all(p.base is base and p.ndim == 1 and p.flags.c_contiguous for p in parts)):
        starts = np.array([p.__array_interface__["data"][0] for p in parts])
        sizes = np.array([p.nbytes for p in parts])
        if (starts[1:] == starts[:-1] + sizes[:-1]).all():
            offset = int(starts[0]) - base.__array_interface__["data"][0]
            return base.reshape(-1).view(np.uint8)[offset:offset + int(sizes.sum())].view(np.float32)
    return np.concatenate(parts)


def _check_keys(out, u: int, dsts: np.ndarray) -> None:
    if not isinstance(out, dict) or len(out) != len(dsts) or not all(v in out for v in dsts.tolist()):
        got = sorted(out) if isinstance(out, dict) else type(out).__name__
        raise ValueError(f"fire of per-edge vertex {u} must return {{out-neighbour: payload}} for its "
                         f"out-neighbours {dsts.tolist()[:10]}{'...' if len(dsts) > 10 else ''}, got {got}")
