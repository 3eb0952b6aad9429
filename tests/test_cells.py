"""k-d cells, cell bounds and cell membership, checked against brute-force per-cell loops."""
import numpy as np
import pytest

from odin_sched.scenes.cells import cell_bounds, cell_members, cut_cells, kd_cells, kd_cells_numpy, lowest


def random_means(g, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.normal(size=(g, 3)) * [5.0, 2.0, 1.0]).astype(np.float32)


@pytest.mark.parametrize("k", [1, 2, 3, 7, 16])
@pytest.mark.parametrize("g", [16, 1000, 1001])
def test_kd_cells_are_balanced_and_cover_every_gaussian(g, k):
    means = random_means(g)
    cell_of = kd_cells(means, k)
    assert cell_of.shape == (g,) and cell_of.dtype == np.int32
    assert cell_of.min() == 0 and cell_of.max() == k - 1
    counts = np.array([(cell_of == c).sum() for c in range(k)])
    assert counts.sum() == g
    assert counts.max() - counts.min() <= 1


def kd_cells_by_sorting(means, num_cells):
    """The k-d cells by a full sort of every node's points (coordinate, then Gaussian index), cut
    recursively: the oracle of ``kd_cells``, which partitions instead."""
    cell_of = np.empty(len(means), np.int32)

    def cut(ids, k, first):
        if k == 1:
            cell_of[ids] = first
            return
        axis = int(np.argmax(np.ptp(means[ids], axis=0)))  # the widest (the first NaN extent, if any)
        order = ids[np.lexsort((ids, means[ids, axis]))]
        n_left = len(ids) * (k // 2) // k
        cut(order[:n_left], k // 2, first)
        cut(order[n_left:], k - k // 2, first + k // 2)

    cut(np.arange(len(means)), num_cells, 0)
    return cell_of


@pytest.mark.parametrize("seed", range(6))
def test_kd_cells_equal_a_full_sort_per_node(seed):
    """Random means, many with tied coordinates (rounded to a coarse grid, some repeated whole), in
    float32 or float64, some NaN or infinite: the kernel and its NumPy twin give the cells of sorting
    every node."""
    rng = np.random.default_rng(seed)
    g = int(rng.integers(50, 3000))
    means = rng.normal(size=(g, 3)) * rng.uniform(0.5, 5.0, size=3)
    if seed % 2:
        means = np.round(means * 2) / 2  # a coarse grid: many ties on every axis
    means[rng.integers(0, g, g // 5)] = means[0]  # a fifth of the points at one place
    means = means.astype(np.float32 if seed % 3 else np.float64)
    if seed >= 4:  # a few NaN and infinite coordinates (sorted after / at the ends)
        means[rng.integers(0, g, 5), rng.integers(0, 3, 5)] = [np.nan, np.inf, -np.inf, np.nan, np.inf]
    for k in (1, 2, 3, 5, 16, 64, min(g, 245)):
        expected = kd_cells_by_sorting(means, k)
        assert np.array_equal(kd_cells(means, k), expected), k
        assert np.array_equal(kd_cells_numpy(means, k), expected), k


def test_lowest_equals_a_stable_sort():
    """``lowest`` picks what a stable argsort puts first, ties (and NaN, sorted last) by position."""
    rng = np.random.default_rng(7)
    for values in (rng.integers(0, 5, 200).astype(np.float32), rng.normal(size=101),
                   np.where(rng.random(60) < 0.3, np.nan, rng.integers(0, 3, 60)), np.full(9, np.nan)):
        for n in range(len(values) + 1):
            expected = np.zeros(len(values), bool)
            expected[np.argsort(values, kind="stable")[:n]] = True
            assert np.array_equal(lowest(values, n), expected), n


def test_kd_cells_balanced_with_ties():
    means = np.zeros((100, 3), np.float32)  # every point identical: ties decided by index
    means[:50, 0] = 1.0
    for k in (3, 7, 16):
        counts = np.bincount(kd_cells(means, k), minlength=k)
        assert counts.max() - counts.min() <= 1


def test_first_split_is_along_the_widest_axis_and_separates():
    means = random_means(500, seed=1)  # x has the largest spread
    cell_of = kd_cells(means, 2)
    left, right = means[cell_of == 0, 0], means[cell_of == 1, 0]
    assert left.max() <= right.min()
    assert len(left) == 250
    # K = 3: one cell on the left (the lowest third of x), two on the right
    cell_of = kd_cells(means, 3)
    assert means[cell_of == 0, 0].max() <= means[cell_of > 0, 0].min()


def test_kd_cells_deterministic_and_follow_the_points():
    means = random_means(777, seed=2)
    first = kd_cells(means, 7)
    assert np.array_equal(first, kd_cells(means.copy(), 7))
    perm = np.random.default_rng(3).permutation(777)  # no ties: the cells move with the points
    assert np.array_equal(kd_cells(means[perm], 7), first[perm])


def test_consecutive_cells_are_spatial_neighbours():
    # on a line, a k-d split in leaf order numbers the cells from left to right
    x = np.random.default_rng(4).permutation(np.arange(300, dtype=np.float32))
    means = np.column_stack([x, np.zeros(300), np.zeros(300)]).astype(np.float32)
    cell_of = kd_cells(means, 7)
    order = np.argsort(x)
    assert np.all(np.diff(cell_of[order]) >= 0)


def test_fewer_gaussians_than_cells_raises():
    with pytest.raises(ValueError, match="cannot fill"):
        kd_cells(random_means(5), 6)


def test_cell_members_and_bounds_match_brute_force():
    g, k = 600, 7
    rng = np.random.default_rng(5)
    means = random_means(g, seed=5)
    log_scales = rng.uniform(-4, 0, size=(g, 3)).astype(np.float32)
    cell_of = kd_cells(means, k)
    indptr, members = cell_members(cell_of, k)
    bounds = cell_bounds(means, log_scales, cell_of, k)
    assert sorted(members.tolist()) == list(range(g))
    for c in range(k):
        ids = np.flatnonzero(cell_of == c)
        assert members[indptr[c]:indptr[c + 1]].tolist() == ids.tolist()
        assert bounds.count[c] == len(ids)
        assert np.array_equal(bounds.lo[c], means[ids].min(axis=0).astype(np.float64))
        assert np.array_equal(bounds.hi[c], means[ids].max(axis=0).astype(np.float64))
        assert bounds.max_sigma[c] == pytest.approx(np.exp(log_scales[ids].astype(np.float64)).max(), rel=1e-12)
        assert np.all(means[ids] >= bounds.lo[c]) and np.all(means[ids] <= bounds.hi[c])


@pytest.mark.parametrize("num_cells", [245, 70_000])
def test_cell_members_are_a_stable_sort_by_cell(num_cells):
    """Few cells (16-bit keys) or more than 65,536: each cell's Gaussians in ascending id, cells in order
    (the oracle: a lexsort by cell, then id)."""
    rng = np.random.default_rng(9)
    cell_of = rng.integers(0, num_cells, 100_000).astype(np.int32)
    indptr, members = cell_members(cell_of, num_cells)
    assert np.array_equal(members, np.lexsort((np.arange(100_000), cell_of)))
    assert np.array_equal(np.diff(indptr), np.bincount(cell_of, minlength=num_cells))


def test_cell_bounds_with_empty_cells():
    means = random_means(10, seed=6)
    log_scales = np.zeros((10, 3), np.float32)
    cell_of = np.array([0, 0, 2, 2, 2, 5, 5, 5, 5, 0])
    bounds = cell_bounds(means, log_scales, cell_of, 7)
    assert bounds.count.tolist() == [3, 0, 3, 0, 0, 4, 0]
    assert np.array_equal(bounds.lo[5], means[5:9].min(axis=0).astype(np.float64))
    assert np.array_equal(bounds.hi[2], means[2:5].max(axis=0).astype(np.float64))
    assert np.all(np.isfinite(bounds.lo)) and np.all(bounds.max_sigma[[1, 3, 4, 6]] == 0.0)
    indptr, members = cell_members(cell_of, 7)
    assert indptr.tolist() == [0, 3, 3, 6, 6, 6, 10, 10]
    assert members.tolist() == [0, 1, 9, 2, 3, 4, 5, 6, 7, 8]
    with pytest.raises(ValueError):
        cell_members(cell_of, 5)


def test_cut_cells_one_cell_per_gaussian_when_cells_outnumber_them():
    """Asked for more cells than Gaussians, every Gaussian gets a cell of its own: each box is that
    Gaussian's mean and its largest scale is exp of its largest log-scale (worked by hand)."""
    rng = np.random.default_rng(3)
    means = rng.normal(size=(5, 3))
    log_scales = rng.normal(size=(5, 3))
    cell_of, bounds = cut_cells(means, log_scales, 64)
    assert sorted(cell_of.tolist()) == [0, 1, 2, 3, 4]
    np.testing.assert_array_equal(bounds.count, np.ones(5))
    np.testing.assert_allclose(bounds.lo[cell_of], means)
    np.testing.assert_allclose(bounds.hi[cell_of], means)
    np.testing.assert_allclose(bounds.max_sigma[cell_of], np.exp(log_scales.max(axis=1)), rtol=1e-6)


def test_kd_cells_kernel_equals_its_twin_at_scale():
    """200,000 clustered float32 means (ties from float32 rounding), 245 cells: kernel and twin agree."""
    rng = np.random.default_rng(8)
    centres = rng.uniform(-50, 50, size=(40, 3))
    means = (centres[rng.integers(0, 40, 200_000)] + rng.normal(scale=0.3, size=(200_000, 3))).astype(np.float32)
    assert np.array_equal(kd_cells(means, 245), kd_cells_numpy(means, 245))


@pytest.mark.parametrize("rounds", [0, 1, 3, 64])
def test_selection_holds_the_first_by_coordinate_then_id_however_soon_it_sorts(rounds):
    """The kernel's selection (``_select``) puts a range's first Gaussians by (coordinate, id), NaN
    after every number, before its cut, also when it gives up partitioning after ``rounds`` partitions
    and heapsorts what is left (0: sorts at once): the oracle is NumPy's lexsort."""
    from odin_sched.scenes.cells import _select

    rng = np.random.default_rng(rounds)
    means = rng.integers(0, 20, (500, 3)).astype(np.float64)  # many ties: the ids decide
    means[rng.random(500) < 0.05, 1] = np.nan
    order = np.lexsort((np.arange(500), np.nan_to_num(means[:, 1]), np.isnan(means[:, 1])))
    for lo, hi, mid in [(0, 500, 250), (0, 500, 1), (0, 500, 499), (100, 400, 137)]:
        perm = rng.permutation(500)
        ranged = order[np.isin(order, perm[lo:hi])]  # the range's Gaussians in the oracle's order
        _select(means, 1, perm, lo, hi, mid, rounds)
        assert set(perm[lo:mid].tolist()) == set(ranged[:mid - lo].tolist())
        if rounds == 0:  # sorted outright
            np.testing.assert_array_equal(perm[lo:hi], ranged)
