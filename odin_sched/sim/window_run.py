"""One planned window run on virtual ranks in virtual time (``WindowRun``), and the simulated cost of its
vertices (``vertex_costs``).

Every virtual rank fires its vertices through ``pregel.dataflow.Firing``, the runtime's own ready queue,
pending counts and routing; SimPy processes (one per virtual GPU) take each vertex's cost as virtual time
and hand each message to its destination after ``latency + bytes / bandwidth`` (each rank's outgoing link
sends its messages one after another, and each rank's incoming link takes them in one after another).
A rank fires its ready cell versions between an image's forward and backward pass, as the runtime's rank
loop serves them there (``StepMessages.servable``; the image's cost split at the profile's
``forward_share``). BSP mode (``barrier``) fires the same phases as ``run_dataflow(mode='bsp')``, then a
barrier and an Alltoallv per phase.
"""
import copy

import numpy as np

from odin_sched.odin.program import StepMessages
from odin_sched.sim.costmodel import CameraViews, CostProfile
from odin_sched.sim.processors import Processors
from odin_sched.sim.window_end import exchange_seconds
from pregel.dataflow import Firing, Routes


def vertex_costs(win, views: CameraViews, profile: CostProfile, rng: np.random.Generator,
                 image_overhead: float = 0.0) -> np.ndarray:
    """[N] simulated seconds of every vertex of a planned window: images by their camera's features
    and the Gaussians of the cells they read, each times one resampled relative error of the profile's
    fit (``image_noise``; the same draws in every mode), plus ``image_overhead`` (the profile's fixed
    time per step and GPU, ``step_seconds``, shared by the GPU's images of a batch: step_seconds x
    GPUs / batch, as grendel pays it), cell versions by their cell's size and whether their batch's
    cameras have any of its Gaussians on screen (initial versions: 0)."""
    steps = win.steps
    rows = win.count[steps.version_cell]
    writes = steps.version_index(steps.image_writes)
    camera_of_write = np.repeat(steps.image_camera, np.diff(steps.image_writes_indptr))
    seen = np.zeros(len(rows), bool)
    np.logical_or.at(seen, writes, views.cameras_see_cells(camera_of_write, steps.version_cell[writes], win.cell_of))
    versions = np.where(steps.version_batch < 0, 0.0, profile.version_seconds(rows, seen))
    images = profile.image_seconds(views.features[steps.image_camera], win.image_rows)
    if profile.image_noise:
        images = images * (1.0 + rng.choice(np.asarray(profile.image_noise, np.float64), len(images)))
    return np.concatenate([images + image_overhead, versions])


class WindowRun:
    """One window on ``gpus`` virtual ranks: a ``Firing`` per rank, driven in virtual time."""

    def __init__(self, win, cost: np.ndarray, profile: CostProfile, gpus: int, trace: bool, columns: int):
        self.plan, self.cost, self.profile, self.gpus = win.plan, cost, profile, gpus
        self.images = win.steps.num_images
        program = StepMessages(win.steps, win.count, columns)
        self.routes = Routes(win.plan, program, gpus)
        self.firings = [Firing(win.plan, program, copy.copy(self.routes).select(r), r, gpus, carry=False)
                        for r in range(gpus)]
        self.compute, self.comm, self.wait, self.end, self.messages = (np.zeros(gpus) for _ in range(5))
        self.spans = [[] for _ in range(gpus)] if trace else []
        self.arrivals = []  # traced: (rank, source vertex, seconds) of every message received
        self.key = self.key_words = self.flush = None  # the joining what-if (``join_with``); None: none
        self.held = [[] for _ in range(gpus)]  # per rank: the groups it holds to join
        self.holding = np.zeros(gpus, bool)  # whether a rank now holds its messages to join them
        self.host_free = np.zeros(gpus)  # (``profile.host_sends``) when each rank's host has posted all it was given

    def join_with(self, keys: tuple, flush: str) -> None:
        """The joining what-if (``odin_sched.sim.joining``): keys = (key [G] int64 of every group, -1: sent
        alone at once; words [K] of a joined message of each key, or None: its groups' words summed); flush:
        'serving' (a rank holds its messages while it serves at a serving point) or 'run' (it holds them
        until its next image part or wait)."""
        self.key, self.key_words = keys
        self.flush = flush
        self.holding[:] = flush == "run"

    def _span(self, rank, kind, t0, t1, vertex=-1):
        if self.spans and t1 > t0:
            self.spans[rank].append((kind, t0, t1, vertex))

    def _fire(self, rank: int, u: int | None = None):
        """Take ``u`` (default: rank's next ready vertex) with its inputs: (vertex, seconds)."""
        f = self.firings[rank]
        u = f.pop() if u is None else u
        f.inputs(u)
        return u, float(self.cost[u])

    def _compute(self, env, cpu: "Processors", me: int, u: int, seconds: float, route: bool = True, send=None):
        """SimPy process steps of rank ``me`` firing ``u``: ``seconds`` of compute, then (``route``: the
        fire's end) its outputs routed as the runtime routes them after the fire (``Firing.route``): the
        local readers served, and each remote message sent (``send(me, group)``, if given) once the
        sender's overhead for it is paid, in sending order. Returns their groups."""
        t0 = env.now
        yield from cpu.hold(me, seconds)
        self.compute[me] += env.now - t0
        self._span(me, "compute", t0, env.now, u)
        if not route:
            return []
        remote, t0 = [], env.now
        for g, _ in self.firings[me].route(u, None):
            if send is not None and self.holding[me] and self.key[g] >= 0:
                self.held[me].append(g)  # joined later (``_release``)
                continue
            remote.append(g)
            if self.profile.host_sends:
                self._post(env, me, g, send)
                continue
            yield from cpu.hold(me, self.profile.overhead)
            if send is not None:
                send(me, [g], self.routes.group_size[g])
        self.comm[me] += env.now - t0
        self._span(me, "send", t0, env.now, u)
        return remote

    def _post(self, env, me: int, group: int, send) -> None:
        """The host-sends what-if (``CostProfile.host_sends``): rank ``me``'s host thread pays the sender's time
        of message ``group`` after the messages it was given before, while the GPU goes on; the message leaves
        then (``send(me, [group], words)``, if given)."""
        self.host_free[me] = max(env.now, self.host_free[me]) + self.profile.overhead
        if send is not None:
            event = env.timeout(self.host_free[me] - env.now)
            event.callbacks.append(lambda _, g=group: send(me, [g], self.routes.group_size[g]))

    def _host_done(self, env, me: int):
        """SimPy process steps: rank ``me`` waits until its host has posted all it was given (charged as
        communication); nothing without ``CostProfile.host_sends``."""
        tail = self.host_free[me] - env.now
        if tail > 0:
            self._span(me, "send", env.now, self.host_free[me])
            yield env.timeout(tail)
            self.comm[me] += tail

    def _release(self, cpu: "Processors", me: int, send):
        """SimPy process steps: rank ``me`` sends the groups it holds (``join_with``), those to one rank with
        one key as one message (in the order of their first group), each after its sender's overhead."""
        if not self.held[me]:
            return
        groups, self.held[me] = np.asarray(self.held[me], np.int64), []
        r, t0 = self.routes, cpu.env.now
        bucket = r.group_rank[groups] * (int(self.key.max()) + 1) + self.key[groups]
        _, first, inverse = np.unique(bucket, return_index=True, return_inverse=True)
        for b in np.argsort(first).tolist():
            joined = groups[inverse.reshape(-1) == b]
            words = (r.group_size[joined].sum() if self.key_words is None
                     else self.key_words[self.key[joined[0]]])
            yield from cpu.hold(me, self.profile.overhead)
            send(me, joined.tolist(), words)
        self.comm[me] += cpu.env.now - t0
        self._span(me, "send", t0, cpu.env.now)

    def dataflow(self) -> None:
        """Every rank fires ready vertices by priority and sends at once (SimPy processes)."""
        import simpy

        env = simpy.Environment()
        r = self.routes
        out_free, in_free = [0.0] * self.gpus, [0.0] * self.gpus  # (lists: read and written once per message)
        wake = [env.event() for _ in range(self.gpus)]
        latency, bandwidth = (x.tolist() for x in self.profile.link(r.group_source_rank, r.group_rank))
        group_rank = r.group_rank.tolist()

        def arrive(dst, groups):
            for g in groups:
                if self.spans:
                    self.arrivals.append((dst, int(np.searchsorted(r.vertex_groups, g, side="right")) - 1, env.now))
                self.firings[dst].received(g, None)
            if not wake[dst].triggered:
                wake[dst].succeed()

        def send(src, groups, words):
            """One message from ``src`` of ``words`` float32 words carrying ``groups`` (one rank's)."""
            g = groups[0]
            dst = group_rank[g]
            self.messages[src] += 1
            seconds = 4.0 * words / bandwidth[g]
            begin = max(env.now, out_free[src])  # the sender's link streams its messages in order ...
            out_free[src] = begin + seconds
            in_free[dst] = max(begin, in_free[dst]) + seconds  # ... and the receiver's drains them in order
            event = env.timeout(in_free[dst] + latency[g] - env.now)
            event.callbacks.append(lambda _, dst=dst, groups=groups: arrive(dst, groups))

        cpu = Processors(env, self.profile, self.gpus)

        def fire(me, u, seconds):
            yield from self._compute(env, cpu, me, u, seconds, send=send)

        def rank(me):
            f = self.firings[me]
            while not f.done:
                if f.ready:
                    u, seconds = self._fire(me)
                    f.record(u, seconds)  # (the runtime times a fire when it ends: nothing reads it before)
                    if u < self.images:  # the runtime's serving point: after the forward pass, the rank
                        # fires its ready cell versions (``StepMessages.servable``), then the backward pass
                        yield from self._release(cpu, me, send)  # (joining: held messages go before an image)
                        forward = seconds * self.profile.forward_share
                        yield from self._compute(env, cpu, me, u, forward, route=False)
                        seconds -= forward
                        self.holding[me] |= self.flush == "serving"
                        served = f.pop_servable()
                        while served is not None:
                            yield from fire(me, *self._fire(me, served))
                            served = f.pop_servable()
                        self.holding[me] = self.flush == "run"
                        yield from self._release(cpu, me, send)
                    yield from fire(me, u, seconds)
                elif self.held[me]:  # (joining) send what it holds, then look again: a message may come meanwhile
                    yield from self._release(cpu, me, send)
                else:
                    t0 = env.now
                    until = f.idle(t0)  # a held image goes if nothing comes by then (the runtime's)
                    if f.ready:
                        continue
                    wake[me] = event = env.event()
                    if until is not None:
                        event = env.any_of([event, env.timeout(until - t0)])
                    yield from cpu.wait(me, event)
                    self.wait[me] += env.now - t0
                    self._span(me, "wait", t0, env.now)
            yield from self._release(cpu, me, send)
            yield from self._host_done(env, me)
            cpu.release(me)
            self.end[me] = env.now

        for me in range(self.gpus):
            env.process(rank(me))
        env.run()
        stuck = [me for me, f in enumerate(self.firings) if not f.done]
        if stuck:
            raise RuntimeError(f"simulated ranks {stuck[:8]} never fired all their vertices")

    def bsp(self) -> None:
        """Phase by phase as ``run_dataflow(mode='bsp')``: fire, barrier, one Alltoallv of the phase."""
        import simpy

        r, gpus = self.routes, self.gpus
        orders = [f.bsp_order() for f in self.firings]
        env = simpy.Environment()
        cpu = Processors(env, self.profile, self.gpus)
        clocks = np.zeros(gpus)  # when each rank reached the barrier, then when it left it

        def rank_phase(me, vertices, sent, met, arrived):
            """Fire this rank's vertices of the phase, then wait at the barrier until all have."""
            for u in vertices:
                sent.extend((yield from self._compute(env, cpu, me, *self._fire(me, u))))
            yield from self._host_done(env, me)
            clocks[me] = env.now
            cpu.release(me)
            arrived.append(me)
            if len(arrived) == gpus:  # the last rank in: the barrier completes after its rounds
                yield env.timeout(self.profile.barrier_seconds(gpus))
                met.succeed()
            else:
                yield from cpu.wait(me, met)
            self.wait[me] += env.now - clocks[me]
            self._span(me, "barrier", clocks[me], env.now)
            clocks[me] = env.now  # out of the barrier, into the Alltoallv

        def phases():
            starts = [0] * gpus
            for i in range(len(orders[0][0])):
                sent, met, arrived = [], env.event(), []
                yield env.all_of([env.process(rank_phase(me, order[starts[me]:bounds[i]].tolist(), sent, met, arrived))
                                  for me, (_, order, bounds) in enumerate(orders)])
                starts = [bounds[i] for _, _, bounds in orders]
                sent = np.array(sent, np.int64)
                exchange = self._alltoallv(sent)  # from the last rank out of the barrier
                self.messages += np.bincount(r.group_source_rank[sent], minlength=gpus)
                for g in sent.tolist():
                    self.firings[int(r.group_rank[g])].received(g, None)
                done = env.now + exchange  # the Alltoallv ends together, after the last rank joined it
                for me in range(gpus):
                    self._span(me, "recv", clocks[me], done)
                self.comm += done - clocks
                yield env.timeout(exchange)
            self.end[:] = env.now

        env.process(phases())
        env.run()

    def _alltoallv(self, groups: np.ndarray) -> float:
        """Seconds of an Alltoallv of the messages ``groups``: the busiest rank's bytes in or out over
        its links, plus one latency per peer it talks to."""
        r = self.routes
        return exchange_seconds(self.profile, r.group_source_rank[groups], r.group_rank[groups],
                                4.0 * r.group_size[groups], self.gpus)
