"""The simulator's Grendel-GS step (odin_sched.sim.grendel) against hand-worked values.

Oracles: bytes of each all-to-all counted by hand for a three-Gaussian scene; the partition cuts of
made-up row costs worked out by hand; a one-GPU run against the sum of its images' costs.
"""
import dataclasses

import numpy as np
import pytest

from odin_sched.sim.costmodel import A100_NVLINK, CameraViews
from odin_sched.sim.grendel import (BACKWARD_BYTES, BORDER_TILE_BYTES, FORWARD_BYTES, _Camera, division,
                                    grendel_step, hidden_vs_grendel, simulate_grendel, update_heuristic)


def _views(spans, cols, width=32, height=64, weight=1.0, cameras=1):
    """Cameras that all see the Gaussians 0.. with tile-row spans ``spans`` [(lo, hi)] and ``cols`` columns."""
    n = len(spans)
    lo, hi = (np.tile(np.array([s[i] for s in spans], np.int32), cameras) for i in (0, 1))
    pairs = float(np.dot(np.array(cols, float), [b - a for a, b in spans])) * weight
    features = np.tile([n * weight, width * height, pairs], (cameras, 1)).astype(float)
    return CameraViews(features, np.arange(cameras + 1, dtype=np.int64) * n, np.tile(np.arange(n), cameras),
                       lo, hi, np.tile(np.array(cols, float), cameras), weight, width, height)


def test_alltoall_bytes_counted_by_hand():
    # a 32 x 64 image: 2 tile columns, 4 tile rows, cut in two at row 2; three Gaussians:
    # g0 rows [0, 1) on GPU 0's part, g1 rows [1, 3) on both parts, g2 rows [3, 4) on GPU 1's part
    views = _views([(0, 1), (1, 3), (3, 4)], [1, 2, 1])
    owner = np.array([0, 1, 0], np.int32)  # g1 is GPU 1's, g2 GPU 0's
    profile = dataclasses.replace(A100_NVLINK, image=(0.0, 0.0, 1.0, 0.0))  # cost = pixels: even halves
    step = grendel_step([_Camera(views, 0)], owner, np.array([2.0, 1.0]), [np.ones(4)], profile)
    assert list(step["pos"]) == [0, 2, 4]
    # GPU 0's part needs g0 (its own) and g1 (from GPU 1); GPU 1's part needs g1 (its own) and g2 (from GPU 0)
    assert np.array_equal(step["forward_bytes"], [[0, 44], [44, 0]]) and FORWARD_BYTES == 44
    assert np.array_equal(step["backward_bytes"], [[0, 36], [36, 0]]) and BACKWARD_BYTES == 36
    # the SSIM border: one row of 2 tiles of 3 x 16 x 16 float32 each way across the cut
    assert np.array_equal(step["border_bytes"], [[0, 2 * 3072], [2 * 3072, 0]]) and BORDER_TILE_BYTES == 3072


def test_division_of_made_up_row_costs():
    # one image of 6 rows, costs 1 1 1 1 4 4 (total 12) over 2 parts: the prefix 1 2 3 4 8 12 passes
    # 6 after row 4 -> searchsorted(right) = 4: rows [0, 4) cost 4, [4, 6) cost 8
    assert list(division(np.array([1, 1, 1, 1, 4, 4.]), 2, 6)) == [0, 4, 6]
    # three parts: thresholds 4 and 8 -> right-side positions 4 and 5
    assert list(division(np.array([1, 1, 1, 1, 4, 4.]), 3, 6)) == [0, 4, 5, 6]
    # two images of 4 rows, even costs, 2 parts: the cut at row 4 is the image edge
    assert list(division(np.ones(8), 2, 4)) == [0, 4, 8]
    # a cut one row from an edge moves onto it (border_divpos_coeff = 1): 9 rows of cost 1, then 7
    # of 3 in two images of 8 -> threshold 15 falls at row 10 (prefix 9, 12, 15 -> right side 11);
    # 11 % 8 = 3: stays; costs 1 x 7 then 20 -> threshold 13.5 at row 7: 7 + 1 >= 8 -> 8
    assert list(division(np.array([1.] * 9 + [3.] * 7), 2, 8)) == [0, 11, 16]
    assert list(division(np.array([1.] * 7 + [20.] + [0.5] * 8), 2, 8)) == [0, 8, 16]
    # the next visit's prediction: each part's seconds spread over its rows
    assert np.allclose(update_heuristic(np.array([0, 4, 6]), [8.0, 2.0], 6), [2, 2, 2, 2, 1, 1])


def test_one_gpu_is_the_sum_of_its_image_costs():
    views = _views([(0, 1), (1, 3), (3, 4), (0, 4)], [1, 2, 1, 2], weight=2.5, cameras=5)
    profile = dataclasses.replace(A100_NVLINK, image=(1e-3, 2e-6, 3e-7, 4e-6), render_rows=5e-8,
                                  version=(1e-5, 6e-9), step_seconds=7e-3)
    gaussians, batches = 1000, [np.array([0, 1]), np.array([2, 3]), np.array([4, 0])]
    run = simulate_grendel(views, gaussians, batches, profile, 1)
    images = profile.image_seconds(views.features[np.concatenate(batches)], np.full(6, gaussians)).sum()
    adam = len(batches) * (profile.version[0] + profile.version[1] * gaussians + profile.step_seconds)
    assert run["seconds"] == pytest.approx(images + adam, rel=1e-12)
    assert run["wait"].sum() == 0 and run["comm"].sum() == 0 and run["bytes"] == 0


def test_hidden_vs_grendel():
    assert hidden_vs_grendel([1.0, 1.0], [0.5, 0.5], [2.0, 2.0], [1.0, 3.0]) == pytest.approx(1 - 3 / 8)
    assert hidden_vs_grendel([1.0], [0.0], [0.0], [0.0]) == 0.0


def test_cli_writes_grendel_comparisons_and_published_points(tmp_path, capsys):
    import h5py
    from PIL import Image

    from pregel.cli import main

    out = str(tmp_path / "sim.h5")
    assert main(["simulate", "--layout", "city", "--gaussians", "2000", "--cameras", "24", "--width", "64",
                 "--height", "48", "--steps", "3", "--gpus", "1,2", "--modes", "odin,grendel", "--out", out]) == 0
    assert "odin/grendel" in capsys.readouterr().out
    with h5py.File(out) as f:
        assert sorted(f["steps_per_second"]) == ["grendel", "odin"]
        speed = {m: f[f"steps_per_second/{m}"][()] for m in ("odin", "grendel")}
        assert np.allclose(f["speedup_vs_grendel/odin"][()], speed["odin"] / speed["grendel"])
        assert f["hidden_vs_grendel"].shape == (2,) and "published_grendel" not in f
    published = str(tmp_path / "room.h5")
    assert main(["simulate", "--layout", "room", "--steps", "2", "--gpus", "1,4", "--modes", "grendel",
                 "--profile", "a100-nvlink", "--out", published]) == 0
    with h5py.File(published) as f:
        assert list(f["published_grendel/gpus"][()]) == [1, 4]
        # 30,000 images in 22.45 min at 1 GPU; in 6.18 min at 4 GPUs, batch 4 (Grendel-GS README)
        assert np.allclose(f["published_grendel/steps_per_second"][()], [30000 / (22.45 * 60), 7500 / (6.18 * 60)])
        assert f.attrs["gaussians"] == 1_600_000
    png = str(tmp_path / "scaling.png")
    assert main(["plot", published, "--out", png]) == 0
    assert Image.open(png).size == (1000, 380)


def test_unknown_mode_refused(tmp_path):
    from pregel.cli import main

    assert main(["simulate", "--layout", "city", "--gaussians", "2000", "--cameras", "24", "--modes", "odin,gpipe",
                 "--out", str(tmp_path / "x.h5")]) == 2
    assert not (tmp_path / "x.h5").exists()
