"""The per-superstep message exchange: one ``Alltoall`` of counts, one ``Alltoallv`` of payloads.

What rank ``r`` sends to rank ``q`` in one superstep, packed into one byte block:

* ghost values — the message values of the owned vertices that ``q`` holds as ghosts (the
  exchange plan), each sent once however many of ``q``'s edges it has: with every vertex sending,
  just the rows in plan order; otherwise the slots (positions in the plan) of the senders, then
  their rows;
* direct messages — messages to arbitrary vertices owned by ``q``, already combined per
  destination on ``r``: global ids, then per-message counts (for ``mean``), then the rows.

The header ``(ghost rows, slots present, direct rows, ghost dtype code, ghost row width, direct
dtype code, direct row width)`` goes first, so each side knows every block's layout. Rows are
float32 or float64, ``[F]`` or scalar (width 0); every rank that sends must send the same kind of
ghost row (and of direct row: partial softmax rows are wider than the messages).

The common case, every vertex sending along its edges and no direct messages (a GNN layer, PageRank
at P > 1), moves each row once on each side: the sender takes its rows in plan order straight
into the send buffer (no per-block packing), and when every block it receives is of that kind
the receiver gets them straight into the ghost rows of one [n + g] buffer that already holds its
own rows (``Incoming.ext``), which the gather reads as it is (no concatenation, no unpacking).
"""

from dataclasses import dataclass

import numpy as np

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
    ext: [n + g] / [n + g, F] the owned rows then the ghost rows (``ghost_values`` is a view of
    it), when the exchange built it; else None.
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


def exchange(graph, out: Outgoing, with_counts: bool) -> Incoming:
    """Send ``out`` along the exchange plan of ``graph`` and receive this rank's messages."""
    comm, size = graph.comm, graph.comm.size
    ghost_kind = _row_kind(out.values, always=True)
    direct_kind = _row_kind(out.direct_values, always=False)
    direct_owner = graph.partition.owner(out.direct_ids)
    direct_order = np.argsort(direct_owner, kind="stable")
    direct_offsets = np.concatenate([[0], np.cumsum(np.bincount(direct_owner, minlength=size))])

    header = np.zeros((size, 7), dtype=np.int64)
    header[:, 3:5] = _encode(ghost_kind)
    header[:, 5:7] = _encode(direct_kind)
    if out.values is not None and out.senders is None and not len(out.direct_ids):
        header[:, 0] = graph.send_counts  # rows only, in plan order: one take, no packing
        send = np.take(out.values, graph.send_index, axis=0)
        block_bytes = graph.send_counts * send[:1].nbytes if len(send) else np.zeros(size, np.int64)
    else:
        send, block_bytes = _packed(graph, out, header, with_counts, direct_owner, direct_order, direct_offsets)
    recv_header = comm.alltoall_counts(header)
    recv_bytes = np.array([_block_bytes(h, with_counts) for h in recv_header], dtype=np.int64)
    ext = _rows_buffer(graph, out, recv_header, ghost_kind)
    if ext is not None:
        n = graph.num_local
        comm.alltoallv_bytes(_flat_bytes(send), block_bytes, _flat_bytes(ext[n:]), recv_bytes)
        ext[:n] = out.values
        incoming = Incoming(ext[n:], None, ext.dtype, ext.shape[1:], np.zeros(0, _ID), np.zeros(0),
                            np.zeros(0, _ID) if with_counts else None, 0, 0, 0, 0, ext)
    else:
        payload = comm.alltoallv_known(_flat_bytes(send), block_bytes, recv_bytes)
        incoming = _unpack(graph, payload, recv_header, recv_bytes, with_counts, ghost_kind, direct_kind)
    others = np.arange(size) != comm.rank
    incoming.rows_sent = int((header[others, 0] + header[others, 2]).sum())
    incoming.rows_received = int((recv_header[others, 0] + recv_header[others, 2]).sum())
    incoming.bytes_sent = int(block_bytes[others].sum())
    incoming.bytes_received = int(recv_bytes[others].sum())
    return incoming


def _packed(graph, out: Outgoing, header, with_counts, direct_owner, direct_order, direct_offsets):
    """(payload bytes, bytes per rank [size]) of the general layout (slots, direct messages), with
    ``header``'s first three columns filled in."""
    send_offsets = np.concatenate([[0], np.cumsum(graph.send_counts)])
    blocks = []
    for q in range(graph.comm.size):
        plan = graph.send_index[send_offsets[q]:send_offsets[q + 1]]
        if out.values is None:
            fields = [np.zeros(0, _ID)]
        elif out.senders is None:
            fields = [out.values[plan]]
        else:
            slots = np.flatnonzero(out.senders[plan])
            fields = [slots, out.values[plan[slots]]]
        picked = direct_order[direct_offsets[q]:direct_offsets[q + 1]]
        fields.append(out.direct_ids[picked])
        if with_counts:
            fields.append(out.direct_counts[picked])
        fields.append(out.direct_values[picked])
        header[q, :3] = (len(fields[0]), out.values is None or out.senders is not None, len(picked))
        blocks.append(_to_bytes(fields))
    return np.concatenate(blocks), np.array([len(b) for b in blocks], dtype=np.int64)


def _rows_buffer(graph, out: Outgoing, recv_header, ghost_kind):
    """An empty [n + g, ...] buffer for the owned then ghost rows when every received block is
    rows only, one per ghost, of this rank's own row kind; None otherwise (the general unpack)."""
    if out.values is None or not graph.num_ghosts or recv_header[:, 1:3].any():
        return None
    if not np.array_equal(recv_header[:, 0], graph.ghost_counts):
        return None
    if _agreed_kind(ghost_kind, recv_header, 3, "message rows") != (out.values.dtype, tuple(out.values.shape[1:])):
        return None
    return np.empty((graph.num_local + graph.num_ghosts,) + out.values.shape[1:], out.values.dtype)


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
    k, has_slots, m, ghost_code, ghost_width, direct_code, direct_width = (int(v) for v in header_row)
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
    direct_dtype, direct_shape = _agreed_kind(direct_kind, recv_header, 5, "direct message rows")
    direct_dtype = direct_dtype or np.dtype(np.float64)
    g = graph.num_ghosts
    ghost_values = np.zeros((g,) + row_shape, dtype=dtype or np.float64)
    partial = bool(recv_header[:, 1].any())
    ghost_sent = np.zeros(g, dtype=bool) if partial else None
    ghost_offsets = np.concatenate([[0], np.cumsum(graph.ghost_counts)])
    ids, counts, values = [np.zeros(0, _ID)], [np.zeros(0, _ID)], [np.zeros((0,) + direct_shape, direct_dtype)]
    position = 0
    for p, (k, has_slots, m, *_) in enumerate(recv_header):
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
        ids.append(reader.take(_ID, m, ()))
        if with_counts:
            counts.append(reader.take(_ID, m, ()))
        values.append(reader.take(direct_dtype, m, direct_shape))
    return Incoming(ghost_values, ghost_sent, dtype, row_shape,
                    np.concatenate(ids), np.concatenate(values),
                    np.concatenate(counts) if with_counts else None, 0, 0, 0, 0)


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
