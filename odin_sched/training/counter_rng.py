"""Counter-based random numbers keyed by (seed, step, Gaussian id): the randomness of densification.

A Gaussian's draw at a step is a pure function of (seed, step, its id, the draw's index), computed by
hashing that key with SplitMix64's finaliser (Steele, Lea and Flood, "Fast splittable pseudorandom
number generators", OOPSLA 2014; the constants of Java's ``SplittableRandom``) rather than by
advancing a shared stream. So densifying any subset of the Gaussians (one owner's, on any number of
ranks) gives every Gaussian exactly the draw it gets when all of them are densified together, and the
draws do not depend on the order of the rows. Everything is vectorised over the Gaussians in NumPy's
wrapping uint64 arithmetic.

Uniforms take the hash's top 53 bits, centred in their interval: (k + 0.5) / 2^53, in (0, 1), never
0 or 1. Normals are Box-Muller pairs of uniforms, (sqrt(-2 ln u1) cos 2 pi u2, sqrt(-2 ln u1)
sin 2 pi u2), in float64.
"""
import numpy as np

GOLDEN = np.uint64(0x9E3779B97F4A7C15)
MIX1 = np.uint64(0xBF58476D1CE4E5B9)
MIX2 = np.uint64(0x94D049BB133111EB)
#: domain tag of densification's draws (so another use of the same (seed, step, id) draws differently)
SPLIT_OFFSETS = 1


def splitmix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64's output function of ``x`` (uint64 array, any shape): a bijection of uint64 that mixes
    every input bit into every output bit."""
    x = (x + GOLDEN).astype(np.uint64)
    x = (x ^ (x >> np.uint64(30))) * MIX1
    x = (x ^ (x >> np.uint64(27))) * MIX2
    return x ^ (x >> np.uint64(31))


def _keys(seed: int, step: int, ids: np.ndarray, domain: int) -> np.ndarray:
    """uint64 [n]: the hash of (domain, seed, step, id) of each id in ``ids`` ([n] int64, >= 0)."""
    head = splitmix64(np.array([domain], np.uint64))
    head = splitmix64(head ^ np.uint64(seed))
    head = splitmix64(head ^ np.uint64(step))
    return splitmix64(head ^ np.asarray(ids, np.int64).astype(np.uint64))


def uniforms(seed: int, step: int, ids: np.ndarray, count: int, domain: int = SPLIT_OFFSETS) -> np.ndarray:
    """float64 [n, count] in (0, 1): draw j of Gaussian ``ids[i]`` at ``step`` for ``seed`` (seed and step
    non-negative integers below 2^64; ids [n] int64)."""
    with np.errstate(over="ignore"):
        keys = _keys(seed, step, ids, domain)
        counters = np.arange(1, count + 1, dtype=np.uint64) * GOLDEN
        bits = splitmix64(keys[:, None] ^ counters[None, :])
    return ((bits >> np.uint64(11)).astype(np.float64) + 0.5) * 2.0 ** -53


def normals(seed: int, step: int, ids: np.ndarray, count: int, domain: int = SPLIT_OFFSETS) -> np.ndarray:
    """float64 [n, count] standard normal draws of Gaussians ``ids`` ([n] int64) at ``step`` for ``seed``
    (Box-Muller on ``uniforms``; draw j of a Gaussian is the same whatever other ids are asked for)."""
    pairs = (count + 1) // 2
    u = uniforms(seed, step, ids, 2 * pairs, domain)
    radius = np.sqrt(-2.0 * np.log(u[:, :pairs]))
    angle = 2.0 * np.pi * u[:, pairs:]
    both = np.stack([radius * np.cos(angle), radius * np.sin(angle)], axis=2).reshape(len(u), 2 * pairs)
    return both[:, :count]
