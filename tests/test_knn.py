"""k-nearest-neighbour initial scales (odin_sched.scenes.knn) against a brute-force search."""
import numpy as np
import pytest
import torch

from odin_sched.scenes.knn import knn_scales, mean_sq_neighbour_distance


def brute_force_mean_sq(points: np.ndarray, k: int) -> np.ndarray:
    d2 = ((points[:, None].astype(np.float64) - points[None]) ** 2).sum(-1)
    np.fill_diagonal(d2, np.inf)
    return np.sort(d2, axis=1)[:, :k].mean(axis=1)


@pytest.mark.parametrize("p", [2, 3, 4, 57, 400])
def test_mean_sq_distance_matches_brute_force(p):
    pts = np.random.default_rng(p).normal(size=(p, 3)).astype(np.float32)
    k = min(3, p - 1)
    np.testing.assert_allclose(mean_sq_neighbour_distance(pts), brute_force_mean_sq(pts, k), rtol=1e-12)


def test_duplicates_count_as_zero_distance():
    pts = np.array([[0, 0, 0], [0, 0, 0], [1, 0, 0], [0, 2, 0], [0, 0, 3]], np.float32)
    np.testing.assert_allclose(mean_sq_neighbour_distance(pts), brute_force_mean_sq(pts, 3))
    assert mean_sq_neighbour_distance(pts)[0] == pytest.approx((0 + 1 + 4) / 3)


def test_queries_in_chunks_equal_one_query(monkeypatch):
    pts = np.random.default_rng(1).uniform(size=(1000, 3))
    whole = mean_sq_neighbour_distance(pts)
    monkeypatch.setattr("odin_sched.scenes.knn.QUERY_CHUNK", 97)
    np.testing.assert_array_equal(mean_sq_neighbour_distance(pts), whole)


def test_log_scales_clamp_and_shape():
    pts = torch.tensor([[0.0, 0, 0], [0, 0, 0], [0, 0, 0], [0, 0, 0], [5, 5, 5]])
    scales = knn_scales(pts)
    assert scales.shape == (5, 3) and scales.dtype == torch.float32
    assert scales[0, 0].item() == pytest.approx(0.5 * np.log(1e-7))  # clamped at the reference's 1e-7
    expected = 0.5 * np.log(brute_force_mean_sq(pts.numpy(), 3)[4])
    assert torch.allclose(scales[4], torch.full((3,), float(expected)))
    assert knn_scales(torch.zeros(1, 3)).tolist() == [[0.0, 0.0, 0.0]]
