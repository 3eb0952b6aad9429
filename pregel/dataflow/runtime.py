"""``run_dataflow`` runs a ``DataflowProgram`` on a ``DataflowPlan`` collectively on every rank, in one of two modes:

- ``"dataflow"``: one receive per incoming message is posted at the start; a rank fires its ready
  vertex of highest priority, sends the outputs at once (non-blocking) and blocks only when no
  local vertex is ready, so it never waits for ranks it does not depend on. A fire may call
  ``ctx.serve()`` part way (its serving point): the rank then takes in arrived messages and fires its
  ready *servable* vertices (``DataflowProgram.servable``) before the fire goes on;
- ``"bsp"``: phase by phase, each rank fires its vertices of the phase, then all ranks meet at a
  barrier and exchange the phase's messages in one Alltoallv.

Both modes send the same messages and hand every ``fire`` the same inputs. A rank's run (``_Run``) is the MPI
transport that drives the rank's ``Firing``; ``_Clock`` accounts its time.
"""

import time

import numpy as np

from pregel.dataflow.firing import Firing
from pregel.dataflow.plan import DataflowPlan, DataflowProgram, DataflowResult, Span, nothing_to_serve
from pregel.dataflow.routes import Routes
from pregel.sends import Requests, Sends, SendThread, thread_multiple

MODES = ("dataflow", "bsp")
#: Dataflow mode looks for arrived messages before a fire only once this many times the last
#: look's duration has passed since it (testing n open receives costs O(n)), and when idle.
POLL_SPACING = 4.0


def run_dataflow(comm, plan: DataflowPlan, program: DataflowProgram, mode: str = "dataflow",
                 trace: bool = False, send_thread: bool = False) -> DataflowResult:
    """Fire every vertex of ``plan`` once on its rank (collectively, on every rank of ``comm``).
    ``send_thread``: in dataflow mode, post the messages from a thread beside the compute
    (``pregel.sends.SendThread``; needs ``MPI_THREAD_MULTIPLE``)."""
    if mode not in MODES:
        raise ValueError(f"run_dataflow: mode must be one of {MODES}, got {mode!r}")
    if send_thread and not thread_multiple(comm):
        raise ValueError("run_dataflow: send_thread needs MPI initialised with MPI_THREAD_MULTIPLE")
    routes = Routes(plan, program, comm.size, comm.rank)
    if comm.size > 1 and routes.num_messages > comm.tag_limit + 1:
        raise ValueError(f"run_dataflow: {routes.num_messages:,} messages, but MPI tags stop at "
                         f"{comm.tag_limit:,}: coarsen the DAG or use fewer ranks")
    comm.barrier()  # a common start, so that the spans of different ranks line up
    sends = SendThread(comm) if send_thread and mode == "dataflow" and comm.size > 1 else Sends(comm)
    run = _Run(comm, plan, program, routes, _Clock(trace), sends)
    run.dataflow() if mode == "dataflow" else run.bsp()
    return run.result(mode)


class _Clock:
    """Seconds per kind of work since the common start, and the spans when tracing."""

    TOTALS = {"compute": "compute", "send": "comm", "recv": "comm", "wait": "wait", "barrier": "wait"}

    def __init__(self, trace: bool):
        self.start = time.perf_counter()
        self.seconds = {"compute": 0.0, "comm": 0.0, "wait": 0.0}
        self.spans = [] if trace else None

    def add(self, kind: str, t0: float, vertex: int = -1, keep: bool = True) -> None:
        """Account the time from ``t0`` to now as ``kind``; traced unless ``keep`` is False."""
        t1 = time.perf_counter()
        self.seconds[self.TOTALS[kind]] += t1 - t0
        if self.spans is not None and keep:
            self.spans.append(Span(kind, t0 - self.start, t1 - self.start, vertex))


class _Run:
    """One rank's run over MPI: the transport that drives this rank's ``Firing``."""

    def __init__(self, comm, plan, program, routes: Routes, clock: _Clock, sends):
        self.comm, self.plan, self.program, self.routes, self.clock = comm, plan, program, routes, clock
        self.firing = Firing(plan, program, routes, comm.rank, comm.size)
        self.receives = Requests()  # items: (group, buffer)
        self.sends = sends  # a ``Sends`` or a ``SendThread`` (dataflow mode)
        # of the fire under way: [vertex, when its current compute span began, its own seconds before that]
        self.firing_now = None

    # ------------------------------------------------------------------ the two modes

    def dataflow(self) -> None:
        """Fire ready vertices by priority, send at once, block only when nothing is ready; a fire's
        serving point (``_serve``) fires the ready servable vertices."""
        r, comm, clock, firing = self.routes, self.comm, self.clock, self.firing
        receives = self.receives
        for g in r.incoming.tolist():
            buffer = np.empty(r.group_size[g], dtype=np.float32)
            receives.add(comm.irecv(buffer, int(r.group_source_rank[g]), int(r.tag[g])), (g, buffer))
        firing.ctx.serve = self._serve
        next_poll = 0.0
        while not firing.done:
            if receives and time.perf_counter() >= next_poll:
                t0 = time.perf_counter()
                self._poll(t0)
                t1 = time.perf_counter()
                next_poll = t1 + POLL_SPACING * (t1 - t0)
            if firing.ready:
                u = firing.pop()
                self._send(u, self._fire(u))
            else:
                assert receives, "no ready vertex and no message to wait for"
                t0 = time.perf_counter()
                until = firing.idle(t0)  # a held vertex goes if nothing comes by then
                if firing.ready:
                    continue
                done = comm.waitsome(receives.requests, None if until is None else until - t0)
                clock.add("wait", t0)
                t0 = time.perf_counter()
                self._arrived(receives.completed(done))
                clock.add("recv", t0)
        t0 = time.perf_counter()
        self.sends.close()
        clock.add("wait", t0)
        firing.ctx.serve = nothing_to_serve  # a cycle through this run: its buffers now go with it

    def _poll(self, t0: float) -> None:
        """Take in the messages that have arrived (a look at the open receives), timed from ``t0``."""
        arrived = self.receives.completed(self.comm.testsome(self.receives.requests)) if self.receives else []
        self._arrived(arrived)
        self.clock.add("recv", t0, keep=bool(arrived))

    def _send(self, u: int, out) -> None:
        """Route ``u``'s output ``out`` and send its messages to other ranks (non-blocking)."""
        r = self.routes
        t0 = time.perf_counter()
        for g, payload in self.firing.route(u, out):
            self.sends.post(payload, int(r.group_rank[g]), int(r.tag[g]))
        self.clock.add("send", t0, u)

    def _serve(self) -> None:
        """The serving point of the fire under way: take in arrived messages, then fire every ready servable
        vertex (``Firing.pop_servable``) and send its outputs, before that fire goes on; its compute span
        ends here and a second begins after. A servable vertex's own fire serves nothing."""
        outer = self.firing_now
        if outer is None or outer[0] is None:
            return
        self.clock.add("compute", outer[1], outer[0])  # the fire so far
        own = outer[2] + time.perf_counter() - outer[1]
        self.firing_now = [None, 0.0, 0.0]  # the served fires serve nothing
        self._poll(time.perf_counter())
        u = self.firing.pop_servable()
        while u is not None:
            self._send(u, self._fire(u))
            u = self.firing.pop_servable()
        self.firing_now = [outer[0], time.perf_counter(), own]

    def bsp(self) -> None:
        """Phase by phase: fire, meet at a barrier, exchange the phase's messages in one Alltoallv."""
        r, plan, comm, clock, firing = self.routes, self.plan, self.comm, self.clock, self.firing
        phases, order, bounds = firing.bsp_order()
        sending = r.outgoing[np.lexsort((r.group_src[r.outgoing], r.group_rank[r.outgoing],
                                         plan.phase[r.group_src[r.outgoing]]))]
        coming = r.incoming[np.lexsort((r.group_src[r.incoming], r.group_source_rank[r.incoming],
                                        plan.phase[r.group_src[r.incoming]]))]
        send_counts = _phase_counts(phases, plan.phase[r.group_src[sending]], r.group_rank[sending],
                                    r.group_size[sending], comm.size)
        recv_counts = _phase_counts(phases, plan.phase[r.group_src[coming]],
                                    r.group_source_rank[coming], r.group_size[coming], comm.size)
        send_cut = np.searchsorted(plan.phase[r.group_src[sending]], phases, side="right")
        recv_cut = np.searchsorted(plan.phase[r.group_src[coming]], phases, side="right")
        start = 0
        for i in range(len(phases)):
            outputs = {}
            for u in order[start:bounds[i]].tolist():
                out = self._fire(u)
                t0 = time.perf_counter()
                outputs.update(firing.route(u, out))
                clock.add("send", t0, u)
            start = bounds[i]
            t0 = time.perf_counter()
            comm.barrier()
            clock.add("barrier", t0)
            t0 = time.perf_counter()
            groups = sending[send_cut[i - 1] if i else 0:send_cut[i]].tolist()
            send = np.concatenate([outputs[g] for g in groups]) if groups else np.empty(0, np.float32)
            received = comm.alltoallv_known(send, send_counts[i], recv_counts[i])
            groups = coming[recv_cut[i - 1] if i else 0:recv_cut[i]]
            ends = np.cumsum(r.group_size[groups])
            for g, a, b in zip(groups.tolist(), (ends - r.group_size[groups]).tolist(), ends.tolist()):
                firing.received(g, received[a:b])
            clock.add("recv", t0)

    # ------------------------------------------------------------------ shared steps

    def _fire(self, v: int):
        """Run ``program.fire`` on ``v`` with its inputs (timed as compute; a serving point inside it splits
        the span, ``_serve``)."""
        inputs = self.firing.inputs(v)
        outer = self.firing_now
        self.firing_now = [v if outer is None else None, time.perf_counter(), 0.0]  # (vertex, span start, own so far)
        out = self.program.fire(self.firing.ctx, v, inputs)
        self.clock.add("compute", self.firing_now[1], v)
        self.firing.record(v, self.firing_now[2] + time.perf_counter() - self.firing_now[1])
        self.firing_now = outer
        return out

    def _arrived(self, arrived: list) -> None:
        """Deliver the (group, buffer) of completed receives."""
        for g, buffer in arrived:
            self.firing.received(g, buffer)

    def result(self, mode: str) -> DataflowResult:
        c, seconds = self.firing.counts, self.clock.seconds
        return DataflowResult(mode, c["fired"], seconds["compute"], seconds["comm"], seconds["wait"],
                              c["messages_sent"], c["bytes_sent"], c["messages_received"],
                              c["bytes_received"], time.perf_counter() - self.clock.start, self.clock.spans,
                              c["let_go"])


def _phase_counts(phases, phase, ranks, sizes, size) -> np.ndarray:
    """[phases, size] float32 elements per (phase, rank) of the messages with ``phase``, ``ranks``
    and ``sizes`` [m]."""
    index = np.searchsorted(phases, phase) * size + ranks
    return np.bincount(index, weights=sizes, minlength=len(phases) * size).astype(np.int64).reshape(-1, size)
