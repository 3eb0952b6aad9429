"""Streaming parser for whitespace edge lists (``src dst [weight]`` per line, ``#`` comments).

The text is read in fixed-size chunks (``CHUNK_BYTES``) and each chunk is parsed by one compiled
pass over its bytes; only the parsed binary edges are kept, so memory is bounded by the edges
(8-12 bytes each while parsing) and never by the text. Vertex ids are parsed as non-negative
integers; weights by the C library's ``strtod`` (correctly rounded, as Python's ``float``).
"""

import os

import numba
import numpy as np
from numba.core import types

from pregel.errors import InputError, not_a_file

CHUNK_BYTES = 16 << 20
MIN_LINE_BYTES = 4  # "0 1\n": a chunk of B bytes holds at most B / 4 edges
# C's strtod(const char *, char **), resolved by name (so the kernel can be cached); the two
# pointers are passed as addresses, which is the same machine word
_strtod = types.ExternalFunction("strtod", types.float64(types.int64, types.int64))

# error codes of _parse_chunk
OK, BAD_ID, BAD_WEIGHT, BAD_COLUMNS = 0, 1, 2, 3


@numba.njit(cache=True)
def _is_space(c):  # pragma: no cover - compiled
    """' ', tab or carriage return."""
    return c == 32 or c == 9 or c == 13


@numba.njit(cache=True)
def _parse_id(buf, pos):  # pragma: no cover - compiled
    """(non-negative integer at ``pos``, position after it), or (-1, pos) unless it is one followed by
    whitespace, a newline or '#' (at most 18 digits)."""
    start = pos
    value = np.int64(0)
    while 48 <= buf[pos] <= 57 and pos - start < 18:
        value = value * 10 + (buf[pos] - 48)
        pos += 1
    c = buf[pos]
    if pos == start or not (_is_space(c) or c == 10 or c == 35):
        return np.int64(-1), pos
    return value, pos


@numba.njit(cache=True)
def _parse_chunk(buf, columns, src, dst, weights, end_ptr):  # pragma: no cover - compiled
    """Parse complete lines of ``buf`` (uint8, ends with b'\\n'). ``columns``: 2, 3 or 0 (unknown yet).

    Returns (edges, lines parsed (on an error: the line of the error), columns, error code).
    """
    n = buf.shape[0]
    base = np.int64(buf.ctypes.data)
    pos, edges, line = 0, 0, 0
    while pos < n:
        while pos < n and _is_space(buf[pos]):
            pos += 1
        if buf[pos] == 10 or buf[pos] == 35:  # empty line or '#' comment
            while buf[pos] != 10:
                pos += 1
            pos += 1
            line += 1
            continue
        first, pos = _parse_id(buf, pos)
        if first < 0 or not _is_space(buf[pos]):
            return edges, line, columns, BAD_ID
        while _is_space(buf[pos]):
            pos += 1
        second, pos = _parse_id(buf, pos)
        if second < 0:
            return edges, line, columns, BAD_ID
        while _is_space(buf[pos]):
            pos += 1
        have = 2
        if buf[pos] != 10 and buf[pos] != 35:
            w = _strtod(base + pos, np.int64(end_ptr.ctypes.data))
            stop = np.int64(end_ptr[0]) - base
            if stop == pos or not (_is_space(buf[stop]) or buf[stop] == 10 or buf[stop] == 35):
                return edges, line, columns, BAD_WEIGHT
            if not np.isfinite(w):
                return edges, line, columns, BAD_WEIGHT
            weights[edges] = w
            have = 3
            pos = stop
            while _is_space(buf[pos]):
                pos += 1
            if buf[pos] != 10 and buf[pos] != 35:
                return edges, line, columns, BAD_COLUMNS
        if columns == 0:
            columns = have
        elif have != columns:
            return edges, line, columns, BAD_COLUMNS
        src[edges] = first
        dst[edges] = second
        edges += 1
        while buf[pos] != 10:
            pos += 1
        pos += 1
        line += 1
    return edges, line, columns, OK


def stream_edge_list(path, chunk_bytes: int = CHUNK_BYTES):
    """Parse an edge-list file chunk by chunk.

    Returns (src [E], dst [E], weights float32 [E] or None): the ids int32 when every id fits, else
    int64. A malformed line raises ``InputError`` naming the file and the line number.
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise InputError.at(path, None, not_a_file(path))
    src_parts, dst_parts, weight_parts, columns, lines_before = [], [], [], 0, 0
    end_ptr = np.zeros(1, np.int64)  # strtod's end pointer
    with open(path, "rb") as f:
        carry = b""
        while True:
            block = f.read(chunk_bytes)
            data = carry + block
            if not block:
                if not data.strip():
                    break
                data += b"\n"
            cut = data.rfind(b"\n") + 1
            carry = data[cut:]
            if cut == 0:
                continue
            buf = np.frombuffer(data, dtype=np.uint8, count=cut)
            capacity = cut // MIN_LINE_BYTES + 1  # np.empty: pages never written are never used
            src, dst = np.empty(capacity, np.int64), np.empty(capacity, np.int64)
            weights = np.empty(capacity, np.float64)
            edges, lines, columns, code = _parse_chunk(buf, columns, src, dst, weights, end_ptr)
            if code != OK:
                raise InputError.at(path, None, f"line {lines_before + lines + 1}: {_PROBLEMS[code]}")
            src, dst = _narrowest(src[:edges], dst[:edges])
            src_parts.append(src)
            dst_parts.append(dst)
            if columns == 3:  # chunks before the first data line have no edges and no weights
                weight_parts.append(weights[:edges].astype(np.float32))
            lines_before += lines
            if not block:
                break
    ids = np.result_type(np.int32, *src_parts)  # int64 once any chunk needed it
    return (_joined(src_parts, ids), _joined(dst_parts, ids),
            _joined(weight_parts, np.float32) if columns == 3 else None)


def _joined(chunks: list, dtype) -> np.ndarray:
    """The arrays of ``chunks`` one after the other, as ``dtype``, emptying the list: each chunk is
    freed once copied, so the edges are held about once, not twice."""
    out = np.empty(sum(len(chunk) for chunk in chunks), dtype)
    at = 0
    chunks.reverse()
    while chunks:
        chunk = chunks.pop()
        out[at:at + len(chunk)] = chunk
        at += len(chunk)
    return out


def _narrowest(src, dst):
    """A chunk's ids in the narrowest dtype that holds them both: int32 when they fit, else int64."""
    ids = np.int32 if max(int(src.max(initial=0)), int(dst.max(initial=0))) < 2**31 else np.int64
    return src.astype(ids), dst.astype(ids)


_PROBLEMS = {BAD_ID: "vertex ids must be non-negative integers (src dst [weight])",
             BAD_WEIGHT: "weight is not a number, or is NaN or inf",
             BAD_COLUMNS: "expected 2 or 3 columns (src dst [weight]), the same on every line"}
