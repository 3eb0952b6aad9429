"""Running a vertex program on the GPU (``pregel run`` and ``pregel infer`` with ``--device cuda``): the
data path on device arrays.

Each rank drives one GPU (``pregel.device.select_gpu``). Its in-edge CSR, the ghost exchange plan
and the vertex state are torch tensors on that GPU; messages are gathered there by
``gather_reduce``'s CUDA kernel, and ghost rows cross ranks through ``DeviceComm`` (CUDA-aware MPI,
or staged through pinned host buffers; their counts are fixed at load time, so no count exchange).
Only control values cross to the host: one small allgather per superstep (whether any rank hit
something unsupported, the kind of rows each rank sends and whether all its vertices send),
aggregators, halt votes, and the final values.

Supported: combiners sum, min, max and mean, with or without per-edge transforms
(``edge_message``, ``destination_values``) and edge weights. Not yet: the softmax combiner and
programs without a combiner, ``ctx.send_to``, partial gather of hubs (switched off: a hub's in-edges
are gathered by its owner) and checkpoints; each is refused with one line (``InputError``).
"""

from functools import cache

import numpy as np

from kernels._device import SIMULATED, across
from kernels.gather import gather_reduce
from pregel.arrays import TorchNamespace, wire
from pregel.device import select_gpu
from pregel.device_comm import DeviceComm
from pregel.dgraph import HubOptions
from pregel.errors import InputError
from pregel.exchange import Incoming, Outgoing
from pregel.program import Context, VertexArrays
from pregel.superstep import IDENTITY, EdgeIds, check_message_rows, finish_gather, rows_like

SUPPORTED_COMBINERS = ("sum", "min", "max", "mean")


def torch_device(index: int) -> str:
    """The torch device of GPU ``index`` (the CPU under the simulator: see ``kernels._device.across``)."""
    if SIMULATED:
        return "cpu"
    import torch

    torch.cuda.set_device(index)
    return f"cuda:{index}"


def unsupported(program, hubs: HubOptions | None, checkpoint) -> str | None:
    """Why ``program`` with these hub options and checkpointer cannot run on the GPU yet, or None."""
    for user, combiner in program.combiners().items():
        if combiner not in SUPPORTED_COMBINERS:
            return (f"`device` cuda: {user} uses combiner {combiner!r}; only "
                    f"{', '.join(SUPPORTED_COMBINERS)} are supported on the GPU yet")
    if checkpoint is not None:
        return "`device` cuda: checkpoints (`checkpoint_dir`, `resume`) are not supported on the GPU yet"
    if hubs is not None and (hubs.partial_gather or not hubs.shadow_nodes):
        return ("--device cuda: partial gather and switching shadow nodes off are not supported on "
                "the GPU yet (every in-edge is gathered by its destination's owner)")
    return None


class Gpu:
    """This rank's GPU for one run: the array namespace, the transport of device rows, and what
    the result file records about them. Build it with ``Gpu.open``."""

    def __init__(self, comm, index: int):
        self.index = index
        self.xp = TorchNamespace(torch_device(index))
        self.transport = DeviceComm(comm)

    @classmethod
    def open(cls, comm, program, hubs: HubOptions | None, checkpoint) -> tuple["Gpu", HubOptions]:
        """Collectively: refuse what the GPU path does not support (one ``InputError`` on every
        rank), pick this rank's GPU; returns it with the hub options to load the graph with."""
        problem = unsupported(program, hubs, checkpoint)
        comm.agree(None if problem is None else InputError(problem))
        return cls(comm, select_gpu(comm)), hubs or HubOptions(partial_gather=False)

    def context(self, graph) -> Context:
        """The programs' ``Context`` of ``graph`` with device arrays."""
        return Context(graph, xp=self.xp, vertices=VertexArrays(graph, self.xp.asarray))

    def path(self, graph, program, ctx) -> "DevicePath":
        """The data path of a run of ``program`` on the GPU."""
        return DevicePath(graph, program, ctx, self.transport)

    def attributes(self, comm) -> dict:
        """``cuda_aware_mpi`` and ``bytes_staged`` (summed over ranks) for the result file; collective."""
        return {"cuda_aware_mpi": self.transport.cuda_aware,
                "bytes_staged": int(sum(comm.allgather(self.transport.bytes_staged)))}


class DevicePath:
    """The data path of a run on device tensors; the engine calls ``front``, ``outgoing``,
    ``exchange`` and ``gather`` once each per superstep, as on ``pregel.superstep.HostPath``."""

    def __init__(self, graph, program, ctx: Context, transport: DeviceComm):
        if graph.any_source_side:
            raise ValueError("the GPU path needs a graph loaded without source-side (hub) edges")
        self.graph, self.program, self.ctx, self.transport = graph, program, ctx, transport
        xp = self.xp = ctx.xp
        self.indptr = xp.asarray(graph.in_indptr)        # [n + 1]
        self.indices = xp.asarray(graph.in_indices)      # [E] columns in [owned | ghosts]
        self.send_index = xp.asarray(graph.send_index)   # [s] owned rows to send, by rank
        self.kernel_indptr, self.kernel_indices = across(self.indptr), across(self.indices)
        self.in_counts = xp.astype(self.indptr[1:] - self.indptr[:-1], xp.float64)  # [n]
        self._weights = {}   # dtype -> Numba view of the in-edge weights [E] in that dtype
        self._per_edge = None
        self.partial = False  # whether some rank's vertices do not all send this superstep
        self.dst_values = None

    # ------------------------------------------------------------------ sender side

    @staticmethod
    def front(active, active_rows=None) -> None:
        """None: every superstep on the device passes every row (``HostPath.front`` has no twin here)."""
        return None

    def outgoing(self, state, active) -> Outgoing:
        """Call ``message`` (and ``destination_values``); agree with every rank on the kind of rows
        sent and on whether all vertices send."""
        program, ctx, xp = self.program, self.ctx, self.xp
        sent = program.message(ctx, state)
        senders = active
        if isinstance(sent, tuple):
            sent, senders = sent
            senders = xp.astype(xp.asarray(senders), xp.bool, copy=False)
        values = None if sent is None else check_message_rows(program, wire(sent, self.xp), self.graph.num_local)
        if program.per_edge:
            dst = program.destination_values(ctx, state)
            self.dst_values = None if dst is None else wire(dst, self.xp)
        problem = unsupported(program, None, None) or (
            "--device cuda: ctx.send_to (messages to arbitrary vertices) is not supported on the GPU yet"
            if ctx._direct else None)
        all_send = values is not None and bool(senders.all())
        mine = None if values is None else (values.dtype, tuple(values.shape[1:]))
        everyone = self.graph.comm.agree(None if problem is None else InputError(problem), (mine, all_send))
        kinds = {kind for kind, _ in everyone if kind is not None}
        if len(kinds) > 1:
            raise ValueError(f"ranks send different message rows: {sorted(map(str, kinds))}; message() "
                             "must return the same dtype and width on every rank")
        self.partial = not all(every for _, every in everyone)
        if values is None:
            dtype, row_shape = kinds.pop() if kinds else (xp.float64, ())
            values = xp.zeros((self.graph.num_local,) + row_shape, dtype)
            senders = xp.full(self.graph.num_local, False)
        return Outgoing(values, senders if self.partial else None, None, None, None)

    # ------------------------------------------------------------------ between ranks

    def exchange(self, out: Outgoing) -> Incoming:
        """The rows (and, when not every vertex sends, the sent flags) of this rank's ghosts."""
        g = self.graph
        ghosts = self._ghost_rows(out.values)
        ghost_sent = None if out.senders is None else self._ghost_rows(out.senders)
        row_bytes = out.values.element_size() * int(np.prod(out.values.shape[1:])) + (out.senders is not None)
        others = np.arange(g.comm.size) != g.comm.rank
        rows_sent, rows_received = int(g.send_counts[others].sum()), int(g.ghost_counts[others].sum())
        return Incoming(ghosts, ghost_sent, out.values.dtype, tuple(out.values.shape[1:]), None, None, None,
                        rows_sent, rows_received, rows_sent * row_bytes, rows_received * row_bytes)

    def _ghost_rows(self, rows):
        """[g, ...] the rows of this rank's ghosts, from every owner's ``rows`` [n, ...] along the plan."""
        g = self.graph
        received = self.transport.alltoallv_known(across(rows[self.send_index]), g.send_counts, g.ghost_counts)
        return across(received)

    # ------------------------------------------------------------------ receiver side

    def gather(self, out: Outgoing, inc: Incoming):
        """(gathered [n] / [n, F], received [n] bool), on the device."""
        xp, combiner = self.xp, self.program.combiner
        op, identity = ("sum" if combiner == "mean" else combiner), IDENTITY[combiner]
        ext = xp.concatenate([out.values, inc.ghost_values])  # [n + g] rows of [owned | ghosts]
        sent_ext = None if out.senders is None else xp.concatenate([out.senders, inc.ghost_sent])
        if self.program.per_edge:
            per_edge = self._edge_values(ext)
            if sent_ext is not None:
                per_edge = xp.where(rows_like(sent_ext[self.indices], per_edge), per_edge, identity)
            gathered = self._gather(self._edges["positions"], per_edge, op)
        else:
            if sent_ext is not None:  # non-senders contribute the identity
                ext = xp.where(rows_like(sent_ext, ext), ext, identity)
            gathered = self._gather(self.kernel_indices, ext, op, self.program.weighted, self.program.weight_op)
        count = (self.in_counts if sent_ext is None else
                 self._gather(self.kernel_indices, xp.astype(sent_ext, xp.float64), "sum"))
        return finish_gather(gathered, count, combiner, xp)

    def _gather(self, columns, x, op: str, weighted: bool = False, weight_op: str = "mul"):
        """``gather_reduce`` over the in-edge CSR on the device: x [m] / [m, F] tensor, ``columns`` a
        Numba view of [E] rows of x, weighted by the in-edge weights with ``weight_op`` when
        ``weighted``; returns a tensor [n] / [n, F]."""
        weights = self._weight_view(x.dtype) if weighted else None
        return across(gather_reduce(self.kernel_indptr, columns, across(x), op, weights, weight_op=weight_op,
                                    check=False))

    def _weight_view(self, dtype):
        if self.graph.in_weights is None:
            return None
        if dtype not in self._weights:
            self._weights[dtype] = across(self.xp.astype(self.xp.asarray(self.graph.in_weights), dtype))
        return self._weights[dtype]

    @property
    def _edges(self) -> dict:
        """Per-edge device arrays for ``edge_message``, copied on first use: weights [E] (ones
        without weights), positions (a Numba view of 0..E-1); and functions that give the (src, dst)
        global ids [E] and the dst rows [E] on the device, copied at their first call (a program that
        reads no edge ids and has no destination terms, as weighted sssp, never holds them: 24 bytes
        an edge)."""
        if self._per_edge is None:
            xp = self.xp
            weights, ids, rows = EdgeIds(self.graph).dst_side
            num_edges = len(self.graph.in_indices)
            if weights is None:
                weights = np.ones(num_edges, np.float32)
            self._per_edge = {"weights": xp.asarray(weights),
                              "ids": cache(lambda: tuple(xp.asarray(part) for part in ids())),
                              "rows": cache(lambda: xp.asarray(rows())),
                              "positions": across(xp.asarray(np.arange(num_edges, dtype=np.int64)))}
        return self._per_edge

    def _edge_values(self, ext):
        """The program's per-edge messages [E] / [E, F] (``edge_message`` on device tensors)."""
        edges, ctx = self._edges, self.ctx
        dst_values = None if self.dst_values is None else self.dst_values[edges["rows"]()]
        ctx._set_edges(edges["ids"])
        values = self.program.edge_message(ctx, ext[self.indices], dst_values, edges["weights"])
        ctx._set_edges(None)
        return wire(values, self.xp)
