"""The bit masks of ``kernels.bits`` against NumPy: ``np.isin`` and a boolean mask indexed by the ids."""

import numpy as np
import pytest

from kernels.bits import bit_set, bit_words, bit_words_of, bits_at


@pytest.mark.parametrize("n", [1, 63, 64, 65, 1000, 4097])
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_words_of_ids_equal_the_words_of_their_mask(n, dtype):
    rng = np.random.default_rng(n)
    ids = rng.integers(0, n, size=max(1, n // 3)).astype(dtype)  # repeats included
    mask = np.zeros(n, dtype=bool)
    mask[ids] = True
    assert np.array_equal(bit_words_of(ids, n), bit_words(mask))
    assert len(bit_words_of(np.zeros(0, dtype), n)) == -(-n // 64)


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint32])
def test_bits_at_is_membership_and_false_past_the_words(dtype):
    rng = np.random.default_rng(7)
    members = np.unique(rng.integers(0, 500, size=40))
    words = bit_words_of(members, int(members[-1]) + 1)
    ids = rng.integers(0, 2000, size=5000).astype(dtype)  # most past the last member's word
    ids[:len(members)] = members
    assert np.array_equal(bits_at(words, ids), np.isin(ids, members))
    assert bits_at(words, np.zeros(0, dtype)).shape == (0,)


def test_bit_set_reads_the_mask():
    mask = np.random.default_rng(3).random(300) < 0.3
    words = bit_words(mask)
    got = [bool(bit_set.py_func(words, i)) for i in range(len(mask))]
    assert got == mask.tolist()
