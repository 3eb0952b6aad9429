"""End-to-end: a tiny scene trains (loss down, held-out PSNR up) and every output file is valid."""
import numpy as np
import pytest
import torch
from PIL import Image

from odin_sched.densify import DensifyConfig
from odin_sched.ply import read_gaussians_ply
from odin_sched.scene_gen import generate_scene
from odin_sched.scene_io import read_scene, write_scene
from odin_sched.image_order import camera_order
from odin_sched.train import knn_scales, train
from pregel.errors import InputError

W = H = 24


@pytest.fixture(scope="module")
def scene_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("scene") / "scene.h5"
    write_scene(path, generate_scene(400, 10, W, H, seed=1))
    return path


def test_training_improves_and_writes_valid_outputs(scene_path, tmp_path):
    out, ply, png = tmp_path / "trained.h5", tmp_path / "trained.ply", tmp_path / "view.png"
    result = train(scene_path, 120, out, ply_path=ply, png_path=png, seed=0, ssim_weight=0.2,
                   eval_every=40, progress=False)
    assert result.psnr[-1] > result.psnr[0] + 1.0
    assert result.losses[-20:].mean() < 0.7 * result.losses[:20].mean()

    trained = read_scene(out)
    assert trained.num_gaussians == result.num_gaussians == 200  # the initial cloud, no densification
    assert np.array_equal(trained.images, read_scene(scene_path).images)
    assert np.array_equal(trained.metrics["psnr_steps"], [40, 80, 120])
    assert trained.attrs["final_psnr"] == pytest.approx(result.final_psnr)
    back = read_gaussians_ply(ply)
    np.testing.assert_array_equal(back["means"], trained.means)
    np.testing.assert_array_equal(back["opacities"], trained.opacities)
    with Image.open(png) as im:
        assert im.size == (2 * W, H)


def test_training_is_deterministic(scene_path, tmp_path):
    runs = [train(scene_path, 15, tmp_path / f"t{i}.h5", seed=5, ssim_weight=0.0, eval_every=15, progress=False)
            for i in range(2)]
    assert np.array_equal(runs[0].losses, runs[1].losses)
    assert np.array_equal(read_scene(tmp_path / "t0.h5").means, read_scene(tmp_path / "t1.h5").means)


def test_densification_changes_the_count(scene_path, tmp_path):
    cfg = DensifyConfig(interval=10, start=10, stop=31, grad_threshold=1e-6)
    result = train(scene_path, 30, tmp_path / "d.h5", seed=0, densify=cfg, eval_every=30, progress=False)
    assert result.num_gaussians > 200
    assert read_scene(tmp_path / "d.h5").num_gaussians == result.num_gaussians


def test_camera_order_is_seeded_permutations():
    ids = np.array([1, 2, 3, 5])
    a = camera_order(ids, 10, seed=7)
    assert np.array_equal(a, camera_order(ids, 10, seed=7))
    assert sorted(a[:4]) == [1, 2, 3, 5] and sorted(a[4:8]) == [1, 2, 3, 5]


def test_knn_scales_against_brute_force():
    pts = torch.randn(50, 3, dtype=torch.float32)
    d2 = ((pts[:, None] - pts[None]) ** 2).sum(-1).numpy()
    np.fill_diagonal(d2, np.inf)
    expected = 0.5 * np.log(np.sort(d2, axis=1)[:, :3].mean(axis=1))
    np.testing.assert_allclose(knn_scales(pts)[:, 0].numpy(), expected, rtol=1e-4, atol=1e-5)


def test_scene_without_initial_cloud_is_rejected(scene_path, tmp_path):
    scene = read_scene(scene_path)
    scene.init_means = scene.init_colors = None
    bare = tmp_path / "bare.h5"
    write_scene(bare, scene)
    with pytest.raises(InputError, match="/init: no initial point cloud"):
        train(bare, 5, tmp_path / "x.h5", progress=False)


def test_command_line(tmp_path, capsys):
    from pregel.cli import main

    scene, out = tmp_path / "s.h5", tmp_path / "t.h5"
    assert main(["generate-scene", "--gaussians", "200", "--cameras", "9", "--width", "16", "--height", "16",
                 "--seed", "2", "--out", str(scene)]) == 0
    assert main(["train", "--scene", str(scene), "--steps", "10", "--out", str(out), "--ply",
                 str(tmp_path / "t.ply"), "--eval-every", "5", "--densify", "--densify-from", "5",
                 "--densify-interval", "5"]) == 0
    assert read_scene(out).attrs["steps"] == 10 and (tmp_path / "t.ply").exists() and (tmp_path / "t.png").exists()
    capsys.readouterr()
    assert main(["train", "--scene", str(tmp_path / "missing.h5"), "--steps", "5", "--out", str(out)]) == 2
    assert main(["generate-scene", "--gaussians", "200", "--cameras", "1", "--out", str(scene)]) == 2
    assert main(["train", "--scene", str(scene), "--steps", "5", "--out", str(out), "--densify",
                 "--densify-interval", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and "missing.h5: file not found" in err[0] and "--cameras" in err[1]
    assert "--densify options" in err[2]


def test_trained_ply_restarts_training_from_the_same_parameters(scene_path, tmp_path):
    from odin_sched.train import prepare

    out, ply = tmp_path / "t.h5", tmp_path / "t.ply"
    train(scene_path, 10, out, ply_path=ply, seed=0, eval_every=10, progress=False)
    trained = read_scene(out)
    start = prepare(scene_path, 5, 1, 0, 0.2, 5, (), init_ply=ply).initial
    for name in ("means", "scales", "quats", "opacities"):
        assert np.array_equal(start[name].numpy(), getattr(trained, name)), name
    np.testing.assert_allclose(start["colors"].numpy(), trained.colors, atol=1e-6)  # through the SH coefficient
    result = train(scene_path, 5, tmp_path / "again.h5", seed=0, eval_every=5, progress=False, init_ply=ply)
    assert result.num_gaussians == trained.num_gaussians


def test_densification_is_on_by_default_and_no_densify_turns_it_off(tmp_path):
    from pregel.cli import main

    scene = tmp_path / "s.h5"
    write_scene(scene, generate_scene(200, 9, 16, 16, seed=2))
    for flags, expected in (([], True), (["--no-densify"], False)):
        out = tmp_path / f"t{expected}.h5"
        assert main(["train", "--scene", str(scene), "--steps", "2", "--out", str(out), *flags]) == 0
        assert bool(read_scene(out).attrs["densify"]) is expected
