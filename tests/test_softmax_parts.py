"""``SoftmaxParts.with_self`` (a row's own message merged into its partial softmax sums, in blocks of
rows) against a direct NumPy softmax over each row's messages and its own."""

import numpy as np

from pregel import softmax_parts
from pregel.softmax_parts import SoftmaxParts


def test_with_self_in_blocks_equals_the_softmax_over_each_row_and_its_own_message(monkeypatch):
    monkeypatch.setattr(softmax_parts, "SELF_BLOCK_ROWS", 3)  # 11 rows: blocks of 3, 3, 3 and 2
    rng = np.random.default_rng(6)
    n, heads, channels = 11, 2, 3
    degree = rng.integers(0, 4, n)
    degree[[2, 7]] = 0  # rows without messages: only their own counts
    indptr = np.r_[0, np.cumsum(degree)]
    logits = rng.standard_normal((indptr[-1], heads)) * 3
    values = rng.standard_normal((indptr[-1], heads, channels))
    own_logits, own_values = rng.standard_normal((n, heads)) * 3, rng.standard_normal((n, heads, channels))
    got = SoftmaxParts.of_rows(indptr, logits, values).with_self(own_logits, own_values).normalized()
    for r in range(n):
        row_logits = np.vstack([logits[indptr[r]:indptr[r + 1]], own_logits[r:r + 1]])  # [d + 1, H]
        row_values = np.concatenate([values[indptr[r]:indptr[r + 1]], own_values[r:r + 1]])  # [d + 1, H, C]
        weights = np.exp(row_logits - row_logits.max(axis=0))
        weights /= weights.sum(axis=0)
        np.testing.assert_allclose(got[r], (weights[:, :, None] * row_values).sum(axis=0), rtol=1e-10, atol=1e-12)
