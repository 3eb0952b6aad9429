"""A bit per entry: masks that kernels read at random, one entry per vertex (who sent this superstep,
which vertices a rank owns, which are in-hubs). A bit instead of a byte puts a 10M-vertex mask in a
core's cache, where the random reads of a pass over the edges are about 3x faster."""

import numpy as np
from numba import njit


def bit_words(mask: np.ndarray) -> np.ndarray:
    """[ceil(N / 64)] uint64 words whose bit ``i % 64`` of word ``i // 64`` is ``mask[i]`` ([N] bool)."""
    words = np.zeros(-(-len(mask) // 64) * 8, np.uint8)
    words[:-(-len(mask) // 8)] = np.packbits(mask, bitorder="little")
    return words.view(np.uint64)


def bit_words_of(ids: np.ndarray, n: int) -> np.ndarray:
    """``bit_words`` of the [n] mask that is True at ``ids`` [k] (integers in [0, n)) and False elsewhere,
    without building that mask: [ceil(n / 64)] uint64."""
    words = np.zeros(-(-n // 64), np.uint64)
    _set_bits(np.ascontiguousarray(ids), words)
    return words


def bits_at(words: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """[k] bool: bit ``ids[k]`` of ``words`` (``bit_words``), False for ids past the last word; ``ids``
    [k] non-negative integers of any integer dtype (no index array of 8 bytes an id is made)."""
    out = np.empty(len(ids), dtype=bool)
    _bits_at(np.ascontiguousarray(ids), words, out)
    return out


@njit(cache=True, inline="always")
def bit_set(words, i):
    """Bit ``i`` (a non-negative integer) of ``bit_words``' ``words``, as a uint64 0 or 1."""
    i = np.uint64(i)
    return (words[i >> np.uint64(6)] >> (i & np.uint64(63))) & np.uint64(1)


@njit(cache=True)
def _set_bits(ids, words):
    """Sets bit ids[k] of ``words`` for each k. ids: [k] int; words: [blocks] uint64, each id < 64 blocks."""
    one = np.uint64(1)
    for k in range(ids.shape[0]):
        i = np.uint64(ids[k])
        words[i >> np.uint64(6)] |= one << (i & np.uint64(63))


@njit(cache=True)
def _bits_at(ids, words, out):
    """out[k] = bit ids[k] of ``words``, False past them. ids: [k] int; words: [blocks] uint64; out: [k] bool."""
    limit = np.uint64(words.shape[0]) << np.uint64(6)
    for k in range(ids.shape[0]):
        out[k] = np.uint64(ids[k]) < limit and bit_set(words, ids[k]) != 0
