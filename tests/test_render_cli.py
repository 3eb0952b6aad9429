"""`pregel render` writes exactly what kernels.splat.render draws for the same camera."""
import imageio.v3 as iio
import numpy as np
import pytest
import torch
from PIL import Image

from kernels.splat import render
from odin_sched.scenes.ply import write_ply
from odin_sched.scenes.render_views import orbit_viewmats
from odin_sched.scenes.scene_gen import generate_scene
from odin_sched.scenes.scene_io import write_scene
from pregel.cli import main


@pytest.fixture(scope="module")
def scene_file(tmp_path_factory):
    scene = generate_scene(300, 10, 40, 32, seed=2)
    path = tmp_path_factory.mktemp("scene") / "scene.h5"
    write_scene(path, scene)
    return scene, path


def _expected(params, scene, cam):
    tensors = {k: torch.from_numpy(np.ascontiguousarray(v, np.float32)) for k, v in params.items()}
    image, _ = render(**tensors, viewmat=torch.from_numpy(scene.viewmats[cam]), K=torch.from_numpy(scene.Ks[cam]),
                      width=scene.width, height=scene.height)
    return np.round(image.clamp(0, 1).numpy() * 255).astype(np.uint8)


def test_default_cameras_are_the_heldout_ones_and_equal_the_renderer(scene_file, tmp_path):
    scene, path = scene_file
    assert main(["render", "--scene", str(path), "--out", str(tmp_path / "views")]) == 0
    held = np.flatnonzero(scene.heldout)
    assert sorted(p.name for p in (tmp_path / "views").iterdir()) == [f"{c:04d}.png" for c in held]
    for c in held:
        png = np.asarray(Image.open(tmp_path / "views" / f"{c:04d}.png"))
        np.testing.assert_array_equal(png, _expected(scene.gaussians(), scene, c))
        assert png.std() > 5  # a picture, not a blank


def test_ply_gaussians_and_chosen_cameras(scene_file, tmp_path):
    scene, path = scene_file
    params = {k: v.copy() for k, v in scene.gaussians().items()}
    params["colors"] = 1.0 - params["colors"]  # visibly different from the scene's own
    write_ply(tmp_path / "m.ply", **params)
    assert main(["render", "--scene", str(path), "--ply", str(tmp_path / "m.ply"), "--cameras", "1,3",
                 "--out", str(tmp_path / "v")]) == 0
    for c in (1, 3):
        png = np.asarray(Image.open(tmp_path / "v" / f"{c:04d}.png"))
        expected = _expected(params, scene, c)
        assert np.abs(png.astype(int) - expected).max() <= 1  # colours went through the SH coefficient
        assert np.abs(png.astype(int) - _expected(scene.gaussians(), scene, c)).max() > 50


def test_orbit_gif_has_the_frames_and_looks_at_the_centre(scene_file, tmp_path):
    scene, path = scene_file
    assert main(["render", "--scene", str(path), "--cameras", "0", "--orbit", "6", "--out", str(tmp_path)]) == 0
    frames = iio.imread(tmp_path / "orbit.gif", index=None)
    assert frames.shape[:3] == (6, scene.height, scene.width)
    assert all(f[..., :3].std() > 5 for f in frames)
    centre = scene.means.mean(axis=0)
    views = orbit_viewmats(scene.viewmats, centre, 6)
    cam_centre = np.einsum("nij,j->ni", views[:, :3, :3], centre) + views[:, :3, 3]
    np.testing.assert_allclose(cam_centre[:, :2], 0, atol=1e-4)  # the centre is on every optical axis
    assert (cam_centre[:, 2] > 0).all()


def test_bad_camera_and_missing_gpu_are_one_line(scene_file, tmp_path, capsys):
    _, path = scene_file
    assert main(["render", "--scene", str(path), "--cameras", "0,99", "--out", str(tmp_path)]) == 2
    assert "camera 99 does not exist" in capsys.readouterr().err
    if not torch.cuda.is_available():
        assert main(["render", "--scene", str(path), "--device", "cuda", "--out", str(tmp_path)]) == 2
        assert "no CUDA GPU" in capsys.readouterr().err


def test_scene_with_sh_coefficients_renders_them(tmp_path):
    scene = generate_scene(300, 10, 40, 32, seed=2)
    scene.sh = np.random.default_rng(4).standard_normal((scene.num_gaussians, 9, 3)).astype(np.float32) * 0.5
    write_scene(tmp_path / "sh.h5", scene)
    assert main(["render", "--scene", str(tmp_path / "sh.h5"), "--cameras", "2", "--out", str(tmp_path / "v")]) == 0
    geometry = {k: torch.from_numpy(getattr(scene, k)) for k in ("means", "scales", "quats", "opacities")}
    image, _ = render(**geometry, colors=torch.from_numpy(scene.sh), viewmat=torch.from_numpy(scene.viewmats[2]),
                      K=torch.from_numpy(scene.Ks[2]), width=scene.width, height=scene.height, sh_degree=2)
    png = np.asarray(Image.open(tmp_path / "v" / "0002.png"))
    np.testing.assert_array_equal(png, np.round(image.clamp(0, 1).numpy() * 255).astype(np.uint8))
    rgb = {k: getattr(scene, k) for k in ("means", "scales", "quats", "opacities", "colors")}
    assert np.abs(png.astype(int) - _expected(rgb, scene, 2)).max() > 50  # not the RGB colours
