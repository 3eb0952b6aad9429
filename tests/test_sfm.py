"""`pregel sfm`: structure from motion with pycolmap on a folder of real photos (tests/data/cour_carree)."""
import shutil
from pathlib import Path

import numpy as np
import pytest

from odin_sched.scenes.scene_io import read_scene
from odin_sched.scenes.sfm import calibration_warning
from pregel.cli import main

pytest.importorskip("pycolmap")
PHOTOS = Path(__file__).parent / "data" / "cour_carree"
NAMES = [f"floor2_0{i}.jpg" for i in range(1, 6)]


@pytest.fixture(scope="module")
def scene(tmp_path_factory):
    out = tmp_path_factory.mktemp("sfm") / "scene.h5"
    assert main(["sfm", str(PHOTOS), "--out", str(out), "--heldout-every", "4", "--threads", "1"]) == 0
    return out


def test_real_photos_all_register_and_make_a_scene(scene):
    s = read_scene(scene)
    assert s.num_cameras == 5 and s.attrs["image_names"].split("\n") == NAMES
    np.testing.assert_array_equal(s.heldout, [True, False, False, False, True])
    assert len(s.init_means) >= 50  # a real reconstruction's points
    # undistorted into one pinhole camera: fx, fy equal focal, principal point inside the image
    K = s.Ks[0]
    assert np.allclose(s.Ks, K) and 0 < K[0, 2] < s.width and 0 < K[1, 2] < s.height
    # the cameras are where the photos were taken: every point is in front of the cameras that see it
    cam = np.einsum("cij,pj->cpi", s.viewmats[:, :3, :3].astype(np.float64), s.init_means) + s.viewmats[:, None, :3, 3]
    assert (cam[..., 2] > 0).mean() > 0.9


def test_train_accepts_the_scene(scene, tmp_path):
    out = tmp_path / "t.h5"
    assert main(["train", "--scene", str(scene), "--steps", "3", "--out", str(out)]) == 0
    assert read_scene(out).attrs["steps"] == 3


def test_fewer_than_two_registered_photos_is_one_line(tmp_path, capfd):  # capfd: pycolmap logs from C++
    folder = tmp_path / "photos"
    folder.mkdir()
    shutil.copy(PHOTOS / NAMES[0], folder / "a.jpg")
    out = tmp_path / "s.h5"
    assert main(["sfm", str(folder), "--out", str(out), "--threads", "1"]) == 2
    err = capfd.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "error" in err[0] and "found 1 photo(s)" in err[-1] and "at least two" in err[-1]
    rng = np.random.default_rng(0)  # two photos of noise: nothing matches, nothing registers
    from PIL import Image
    for name in ("a.jpg", "b.jpg"):
        Image.fromarray(rng.integers(0, 256, (240, 320, 3), dtype=np.uint8)).save(folder / name)
    assert main(["sfm", str(folder), "--out", str(out), "--threads", "1"]) == 2
    err = capfd.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "only 0 of 2 photos registered" in err[-1] and "not registered: a.jpg, b.jpg" in err[-1]
    assert not out.exists()


def test_every_photo_held_out_names_the_photos_not_a_temporary_folder(tmp_path, capfd):
    """The convert step's refusal (every registered photo held out) names the photo folder: the
    temporary folder holding the reconstruction is gone by the time the user reads the line."""
    out = tmp_path / "s.h5"
    assert main(["sfm", str(PHOTOS), "--out", str(out), "--heldout-every", "1", "--threads", "1"]) == 2
    err = capfd.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "all held out with --heldout-every 1" in err[0], err
    assert f"the reconstruction of {PHOTOS}" in err[0] and "pregel-sfm-" not in err[0], err[0]
    assert not out.exists()


def test_camera_model_flag_calibrates_that_model(tmp_path, capfd):
    """A one-focal-length model (SIMPLE_RADIAL) gives square pixels after undistortion (pycolmap's
    undistort_camera keeps the focal length), with no calibration warning; an unknown model is one line."""
    out = tmp_path / "s.h5"
    assert main(["sfm", str(PHOTOS), "--out", str(out), "--camera-model", "SIMPLE_RADIAL", "--threads", "1"]) == 0
    assert "warning" not in capfd.readouterr().err
    s = read_scene(out)
    assert s.num_cameras == 5 and s.Ks[0, 0, 0] == s.Ks[0, 1, 1]
    assert main(["sfm", str(PHOTOS), "--out", str(tmp_path / "t.h5"), "--camera-model", "FISHEYE"]) == 2
    err = capfd.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--camera-model must be one of" in err[0] and "'FISHEYE'" in err[0]
    assert not (tmp_path / "t.h5").exists()


def test_calibration_warning_names_non_square_pixels():
    # the OPENCV camera pycolmap 4.2.1 calibrates from tests/data/cour_carree (fx, fy, cx, cy, k1, k2, p1, p2)
    line = calibration_warning("OPENCV", [725.67, 301.80, 180, 320, 0.124, 0.0001, 0.163, -0.105])
    assert "fx 725.7, fy 301.8" in line and "SIMPLE_RADIAL" in line
    assert calibration_warning("OPENCV", [500.0, 505.0, 180, 320, 0.1, 0, 0, 0]) is None  # within 10%
    assert calibration_warning("PINHOLE", [300.0, 500.0, 180, 320]) is not None
    assert calibration_warning("SIMPLE_RADIAL", [500.0, 180, 320, 0.1]) is None  # one focal length


@pytest.mark.parametrize("camera_model", ["OPENCV", "SIMPLE_RADIAL"])
def test_scene_cameras_project_the_points_where_pycolmap_does(tmp_path, camera_model):
    """Oracle: pycolmap's own cameras. Each SfM point seen in a photo, projected with the scene's viewmat
    and K, lands where pycolmap's undistorted pinhole camera projects it, and near the photo's keypoint
    that observed it, undistorted by pycolmap (within the reconstruction's reprojection error)."""
    import pycolmap
    from odin_sched.scenes.colmap import convert_colmap
    from odin_sched.scenes.sfm import reconstruct

    model = reconstruct(PHOTOS, tmp_path, NAMES, threads=1, camera_model=camera_model)
    (tmp_path / "model").mkdir()
    model.write_text(tmp_path / "model")
    scene = convert_colmap(tmp_path / "model", PHOTOS, downscale=2)
    ids = {model.image(i).name: i for i in model.reg_image_ids()}
    for c, name in enumerate(scene.attrs["image_names"].split("\n")):
        image = model.image(ids[name])
        camera = model.camera(image.camera_id)
        pinhole = pycolmap.undistort_camera(pycolmap.UndistortCameraOptions(), camera)
        scale = np.array([scene.width / pinhole.width, scene.height / pinhole.height])
        seen = [p for p in image.points2D if p.has_point3D()]
        xyz = np.array([model.point3D(p.point3D_id).xyz for p in seen])
        pose = image.cam_from_world()
        expected = pinhole.img_from_cam(xyz @ pose.rotation.matrix().T + pose.translation) * scale
        rays = camera.cam_from_img(np.array([p.xy for p in seen]))
        keypoints = pinhole.img_from_cam(np.c_[rays, np.ones(len(rays))]) * scale
        cam = xyz @ scene.viewmats[c, :3, :3].T.astype(np.float64) + scene.viewmats[c, :3, 3]
        K = scene.Ks[c].astype(np.float64)
        ours = cam[:, :2] / cam[:, 2:] * [K[0, 0], K[1, 1]] + [K[0, 2], K[1, 2]]
        np.testing.assert_allclose(ours, expected, atol=1e-3)
        assert np.median(np.linalg.norm(ours - keypoints, axis=1)) < 1.0
