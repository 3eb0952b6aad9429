"""The counter-based generator of densification: SplitMix64 against its published outputs and a
pure-Python twin, the distribution of its uniforms and normals (scipy.stats), and that a Gaussian's
draw does not depend on which other Gaussians are drawn for."""
import numpy as np
import pytest
import scipy.stats

from odin_sched.training.counter_rng import normals, splitmix64, uniforms

M64 = (1 << 64) - 1


def splitmix64_python(x: int) -> int:
    """SplitMix64's output function in Python integers (Vigna's splitmix64.c: z += 0x9e37...; mix)."""
    z = (x + 0x9E3779B97F4A7C15) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def test_splitmix64_matches_the_reference_stream_and_a_python_twin():
    # splitmix64.c seeded with 0: its first two outputs
    assert int(splitmix64(np.array([0], np.uint64))[0]) == 0xE220A8397B1DCDAF
    assert int(splitmix64(np.array([0x9E3779B97F4A7C15], np.uint64))[0]) == 0x6E789E6AA1B965F4
    xs = np.random.default_rng(3).integers(0, 2 ** 63, 1000, dtype=np.int64).astype(np.uint64) * np.uint64(3)
    with np.errstate(over="ignore"):
        got = splitmix64(xs)
    assert [int(v) for v in got] == [splitmix64_python(int(x)) for x in xs]


def test_uniforms_are_uniform_and_in_the_open_interval():
    u = uniforms(5, 12, np.arange(100_000), 4)
    assert u.shape == (100_000, 4) and u.min() > 0.0 and u.max() < 1.0
    for j in range(4):
        assert scipy.stats.kstest(u[:, j], "uniform").pvalue > 1e-3
    assert np.abs(np.corrcoef(u.T) - np.eye(4)).max() < 0.02  # columns uncorrelated (4 sigma ~ 0.013)


@pytest.mark.parametrize("count", [3, 4])
def test_normals_are_standard_normal(count):
    n = 200_000
    z = normals(1, 600, np.arange(n) * 7 + 11, count)
    assert z.shape == (n, count) and np.all(np.isfinite(z))
    for j in range(count):
        column = z[:, j]
        assert abs(column.mean()) < 4 / np.sqrt(n)
        assert abs(column.var() - 1.0) < 4 * np.sqrt(2.0 / n)
        assert scipy.stats.kstest(column, "norm").pvalue > 1e-3
    assert np.abs(np.corrcoef(z.T) - np.eye(count)).max() < 0.015  # 4 sigma at n = 200,000 is 0.009


def test_a_gaussians_draw_does_not_depend_on_the_others():
    ids = np.random.default_rng(0).choice(2 ** 40, 1001, replace=False).astype(np.int64)
    everyone = normals(3, 900, ids, 3)
    for subset in (ids[:1], ids[7:20], ids[::-1], ids[np.random.default_rng(1).permutation(1001)[:333]]):
        rows = np.searchsorted(np.sort(ids), subset)
        order = np.argsort(ids)
        np.testing.assert_array_equal(normals(3, 900, subset, 3), everyone[order][rows])


def test_draws_change_with_seed_step_and_id():
    base = uniforms(3, 900, np.array([5]), 2)
    for other in (uniforms(4, 900, np.array([5]), 2), uniforms(3, 901, np.array([5]), 2),
                  uniforms(3, 900, np.array([6]), 2)):
        assert not np.any(other == base)
