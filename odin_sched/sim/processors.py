"""What the simulator's virtual ranks compute on: a processor each (GPUs), or a few processors shared the way
Linux's fair scheduler shares them (``Processors``), as ranks that outnumber this machine's cores do."""
import math
from dataclasses import dataclass

import numpy as np

from odin_sched.sim.costmodel import CostProfile


@dataclass
class _Turn:
    """A rank's hold on a shared processor: its granted SimPy request, the seconds left of its time
    slice, and when its current computation began."""

    request: object
    slice_left: float
    began: float = 0.0


class Processors:
    """What the virtual ranks compute on (in a SimPy environment): a processor each (``profile.cores``
    = 0, as GPUs), or ``cores`` processors shared by all ranks the way Linux's fair scheduler shares
    them. A rank keeps its processor from one computation to the next for at most
    ``profile.time_slice`` seconds and gives it up when it waits for a message or has no more work
    (``release``); a free processor goes to the waiting rank that has had the least processor time.
    When the ranks outnumber the processors, a rank waiting for a message looks for it like the
    runtime then does (``pregel.comm.Comm``): ``profile.poll_seconds`` of processor time, then a sleep
    of ``profile.poll_sleep`` seconds, so it notices a message only at a look. A look that wakes up
    takes a processor at once only from a rank that has had more processor time than the looking one
    (which then queues again), else it waits for one: a rank that has just computed a lot may miss its
    message for up to a time slice. Otherwise it waits inside MPI and notices a message at once.
    Sharing processors, a rank loses ``profile.switch_seconds`` each time it gets one back."""

    def __init__(self, env, profile: CostProfile, ranks: int):
        import simpy

        self.env, self.time_slice = env, profile.time_slice if profile.time_slice > 0 else math.inf
        self.poll_seconds, self.poll_sleep = profile.poll_seconds, profile.poll_sleep
        self.cores = simpy.PreemptiveResource(env, capacity=profile.cores) if profile.cores else None
        shared = self.cores is not None and ranks > profile.cores
        self.polls = shared and self.poll_sleep > 0
        self.switch_seconds = profile.switch_seconds if shared else 0.0
        self.used = np.zeros(ranks)  # processor seconds each rank has had
        self.held = {}  # rank -> its _Turn on a processor

    def hold(self, rank: int, seconds: float):
        """SimPy process steps: ``rank`` computes for ``seconds`` of processor time. It keeps its
        processor from one computation to the next until its time slice is used up, a look takes it,
        or it waits (``release``)."""
        import simpy

        if self.cores is None:
            yield self.env.timeout(seconds)
            return
        left = seconds
        while left > 0:
            if rank not in self.held:
                request = self.cores.request(priority=self.used[rank], preempt=False)
                try:
                    yield request
                except simpy.Interrupt:  # granted, then taken by a look before this rank ran: queue again
                    continue
                self.held[rank] = _Turn(request, self.time_slice)
                left += self.switch_seconds  # the caches another rank filled are refilled
            turn = self.held[rank]
            turn.began, run = self.env.now, min(left, turn.slice_left)
            try:
                yield self.env.timeout(run)
            except simpy.Interrupt:  # a look took the processor
                run = self.env.now - turn.began
                del self.held[rank]
            self.used[rank] += run
            left -= run
            if rank in self.held:
                turn.slice_left -= run
                if turn.slice_left <= 0:  # the slice is used up: queue again
                    self.release(rank)

    def release(self, rank: int):
        """``rank`` gives up its processor (it waits, or has no more work)."""
        turn = self.held.pop(rank, None)
        if turn is not None:
            self.cores.release(turn.request)

    def wait(self, rank: int, event):
        """SimPy process steps: until ``event`` has happened and ``rank`` has noticed it."""
        self.release(rank)
        if not self.polls:
            yield event
            return
        while not event.processed:  # the first look is the caller's: then sleep, wake, look again
            yield self.env.timeout(self.poll_sleep)
            yield from self._look(rank)

    def _look(self, rank: int):
        """SimPy process steps: ``poll_seconds`` of processor time for ``rank``'s look, taken at once
        from the rank that has had the most processor time if that is more than ``rank`` has had."""
        import simpy

        left = self.poll_seconds
        while left > 0:
            for other, turn in self.held.items():  # SimPy pre-empts by key: what each has had by now
                turn.request.key = (self.used[other] + self.env.now - turn.began, *turn.request.key[1:])
            with self.cores.request(priority=self.used[rank], preempt=True) as request:
                try:
                    yield request
                except simpy.Interrupt:  # granted, then taken by another look before this rank ran
                    continue
                began, run = self.env.now, left
                try:
                    yield self.env.timeout(run)
                except simpy.Interrupt:  # another look took the processor
                    run = self.env.now - began
                self.used[rank] += run
                left -= run
