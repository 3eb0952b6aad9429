"""Partial softmax-weighted sums, for attention (GAT) gathers that can be split across ranks.

For one receiver and head, the messages (logit ``l_j``, value ``v_j``) reduce to
``Σ_j softmax(l)_j · v_j``. That is computed from three partial quantities that combine exactly
whatever the order or split of the messages (the online-softmax identity):

    m = max_j l_j,   s = Σ_j exp(l_j − m),   acc = Σ_j exp(l_j − m) · v_j

Two parts merge as ``m = max(m1, m2)``, ``s = s1·e^(m1−m) + s2·e^(m2−m)``, likewise ``acc``; the
result is ``acc / s``. Rows without messages have ``m = −inf``, ``s = 0``, ``acc = 0``.
"""

from dataclasses import dataclass

import numpy as np

from kernels.gather import gather_reduce

#: rows per block of ``SoftmaxParts.with_self`` (bounds its temporaries to a few MB)
SELF_BLOCK_ROWS = 1 << 16


@dataclass
class SoftmaxParts:
    """Partial softmax sums of n receivers: m [n, H], s [n, H], acc [n, H, C]."""

    m: np.ndarray
    s: np.ndarray
    acc: np.ndarray

    @classmethod
    def empty(cls, n: int, heads: int, channels: int, dtype) -> "SoftmaxParts":
        """Parts of ``n`` receivers that received nothing: m [n, H] = -inf, s [n, H] and acc [n, H, C] = 0."""
        return cls(np.full((n, heads), -np.inf, dtype), np.zeros((n, heads), dtype),
                   np.zeros((n, heads, channels), dtype))

    @classmethod
    def of_rows(cls, indptr: np.ndarray, logits: np.ndarray, values: np.ndarray) -> "SoftmaxParts":
        """Parts of each CSR row: indptr [n + 1], logits [E, H] (−inf: no message), values [E, H, C]."""
        n, (num_edges, heads), channels = len(indptr) - 1, logits.shape, values.shape[2]
        dtype = values.dtype
        edges = np.arange(num_edges, dtype=np.int64)
        finite = np.isfinite(logits)
        m = gather_reduce(indptr, edges, np.where(finite, logits, -np.inf).astype(dtype), "max", check=False)
        has = gather_reduce(indptr, edges, finite.astype(dtype), "sum", check=False) > 0
        m = np.where(has, m, -np.inf).astype(dtype)
        row = np.repeat(np.arange(n), np.diff(indptr))
        weight = np.where(finite, np.exp(logits - np.where(has, m, 0)[row]), 0).astype(dtype)
        s = gather_reduce(indptr, edges, weight, "sum", check=False)
        weighted = (weight[:, :, None] * values).reshape(num_edges, heads * channels)  # E may be 0
        acc = gather_reduce(indptr, edges, weighted, "sum", check=False).reshape(n, heads, channels)
        return cls(m, s, acc)

    def merged(self, rows: np.ndarray, other: "SoftmaxParts") -> "SoftmaxParts":
        """These parts with ``other`` (k rows) merged into rows ``rows`` [k] (repeats allowed).
        In place (``m``, ``s`` and ``acc`` are overwritten); returns self."""
        m = self.m.copy()
        np.maximum.at(m, rows, other.m)
        safe = np.where(np.isfinite(m), m, 0)
        scale = _scale(self.m, safe)
        self.s *= scale
        self.acc *= scale[:, :, None]
        factor = _scale(other.m, safe[rows])
        np.add.at(self.s, rows, other.s * factor)
        np.add.at(self.acc, rows, other.acc * factor[:, :, None])
        self.m = m
        return self

    def with_self(self, logits: np.ndarray, values: np.ndarray) -> "SoftmaxParts":
        """Every row merged with one more message of its own: logits [n, H], values [n, H, C].
        In place (``m``, ``s`` and ``acc`` are overwritten), a block of ``SELF_BLOCK_ROWS`` rows at a time,
        so its temporaries are a block's (whole-array ones were about 1.4 GB at 10M rows of 4 heads of 16
        channels); returns self."""
        for start in range(0, len(logits), SELF_BLOCK_ROWS):
            rows = slice(start, start + SELF_BLOCK_ROWS)
            m = np.maximum(self.m[rows], logits[rows])  # one message per row: no repeated rows, no ufunc.at
            safe = np.where(np.isfinite(m), m, 0)
            old, new = _scale(self.m[rows], safe), _scale(logits[rows], safe)
            self.s[rows] *= old
            self.s[rows] += new
            self.acc[rows] *= old[:, :, None]
            self.acc[rows] += values[rows] * new[:, :, None]
            self.m[rows] = m
        return self

    def normalized(self) -> np.ndarray:
        """``acc / s`` [n, H, C], 0 for rows without messages: ``acc`` divided in place."""
        self.acc /= np.where(self.s > 0, self.s, 1)[:, :, None]
        return self.acc

    def to_rows(self) -> np.ndarray:
        """Flat rows [n, 2H + H·C] for the wire."""
        n, heads, channels = self.acc.shape
        return np.concatenate([self.m, self.s, self.acc.reshape(n, heads * channels)], axis=1)

    @classmethod
    def from_rows(cls, rows: np.ndarray, heads: int) -> "SoftmaxParts":
        """Inverse of ``to_rows``: ``rows`` [n, 2H + H·C] with H = ``heads``."""
        channels = (rows.shape[1] - 2 * heads) // heads
        return cls(rows[:, :heads], rows[:, heads:2 * heads],
                   rows[:, 2 * heads:].reshape(len(rows), heads, channels))


def _scale(m: np.ndarray, target: np.ndarray) -> np.ndarray:
    """exp(m − target), 0 where m = −inf."""
    return np.where(np.isfinite(m), np.exp(np.where(np.isfinite(m), m, 0) - target), 0)
