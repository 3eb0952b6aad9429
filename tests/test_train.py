"""End-to-end: a tiny scene trains (loss down, held-out PSNR up) and every output file is valid."""
import numpy as np
import pytest
import torch
from PIL import Image

from odin_sched.training.densify_schedule import DensifyConfig
from odin_sched.scenes.ply import read_gaussians_ply
from odin_sched.scenes.point_cloud import init_gaussians
from odin_sched.scenes.scene_gen import generate_scene
from odin_sched.scenes.scene_io import read_scene, write_scene
from odin_sched.scenes.sh import active_sh_degree
from odin_sched.training.image_order import camera_order
from odin_sched.scenes.knn import knn_scales
from odin_sched.training.train import TrainConfig, train
from pregel.errors import InputError

W = H = 24
C0 = 0.28209479177387814  # the reference code's SH constant of degree 0


@pytest.fixture(scope="module")
def scene_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("scene") / "scene.h5"
    write_scene(path, generate_scene(400, 10, W, H, seed=1))
    return path


def test_training_improves_and_writes_valid_outputs(scene_path, tmp_path):
    out, ply, png = tmp_path / "trained.h5", tmp_path / "trained.ply", tmp_path / "view.png"
    result = train(TrainConfig(scene_path, 120, out, ply=ply, png=png, seed=0, ssim_weight=0.2, eval_every=40,
                               progress=False))
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
    runs = [train(TrainConfig(scene_path, 15, tmp_path / f"t{i}.h5", seed=5, ssim_weight=0.0, eval_every=15,
                              progress=False)) for i in range(2)]
    assert np.array_equal(runs[0].losses, runs[1].losses)
    assert np.array_equal(read_scene(tmp_path / "t0.h5").means, read_scene(tmp_path / "t1.h5").means)


def test_densification_changes_the_count(scene_path, tmp_path):
    cfg = DensifyConfig(interval=10, start=10, stop=31, grad_threshold=1e-6)
    result = train(TrainConfig(scene_path, 30, tmp_path / "d.h5", seed=0, densify=cfg, eval_every=30, progress=False))
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
        train(TrainConfig(bare, 5, tmp_path / "x.h5", progress=False))


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
    assert err[2].endswith("--densify-interval must be at least 1, got 0")


@pytest.mark.parametrize("flags, says", [
    (("--densify-grad-threshold", "-1"), "--densify-grad-threshold must be a positive number, got -1.0"),
    (("--densify-from", "-3"), "--densify-from must be at least 0, got -3"),
    (("--densify-from", "20", "--densify-until", "10"), "--densify-until must be at least --densify-from (20), got 10"),
    (("--opacity-reset-interval", "-1"), "--opacity-reset-interval must be at least 0, got -1"),
])
def test_a_densify_flag_out_of_range_is_named_by_its_flag(scene_path, tmp_path, capsys, flags, says):
    # the settings' own field names (grad_threshold, percent_dense, min_opacity) are not flags a user can set
    from pregel.cli import main

    assert main(["train", "--scene", str(scene_path), "--steps", "5", "--out", str(tmp_path / "t.h5"), *flags]) == 2
    assert capsys.readouterr().err.strip() == f"pregel train: error: {says}"
    assert not (tmp_path / "t.h5").exists()


def test_trained_ply_restarts_training_from_the_same_parameters(scene_path, tmp_path):
    from odin_sched.training.train import prepare

    out, ply = tmp_path / "t.h5", tmp_path / "t.ply"
    train(TrainConfig(scene_path, 10, out, ply=ply, seed=0, eval_every=10, progress=False))
    trained = read_scene(out)
    start = prepare(TrainConfig(scene_path, 5, eval_every=5, init_ply=ply)).initial
    for name in ("means", "scales", "quats", "opacities"):
        assert np.array_equal(start[name].numpy(), getattr(trained, name)), name
    assert np.array_equal(torch.cat([start["sh0"], start["shN"]], dim=1).numpy(), trained.sh)
    np.testing.assert_allclose(trained.colors, trained.sh[:, 0] * C0 + 0.5, rtol=1e-6)  # the DC colour
    result = train(TrainConfig(scene_path, 5, tmp_path / "again.h5", seed=0, eval_every=5, progress=False, init_ply=ply))
    assert result.num_gaussians == trained.num_gaussians


def test_initial_colour_is_the_dc_coefficient():
    rgb = np.array([[0.5, 1.0, 0.0], [0.25, 0.75, 0.1]], np.float32)
    means = np.array([[0, 0, 0], [1, 0, 0]], np.float32)
    init = init_gaussians(means, rgb)
    assert init["sh0"].shape == (2, 1, 3) and init["shN"].shape == (2, 15, 3) and not init["shN"].any()
    np.testing.assert_allclose(init["sh0"][:, 0].numpy(), (rgb - 0.5) / C0, rtol=1e-6)
    assert init_gaussians(means, rgb, sh_degree=1)["shN"].shape == (2, 3, 3)
    assert init_gaussians(means, rgb, sh_degree=0)["shN"].shape == (2, 0, 3)


def test_sh_degree_schedule_is_one_band_per_thousand_images():
    # the reference raises the degree at iterations 1000, 2000, 3000 (before rendering them)
    assert [active_sh_degree(s, 1, 3) for s in (1, 999, 1000, 1999, 2000, 3000, 30_000)] == [0, 0, 1, 1, 2, 3, 3]
    assert [active_sh_degree(s, 1, 1) for s in (999, 1000, 5000)] == [0, 1, 1]
    # batches of 4 images: batch 250 holds image 1000 (Grendel-GS counts images)
    assert [active_sh_degree(s, 4, 3) for s in (249, 250, 500, 750)] == [0, 1, 2, 3]


def test_init_ply_of_another_degree(scene_path, tmp_path):
    from odin_sched.scenes.ply import write_ply
    from odin_sched.training.train import prepare

    rng = np.random.default_rng(0)
    g = 30
    gaussians = dict(means=rng.standard_normal((g, 3)), scales=rng.standard_normal((g, 3)) - 3,
                     quats=rng.standard_normal((g, 4)), opacities=rng.standard_normal(g))
    sh = rng.standard_normal((g, 4, 3)).astype(np.float32)
    write_ply(tmp_path / "d1.ply", **gaussians, sh=sh)
    start = prepare(TrainConfig(scene_path, 5, eval_every=5, init_ply=tmp_path / "d1.ply")).initial  # degree 3
    assert np.array_equal(start["sh0"][:, 0].numpy(), sh[:, 0])
    assert np.array_equal(start["shN"][:, :3].numpy(), sh[:, 1:]) and not start["shN"][:, 3:].any()
    same = prepare(TrainConfig(scene_path, 5, eval_every=5, init_ply=tmp_path / "d1.ply", sh_degree=1)).initial
    assert np.array_equal(same["sh0"].numpy(), sh[:, :1]) and np.array_equal(same["shN"].numpy(), sh[:, 1:])
    with pytest.raises(InputError, match=r"d1\.ply: the Gaussians have SH degree 1, more than TrainConfig.sh_degree 0"):
        prepare(TrainConfig(scene_path, 5, eval_every=5, init_ply=tmp_path / "d1.ply", sh_degree=0))
    with pytest.raises(InputError, match="TrainConfig.sh_degree must be an integer from 0 to 3, got 4"):
        prepare(TrainConfig(scene_path, 5, eval_every=5, sh_degree=4))


def test_sh_fits_view_dependent_images_better(tmp_path, monkeypatch):
    """Ground truth rendered from Gaussians with random higher SH bands (their colour changes with the
    view); training starts from the true geometry with the DC colour only. Degree 3 (bands raised every
    10 images here) fits the training images better than degree 0, which cannot change with the view."""
    from kernels.splat import render
    from odin_sched.scenes.ply import write_ply

    scene = generate_scene(300, 12, 32, 32, seed=1)
    rng = np.random.default_rng(0)
    sh = np.zeros((scene.num_gaussians, 16, 3), np.float32)
    sh[:, 0] = (scene.colors - 0.5) / C0
    sh[:, 1:] = rng.standard_normal((scene.num_gaussians, 15, 3)).astype(np.float32) * 0.25
    geometry = {k: getattr(scene, k) for k in ("means", "scales", "quats", "opacities")}
    images = []
    for c in range(scene.num_cameras):
        with torch.no_grad():
            image, _ = render(**{k: torch.from_numpy(v) for k, v in geometry.items()}, colors=torch.from_numpy(sh),
                              viewmat=torch.from_numpy(scene.viewmats[c]), K=torch.from_numpy(scene.Ks[c]),
                              width=32, height=32, sh_degree=3)
        images.append(np.round(image.clamp(0, 1).numpy() * 255).astype(np.uint8))
    scene.images = np.stack(images)
    write_scene(tmp_path / "vd.h5", scene)
    write_ply(tmp_path / "geometry.ply", **geometry, colors=scene.colors)
    monkeypatch.setattr("odin_sched.scenes.sh.SH_DEGREE_INTERVAL", 10)
    runs = {d: train(TrainConfig(tmp_path / "vd.h5", 300, tmp_path / f"d{d}.h5", sh_degree=d, eval_every=300,
                                 progress=False, init_ply=tmp_path / "geometry.ply")) for d in (0, 3)}
    assert runs[3].losses[-20:].mean() < 0.9 * runs[0].losses[-20:].mean()
    assert runs[3].final_psnr > runs[0].final_psnr
def test_densification_is_on_by_default_and_no_densify_turns_it_off(tmp_path):
    from pregel.cli import main

    scene = tmp_path / "s.h5"
    write_scene(scene, generate_scene(200, 9, 16, 16, seed=2))
    for flags, expected in (([], True), (["--no-densify"], False)):
        out = tmp_path / f"t{expected}.h5"
        assert main(["train", "--scene", str(scene), "--steps", "2", "--out", str(out), *flags]) == 0
        assert bool(read_scene(out).attrs["densify"]) is expected


def writable(path) -> bool:
    """Whether this process can open ``path`` for writing: HDF5 refuses while it is still open for
    reading here ("file is already open for read-only")."""
    import h5py

    try:
        h5py.File(path, "r+").close()
    except OSError:
        return False
    return True


@pytest.mark.parametrize("fails", [False, True])
def test_the_scene_file_is_closed_when_training_ends(scene_path, tmp_path, monkeypatch, fails):
    # closed by the trainer itself, not when the images object is collected: the set-up (and with it the
    # images) is kept alive here, as the traceback of a failed run keeps it
    import odin_sched.training.train as train_module

    kept, set_up = [], train_module.set_up

    def keeping(*args, **kwargs):
        kept.append(set_up(*args, **kwargs))
        return kept[-1]

    def failing(*args, **kwargs):
        raise RuntimeError("writing failed")

    monkeypatch.setattr(train_module, "set_up", keeping)
    if fails:  # the images were read, then the run fails before its end
        monkeypatch.setattr(train_module, "write_outputs", failing)
    config = TrainConfig(scene_path, 3, tmp_path / "c.h5", seed=0, eval_every=3, progress=False)
    assert writable(scene_path)
    if fails:
        with pytest.raises(RuntimeError, match="writing failed") as caught:
            train(config)
        assert caught.tb is not None
    else:
        train(config)
    assert kept[0][0].scene.images.reads > 0 and writable(scene_path)


def test_scene_images_close_and_open_again(scene_path):
    scene = read_scene(scene_path, lazy_images=True)
    whole = read_scene(scene_path).images
    with scene.images as images:
        assert np.array_equal(images[2], whole[2])
        assert not writable(scene_path)
    assert writable(scene_path)
    assert np.array_equal(scene.images[1], whole[1]) and scene.images.reads == 2  # a read after close opens it
    scene.images.close()
    scene.images.close()  # closing twice does nothing
    assert writable(scene_path)


def test_a_long_set_up_prints_a_line_before_the_first_step(scene_path, tmp_path, monkeypatch, capsys):
    # at millions of Gaussians the set-up (reading, k-NN scales) takes longer than the progress interval,
    # with no step ended yet to print a line: it says what it set up when it took that long (here the
    # interval is 0, so it always does)
    from pregel.progress import Progress

    monkeypatch.setattr(Progress, "LINE_SECONDS", 0.0)
    train(TrainConfig(scene_path, 1, tmp_path / "t.h5", eval_every=1))
    scene = read_scene(scene_path)
    cameras = len(scene.viewmats)  # trained: those not held out (the file's mask, else all but 0, 8, 16, ...)
    trained = int((~scene.heldout).sum()) if scene.heldout is not None else sum(c % 8 != 0 for c in range(cameras))
    first = capsys.readouterr().err.splitlines()[0]
    assert first.startswith("set up in ") and first.endswith(
        f"s: {len(scene.init_means):,} Gaussians, {trained} training cameras at {scene.width} x {scene.height}"), first
