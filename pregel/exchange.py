"""The per-superstep message exchange: one ``Alltoall`` of headers, then the payloads by ``Alltoallv``.

What rank ``r`` sends to rank ``q`` in one superstep, packed into one byte block:

* ghost values — the message values of the owned vertices that ``q`` holds as ghosts (the
  exchange plan), each sent once however many of ``q``'s edges it has: with every vertex sending,
  just the rows in plan order; otherwise the slots (positions in the plan) of the senders, then
  their rows;
* direct messages — messages to arbitrary vertices owned by ``q``, already combined per
  destination on ``r``: global ids, then per-message counts (for ``mean``), then the rows.

The header ``(ghost rows, slots present, direct rows, ghost dtype code, ghost row width, direct
dtype code, direct row width, ghost offset, shared-window flags)`` goes first, so each side knows
every block's layout; the last two are the row at which the receiver keeps the sender's ghost rows
and the receiver's ``pregel.shared_rows`` flags. Rows are
float32 or float64, ``[F]`` or scalar (width 0); every rank that sends must send the same kind of
ghost row (and of direct row: partial softmax rows are wider than the messages).

The common case, every vertex of every rank sending along its edges (a GNN layer, PageRank), moves
each row once on each side: the sender takes its rows in plan order straight into the send buffer
(no per-block packing), and the receiver gets them straight into the ghost part of one [n + g]
buffer (``Incoming.ext``): a gather that reads the owned and ghost rows where they lie (the mean,
sum, max and min gathers) never touches its owned part, so those pages are never resident; other
gathers have the owned rows copied in front once (``Incoming.extended``), then read it as it is (no
unpacking, no concatenation). When all ranks run on one machine, the rows go instead straight from
the sender's message array into the receiver's segment of a shared-memory window
(``pregel.shared_rows``: one copy, no ``Alltoallv``), and the gathers read them there. The direct
messages (partial aggregates of hubs) follow in a second ``Alltoallv``. Every rank sees every
rank's header, so all of them choose the shared window, this split exchange or the single packed
one alike.
"""

from dataclasses import dataclass

import numpy as np

from pregel.edge_order import stable_order
from pregel.shared_rows import ALLTOALLV, BUSY, GROW, prefers_alltoallv, shared_rows

_ID = np.dtype(np.int64)
WIRE_DTYPES = (None, np.dtype(np.float32), np.dtype(np.float64))  # header code -> dtype
_WIRE_CODE = {np.dtype(np.float32): 1, np.dtype(np.float64): 2}


@dataclass
class Outgoing:
    """What this rank sends in one superstep.

    values: [n] / [n, F] float32/float64 message values of the owned vertices, or None when this
    rank sends nothing along edges; senders: [n] bool, or None when every owned vertex sends; direct_ids: [k] int64 global destination ids (unique after the
    sender-side combine); direct_values: [k] / [k, F]; direct_counts: [k] int64 (mean only) or None.
    """

    values: np.ndarray
    senders: np.ndarray | None
    direct_ids: np.ndarray
    direct_values: np.ndarray
    direct_counts: np.ndarray | None


@dataclass
class Incoming:
    """What this rank received in one superstep.

    ghost_values: [g] / [g, F] (rows of ghosts that sent; others 0); ghost_sent: [g] bool or
    None when every ghost sent; dtype, row_shape: the kind of row every sending rank sent (None
    and () when no rank sent anything); direct_ids: [m] global ids owned here; direct_values: [m] / [m, F];
    direct_counts: [m] int64 or None. The counters exclude what a rank sends to itself.
    ext: [n + g] / [n + g, F] room for the owned rows then the ghost rows (``ghost_values`` is a
    view of its ghost part; the owned part is filled by ``extended``), when the exchange built it;
    else None.
    """

    ghost_values: np.ndarray
    ghost_sent: np.ndarray | None
    dtype: np.dtype | None
    row_shape: tuple
    direct_ids: np.ndarray
    direct_values: np.ndarray
    direct_counts: np.ndarray | None
    rows_sent: int
    rows_received: int
    bytes_sent: int
    bytes_received: int
    ext: np.ndarray | None = None
    owned_filled: bool = False
    exchange_seconds: float = 0.0  # exchanges run later, inside the gather (``pregel.column_slices``): none here

    def extended(self, own: np.ndarray) -> np.ndarray:
        """[n + g] / [n + g, F]: the owned rows ``own`` [n] / [n, F] then the ghost rows (copied into
        ``ext`` once, or concatenated when the exchange built no ``ext``)."""
        if self.ext is None:
            return np.concatenate([own, self.ghost_values]) if len(self.ghost_values) else own
        if not self.owned_filled:
            self.ext[:len(own)] = own
            self.owned_filled = True
        return self.ext


def exchange(graph, out: Outgoing, with_counts: bool, shared: bool = True, keep_pages: bool = True) -> Incoming:
    """Send ``out`` along the exchange plan of ``graph`` and receive this rank's messages
    (``shared``: through the shared-memory window when the ranks are on one machine; the same on
    every rank). ``keep_pages`` False: through the window even where ``Alltoallv`` would be faster,
    emptying its pages however few (``pregel.shared_rows``: the least memory, for
    ``pregel.column_slices``)."""
    comm, size = graph.comm, graph.comm.size
    ghost_kind = _row_kind(out.values, always=True)
    direct_kind = _row_kind(out.direct_values, always=False)
    direct_owner = graph.partition.owner(out.direct_ids)
    direct_order, direct_counts = stable_order(direct_owner, size)  # a counting sort by destination rank
    direct_offsets = np.concatenate([[0], np.cumsum(direct_counts)])
    direct = []  # per rank: the bytes of its direct messages (ids, counts for mean, rows)
    for q in range(size):
        picked = direct_order[direct_offsets[q]:direct_offsets[q + 1]]
        fields = [out.direct_ids[picked]] + ([out.direct_counts[picked]] if with_counts else [])
        direct.append(_to_bytes(fields + [out.direct_values[picked]]))

    header = np.zeros((size, 9), dtype=np.int64)
    header[:, 3:5] = _encode(ghost_kind)
    header[:, 5:7] = _encode(direct_kind)
    header[:, 2] = np.diff(direct_offsets)
    rows_only = out.values is not None and out.senders is None
    if rows_only:
        header[:, 0] = graph.send_counts
        row_bytes = graph.send_counts * _row_bytes(*_encode(ghost_kind))
    else:
        blocks = _slot_blocks(graph, out, header)
    window = shared_rows(comm) if shared and size > 1 else None
    header[:, 7] = np.cumsum(graph.ghost_counts) - graph.ghost_counts
    header[:, 8] = BUSY  # no shared window this time, unless this rank has one and may take rows into it
    if window is not None and rows_only:
        width = _row_bytes(*_encode(ghost_kind))
        sent, received = len(graph.send_index) * width, graph.num_ghosts * width
        header[:, 8] = window.flags(received) | (prefers_alltoallv(
            sent, received, max(sent, (graph.num_local + graph.num_ghosts) * width)) if keep_pages else 0)
    recv_header = comm.alltoall_counts(header)
    recv_bytes = np.array([_block_bytes(h, with_counts) for h in recv_header], dtype=np.int64)
    direct_bytes = np.array([len(b) for b in direct], dtype=np.int64)
    if size > 1 and not recv_header[:, 1].any():  # every rank sends rows only: split exchange
        if (recv_header[:, 8] & BUSY).any() or (recv_header[:, 8] & ALLTOALLV).all():
            window = None  # some rank has no window or still reads the rows of an earlier exchange, or
            # every rank prefers Alltoallv (pregel.shared_rows.prefers_alltoallv)
        incoming = _split_exchange(graph, out, row_bytes, direct, direct_bytes, recv_header,
                                   with_counts, ghost_kind, direct_kind, window, keep_pages)
        block_bytes = row_bytes + direct_bytes
    else:
        if rows_only:  # the rows in plan order, taken at once
            rows = np.take(out.values, graph.send_index, axis=0)
            blocks = np.split(_flat_bytes(rows), np.cumsum(row_bytes)[:-1])
        send = [np.concatenate([blocks[q], direct[q]]) for q in range(size)]
        block_bytes = np.array([len(b) for b in send], dtype=np.int64)
        payload = comm.alltoallv_known(np.concatenate(send), block_bytes, recv_bytes)
        incoming = _unpack(graph, payload, recv_header, recv_bytes, with_counts, ghost_kind, direct_kind)
    others = np.arange(size) != comm.rank
    incoming.rows_sent = int((header[others, 0] + header[others, 2]).sum())
    incoming.rows_received = int((recv_header[others, 0] + recv_header[others, 2]).sum())
    incoming.bytes_sent = int(block_bytes[others].sum())
    incoming.bytes_received = int(recv_bytes[others].sum())
    return incoming


def _slot_blocks(graph, out: Outgoing, header) -> list:
    """Per rank, the bytes of the ghost part of the general layout (the slots of the senders, then
    their rows; nothing when this rank sends no rows), with ``header``'s first two columns set."""
    send_offsets = np.concatenate([[0], np.cumsum(graph.send_counts)])
    blocks = []
    for q in range(graph.comm.size):
        plan = graph.send_index[send_offsets[q]:send_offsets[q + 1]]
        fields = [np.zeros(0, _ID)]
        if out.values is not None:
            slots = np.flatnonzero(out.senders[plan])
            fields = [slots, out.values[plan[slots]]]
        header[q, :2] = (len(fields[0]), 1)
        blocks.append(_to_bytes(fields))
    return blocks


def _split_exchange(graph, out, row_bytes, direct, direct_bytes, recv_header, with_counts,
                    ghost_kind, direct_kind, window, keep_pages) -> Incoming:
    """The rows, then the direct messages by ``Alltoallv`` (empty ones too: every rank takes part).
    The rows go through the shared ``window`` (``pregel.shared_rows.SharedRows``) when there is one,
    else by ``Alltoallv`` straight into the ghost part of a [n + g] buffer whose owned part is
    filled only if a gather asks for it (``Incoming.extended``)."""
    comm, n, g = graph.comm, graph.num_local, graph.num_ghosts
    dtype, row_shape = _agreed_kind(ghost_kind, recv_header, 3, "message rows")
    if not np.array_equal(recv_header[:, 0], graph.ghost_counts):
        raise ValueError("exchange plan mismatch: a rank sent another number of rows than this rank has ghosts")
    width = _row_bytes(*_encode((dtype, row_shape)))
    if window is not None:
        if (recv_header[:, 8] & GROW).any():
            window.grow(g * width)
        ext, ghosts = None, window.transfer(out.values, graph.send_index, graph.send_counts, recv_header[:, 7], g,
                                            keep_pages)
    else:
        rows = np.take(out.values, graph.send_index, axis=0)
        ext = np.empty((n + g,) + row_shape, dtype)
        ghosts = ext[n:]
        comm.alltoallv_bytes(_flat_bytes(rows), row_bytes, _flat_bytes(ghosts), graph.ghost_counts * width)
    recv_direct = np.array([_block_bytes((0, 0, *h[2:7]), with_counts) for h in recv_header], dtype=np.int64)
    payload = comm.alltoallv_known(np.concatenate(direct), direct_bytes, recv_direct)
    ids, values, counts = _read_direct(payload, recv_header, recv_direct, with_counts, direct_kind, None)
    return Incoming(ghosts, None, dtype, row_shape, ids, values, counts, 0, 0, 0, 0, ext)


def _flat_bytes(array: np.ndarray) -> np.ndarray:
    """A flat uint8 view of a contiguous array (an empty buffer for an empty one)."""
    return array.reshape(-1).view(np.uint8) if array.size else np.empty(0, np.uint8)


def _row_kind(values, always: bool):
    """(dtype, row shape) of ``values`` [k] / [k, F], or (None, ()) when there are none to send
    (``always``: an empty array still tells the kind, as a rank without vertices has)."""
    if values is None or not (len(values) or always):
        return None, ()
    if values.dtype not in _WIRE_CODE or values.ndim not in (1, 2):
        raise ValueError(f"messages must be float32/float64 arrays [n] or [n, F], "
                         f"got {values.dtype} with shape {values.shape}")
    return values.dtype, values.shape[1:]


def _encode(kind):
    dtype, row_shape = kind
    return (0 if dtype is None else _WIRE_CODE[dtype]), (row_shape[0] if row_shape else 0)


def _decode(code, width):
    return WIRE_DTYPES[int(code)], ((int(width),) if width else ())


def _row_bytes(code, width) -> int:
    return 0 if code == 0 else WIRE_DTYPES[int(code)].itemsize * max(int(width), 1)


def _block_bytes(header_row, with_counts) -> int:
    k, has_slots, m, ghost_code, ghost_width, direct_code, direct_width = (int(v) for v in header_row[:7])
    return (k * (_row_bytes(ghost_code, ghost_width) + has_slots * _ID.itemsize)
            + m * (_row_bytes(direct_code, direct_width) + _ID.itemsize * (1 + with_counts)))


def _agreed_kind(mine, recv_header, code_column, what):
    """The kind of row every sending rank uses (they must agree); (None, ()) when none sends."""
    kinds = {_decode(h[code_column], h[code_column + 1]) for h in recv_header if h[code_column]}
    if mine[0] is not None:
        kinds.add((mine[0], tuple(mine[1])))
    if len(kinds) > 1:
        raise ValueError(f"ranks send different {what}: {sorted(map(str, kinds))}; message() must "
                         "return the same dtype and width on every rank")
    return kinds.pop() if kinds else (None, ())


def _unpack(graph, payload, recv_header, recv_bytes, with_counts, ghost_kind, direct_kind) -> Incoming:
    dtype, row_shape = _agreed_kind(ghost_kind, recv_header, 3, "message rows")
    g = graph.num_ghosts
    ghost_values = np.zeros((g,) + row_shape, dtype=dtype or np.float64)
    partial = bool(recv_header[:, 1].any())
    ghost_sent = np.zeros(g, dtype=bool) if partial else None
    ghost_offsets = np.concatenate([[0], np.cumsum(graph.ghost_counts)])
    readers = []
    position = 0
    for p, (k, has_slots, *_) in enumerate(recv_header):
        reader = _Reader(payload[position:position + recv_bytes[p]])
        position += int(recv_bytes[p])
        base = ghost_offsets[p]
        if has_slots:
            slots = base + reader.take(_ID, k, ())
            ghost_values[slots] = reader.take(ghost_values.dtype, k, row_shape)
            ghost_sent[slots] = True
        else:
            ghost_values[base:base + k] = reader.take(ghost_values.dtype, k, row_shape)
            if partial:
                ghost_sent[base:base + k] = True
        readers.append(reader)
    ids, values, counts = _read_direct(None, recv_header, None, with_counts, direct_kind, readers)
    return Incoming(ghost_values, ghost_sent, dtype, row_shape, ids, values, counts, 0, 0, 0, 0)


def _read_direct(payload, recv_header, recv_bytes, with_counts, direct_kind, readers):
    """(ids [m], rows [m, ...], counts [m] or None) of the direct messages from every rank, read by
    ``readers`` (one per rank, placed at its direct part) or from ``payload`` cut by ``recv_bytes``."""
    direct_dtype, direct_shape = _agreed_kind(direct_kind, recv_header, 5, "direct message rows")
    direct_dtype = direct_dtype or np.dtype(np.float64)
    if readers is None:
        readers = [_Reader(part) for part in np.split(payload, np.cumsum(recv_bytes)[:-1])]
    ids, counts, values = [np.zeros(0, _ID)], [np.zeros(0, _ID)], [np.zeros((0,) + direct_shape, direct_dtype)]
    for reader, h in zip(readers, recv_header):
        m = int(h[2])
        ids.append(reader.take(_ID, m, ()))
        if with_counts:
            counts.append(reader.take(_ID, m, ()))
        values.append(reader.take(direct_dtype, m, direct_shape))
    return np.concatenate(ids), np.concatenate(values), (np.concatenate(counts) if with_counts else None)


def _to_bytes(arrays) -> np.ndarray:
    parts = [np.ascontiguousarray(a).reshape(-1).view(np.uint8) for a in arrays if a.size]
    return np.concatenate(parts) if parts else np.empty(0, np.uint8)


class _Reader:
    """Reads consecutive typed arrays out of a byte buffer (views; copied only when misaligned)."""

    def __init__(self, buffer: np.ndarray):
        self.buffer, self.position = buffer, 0

    def take(self, dtype, rows: int, row_shape) -> np.ndarray:
        if not rows:
            return np.zeros((0,) + tuple(row_shape), dtype=dtype or np.float64)
        count = int(rows) * int(np.prod(row_shape, dtype=np.int64))
        end = self.position + count * dtype.itemsize
        raw = self.buffer[self.position:end]
        if raw.ctypes.data % dtype.itemsize:  # misaligned after odd-width fields: copy to align
            raw = raw.copy()
        self.position = end
        return raw.view(dtype).reshape((int(rows),) + tuple(row_shape))
