"""A superstep's exchange and gather a slice of the message columns at a time, so that a rank never
holds more ghost rows than its memory allows.

The ghost rows a rank receives (one row per remote in-neighbour) do not shrink as ranks are added
until each rank's edges are fewer than the graph's vertices: at 10M vertices and 100M power-law
edges a rank of P = 2 receives 4.6M rows, one of P = 3 5.6M. For a GNN layer's 64 float32 columns
that is 1.2-1.5 GB a rank, next to the rank's own rows and the gathered rows. The combiners ``sum``,
``mean``, ``max`` and ``min`` reduce every column on its own, in the same order of edges whatever the
other columns, so a superstep can exchange and gather columns ``a:b`` alone, write them into columns
``a:b`` of the gathered rows (``kernels.gather.gather_reduce``'s ``out``) and go on with the next
slice: the result is the same bit for bit, and the ghost rows held at once shrink by the number of
slices. A slice's own rows are copied next to each other first ([n, b - a]): a gather that read a
few columns of every wide row where they lie took three times as long.

Slicing costs time: every slice is another exchange and another pass over the rank's edges (the
README's "Ghost rows a slice of columns at a time" measures it on the 100M-edge graph). So by
default a superstep is sliced only where its ghost rows would not fit, not where they merely could be
smaller: where with its gathered rows they would take more than ``DEFAULT_SHARE`` of the memory
available to each rank of the machine as the superstep starts (``default_ghost_memory``).
``pregel infer --ghost-memory MIB`` (``run``'s ``ghost_memory``) sets the bound itself. Every rank
takes the largest count any rank asks for (one small ``allgather``): each slice is a collective
exchange.
"""

import time

import numpy as np

from pregel.comm import local_ranks
from pregel.exchange import Outgoing, exchange
from pregel.memory import available_memory

#: combiners that reduce every column on its own (a per-edge message or a softmax mixes them)
COLUMNWISE = ("sum", "mean", "max", "min")
#: by default, a superstep's ghost rows and gathered rows may take this share of the memory available
#: to a rank (the rest: the layer's other arrays)
DEFAULT_SHARE = 0.9


def default_ghost_memory(size: int, gathered_bytes: int) -> int:
    """Bytes of ghost rows a rank may hold at once by default: ``DEFAULT_SHARE`` of the memory available
    now, shared by the ranks the launcher started on this machine (all ``size`` ranks when it does not
    say), less the ``gathered_bytes`` that the superstep's gathered rows will take whatever the slices
    (at most 0: one column at a time)."""
    return int(available_memory() * DEFAULT_SHARE / (local_ranks() or size)) - gathered_bytes


def column_slices(graph, program, out: Outgoing, ghost_memory: int | None = None) -> list | None:
    """The column slices (``slice`` objects, in order) in which this superstep's messages go, or None to
    send them whole (collective: every rank gets the same answer; ``out``: this rank's ``Outgoing``).

    Sliced when ``program``'s combiner is in ``COLUMNWISE``, its messages are not per edge, and some
    rank's ghost rows ([g, F] of the messages' dtype) are over ``ghost_memory`` bytes (None:
    ``default_ghost_memory``, read now): then into as many slices of nearly equal width as that rank
    needs to stay under it (at most F, one column each). The caller leaves out programs whose
    supersteps may run on their fronts (``pregel.superstep.runs_on_fronts``): a rank takes that path on
    its own."""
    if program.combiner not in COLUMNWISE or program.per_edge or graph.comm.size == 1:
        return None
    values = out.values
    width = values.shape[1] if values is not None and values.ndim == 2 else 0
    row_bytes = width * (0 if values is None else values.dtype.itemsize)
    ghost_bytes, wanted = graph.num_ghosts * row_bytes, 0
    if ghost_bytes:
        if ghost_memory is None:
            ghost_memory = default_ghost_memory(graph.comm.size, graph.num_local * row_bytes)
        wanted = min(-(-ghost_bytes // ghost_memory), width) if ghost_memory > 0 else width
    votes = graph.comm.allgather((wanted, width))
    count, width = max(v[0] for v in votes), max(v[1] for v in votes)
    if count <= 1:
        return None
    widths = [len(part) for part in np.array_split(np.arange(width), count)]
    starts = np.concatenate([[0], np.cumsum(widths)])
    return [slice(int(a), int(b)) for a, b in zip(starts[:-1], starts[1:])]


def sliced(out: Outgoing, columns: slice) -> Outgoing:
    """``out`` with its message rows cut to ``columns`` (copied next to each other: [n, b - a]) and its
    direct rows too (views: the exchange packs them)."""
    values = None if out.values is None else np.ascontiguousarray(out.values[:, columns])
    direct = out.direct_values[:, columns] if out.direct_values.ndim == 2 else out.direct_values
    return Outgoing(values, out.senders, out.direct_ids, direct, out.direct_counts)


class SlicedIncoming:
    """What this rank receives in a superstep sliced by columns: the first slice's ``Incoming`` at
    once, the others exchanged one by one by ``gather``, each after the last slice's ghost rows are let
    go. The engine reads the counters of an ``Incoming`` here, over all slices (each row counted
    once); ``exchange_seconds``: the time of the exchanges that ``gather`` ran."""

    def __init__(self, graph, out: Outgoing, columns: list, with_counts: bool):
        self.graph, self.out, self.columns, self.with_counts = graph, out, columns, with_counts
        self.part = sliced(out, columns[0])
        self.first = exchange(graph, self.part, with_counts, keep_pages=False)
        self.rows_sent, self.rows_received = self.first.rows_sent, self.first.rows_received
        self.bytes_sent, self.bytes_received = self.first.bytes_sent, self.first.bytes_received
        self.exchange_seconds = 0.0

    def gather(self, superstep):
        """(gathered [n, F], received [n] bool): ``superstep.gather`` (a ``pregel.superstep.Superstep``)
        of each slice, written into its columns of one [n, F] array."""
        part, inc, received = self.part, self.first, None
        self.part = self.first = None  # the first slice's rows go once gathered
        gathered = np.empty((self.graph.num_local, self.columns[-1].stop), inc.dtype or np.float64)
        for index, columns in enumerate(self.columns):
            if index:
                part = sliced(self.out, columns)
                started = time.perf_counter()
                inc = exchange(self.graph, part, self.with_counts, keep_pages=False)
                self.exchange_seconds += time.perf_counter() - started
                self.bytes_sent += inc.bytes_sent
                self.bytes_received += inc.bytes_received
            _, received = superstep.gather(part, inc, into=gathered[:, columns])
            part = inc = None  # this slice's rows (the ghost rows: a view of the shared window) go
        return gathered, received
