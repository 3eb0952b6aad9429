"""COLMAP sparse models written here, independently of the reader, by the format spec
(https://colmap.github.io/format.html), in text and binary form, converted with `pregel convert-colmap`.
The oracle for the cameras is scipy's quaternion rotation and the pinhole equations; a render of the
converted scene's /init points must put each point where that projection says."""
import struct
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from scipy.spatial.transform import Rotation

from kernels.splat import render
from odin_sched.scenes.colmap import convert_colmap, read_rgb8
from odin_sched.scenes.scene_io import read_scene
from pregel.cli import main
from pregel.errors import InputError

W, H = 96, 72
MODEL_IDS = {"SIMPLE_PINHOLE": 0, "PINHOLE": 1, "SIMPLE_RADIAL": 2, "RADIAL": 3, "OPENCV": 4, "OPENCV_FISHEYE": 5}
CAMERAS = {  # id -> (model, params)
    1: ("PINHOLE", [80.0, 84.0, 48.0, 36.0]),
    2: ("SIMPLE_PINHOLE", [78.0, 47.5, 35.5]),
    3: ("SIMPLE_RADIAL", [82.0, 48.0, 36.0, 0.0]),  # distortion models without distortion: used as they are
    4: ("RADIAL", [79.0, 48.5, 36.5, 0.0, 0.0]),
    5: ("OPENCV", [81.0, 80.0, 48.0, 36.0, 0.0, 0.0, 0.0, 0.0]),
}
POINTS = np.array([[0.6, 0.0, 0.0], [-0.5, 0.3, 0.4], [0.0, -0.6, -0.3], [0.1, 0.5, -0.5]])
COLORS = np.array([[255, 0, 0], [0, 255, 0], [0, 0, 255], [200, 200, 50]], np.uint8)


def _look_at(pos):
    """World-to-camera (qvec (w, x, y, z), tvec) of a camera at ``pos`` looking at the origin, z up."""
    fwd = -pos / np.linalg.norm(pos)
    right = np.cross(fwd, [0, 0, 1.0])
    right /= np.linalg.norm(right)
    rot = np.stack([right, np.cross(fwd, right), fwd])  # rows: camera x (right), y (down), z (forward)
    x, y, z, w = Rotation.from_matrix(rot).as_quat()
    return np.array([w, x, y, z]), -rot @ pos


def _images(cameras=CAMERAS):
    """(image id, qvec, tvec, camera id, name), one per camera, on a ring; names not in id order."""
    out = []
    for i, cam in enumerate(sorted(cameras)):
        angle = 2 * np.pi * i / len(cameras)
        q, t = _look_at(np.array([3 * np.cos(angle), 3 * np.sin(angle), 1.0]))
        out.append((10 + i, q, t, cam, f"view_{(7 * i) % 5}.{'png' if i % 2 else 'jpg'}"))
    return out


def _num(values):
    return " ".join(repr(float(v)) for v in values)


def write_text(folder, cameras=CAMERAS, images=None):
    folder.mkdir(parents=True, exist_ok=True)
    images = _images(cameras) if images is None else images
    with open(folder / "cameras.txt", "w") as f:
        f.write("# Camera list with one line of data per camera:\n")
        for cid, (model, params) in cameras.items():
            f.write(f"{cid} {model} {W} {H} {_num(params)}\n")
    with open(folder / "images.txt", "w") as f:
        f.write("# Image list with two lines of data per image:\n")
        for iid, q, t, cid, name in images:
            f.write(f"{iid} {_num(q)} {_num(t)} {cid} {name}\n")
            f.write("\n" if iid % 2 else "12.5 30.25 1 40.0 2.0 -1\n")  # an empty and a filled POINTS2D line
    with open(folder / "points3D.txt", "w") as f:
        f.write("# 3D point list with one line of data per point:\n")
        for pid, (xyz, rgb) in enumerate(zip(POINTS, COLORS)):
            track = " ".join(f"{iid} {pid}" for iid, *_ in images[: 2 + pid % 2])
            f.write(f"{pid + 1} {_num(xyz)} {' '.join(map(str, rgb))} 0.5 {track}\n")


def write_binary(folder, cameras=CAMERAS, images=None):
    folder.mkdir(parents=True, exist_ok=True)
    images = _images(cameras) if images is None else images
    with open(folder / "cameras.bin", "wb") as f:
        f.write(struct.pack("<Q", len(cameras)))
        for cid, (model, params) in cameras.items():
            f.write(struct.pack("<iiQQ", cid, MODEL_IDS[model], W, H) + struct.pack(f"<{len(params)}d", *params))
    with open(folder / "images.bin", "wb") as f:
        f.write(struct.pack("<Q", len(images)))
        for iid, q, t, cid, name in images:
            f.write(struct.pack("<i7di", iid, *q, *t, cid) + name.encode() + b"\x00")
            f.write(struct.pack("<Q", 2) + struct.pack("<ddq", 1.5, 2.5, -1) + struct.pack("<ddq", 3.0, 4.0, 1))
    with open(folder / "points3D.bin", "wb") as f:
        f.write(struct.pack("<Q", len(POINTS)))
        for pid, (xyz, rgb) in enumerate(zip(POINTS, COLORS)):
            track = [(iid, pid) for iid, *_ in images[: 2 + pid % 2]]
            f.write(struct.pack("<Q3d3BdQ", pid + 1, *xyz, *rgb, 0.5, len(track)))
            f.write(b"".join(struct.pack("<ii", *pair) for pair in track))


def write_images(folder, images=None, size=(W, H)):
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for *_, name in (_images() if images is None else images):
        Image.fromarray(rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)).save(folder / name)


def expected_projection(q, t, cam, scale=1.0):
    """Pixel coordinates [P, 2] of POINTS by scipy's rotation and the pinhole model (no distortion)."""
    model, p = CAMERAS[cam]
    fx, fy, cx, cy = (p[0], p[0], p[1], p[2]) if model.startswith("SIMPLE") or model == "RADIAL" else p[:4]
    cam_pts = Rotation.from_quat([q[1], q[2], q[3], q[0]]).apply(POINTS) + t
    return np.stack([fx * cam_pts[:, 0] / cam_pts[:, 2] + cx, fy * cam_pts[:, 1] / cam_pts[:, 2] + cy], 1) * scale


def blob_centre(image):
    """Intensity-weighted centre (x, y) of an image [H, W, 3], pixel centres at +0.5."""
    lum = image.sum(axis=2)
    ys, xs = np.mgrid[:lum.shape[0], :lum.shape[1]] + 0.5
    return np.array([(lum * xs).sum() / lum.sum(), (lum * ys).sum() / lum.sum()])


@pytest.mark.parametrize("form", ["text", "binary"])
@pytest.mark.parametrize("downscale", [1, 2])
def test_converted_scene_renders_init_points_where_colmap_projects_them(tmp_path, capsys, form, downscale):
    (write_text if form == "text" else write_binary)(tmp_path / "sparse")
    write_images(tmp_path / "images")
    out = tmp_path / "scene.h5"
    assert main(["convert-colmap", str(tmp_path / "sparse"), "--images", str(tmp_path / "images"),
                 "--out", str(out), "--downscale", str(downscale), "--heldout-every", "2"]) == 0
    assert capsys.readouterr().err == ""
    scene = read_scene(out)
    images = sorted(_images(), key=lambda im: im[4])
    assert (scene.width, scene.height) == (W // downscale, H // downscale)
    assert scene.images.shape == (5, H // downscale, W // downscale, 3)
    np.testing.assert_array_equal(scene.heldout, [True, False, True, False, True])
    np.testing.assert_allclose(scene.init_means, POINTS, atol=1e-7)
    np.testing.assert_allclose(scene.init_colors, COLORS / 255.0, atol=1e-7)
    if downscale == 1:  # the pixels are the files' own
        first = np.asarray(Image.open(tmp_path / "images" / images[0][4]).convert("RGB"))
        np.testing.assert_array_equal(scene.images[0], first)

    one = dict(scales=torch.full((1, 3), float(np.log(0.004))), quats=torch.tensor([[1.0, 0, 0, 0]]),
               opacities=torch.full((1,), 6.0), colors=torch.ones(1, 3))
    for c, (_, q, t, cam, _) in enumerate(images):
        expected = expected_projection(q, t, cam, 1.0 / downscale)
        for point, uv in zip(scene.init_means, expected):  # one point per render: blobs never overlap
            image, visible = render(means=torch.from_numpy(point[None]), **one,
                                    viewmat=torch.from_numpy(scene.viewmats[c]), K=torch.from_numpy(scene.Ks[c]),
                                    width=scene.width, height=scene.height)
            assert visible.all()
            np.testing.assert_allclose(blob_centre(image.numpy()), uv, atol=0.05)


def test_text_and_binary_models_convert_to_the_same_scene(tmp_path):
    write_text(tmp_path / "txt")
    write_binary(tmp_path / "bin")
    write_images(tmp_path / "images")
    a = convert_colmap(tmp_path / "txt", tmp_path / "images")
    b = convert_colmap(tmp_path / "bin", tmp_path / "images")
    for name in ("viewmats", "Ks", "images", "init_means", "init_colors", "heldout", "means", "scales"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    np.testing.assert_array_equal(a.heldout, [True, False, False, False, False])


def _convert_fails(tmp_path, capsys, match, cameras=CAMERAS, images=None, image_files=None, size=(W, H)):
    write_text(tmp_path / "sparse", cameras, images)
    write_images(tmp_path / "images", image_files if image_files is not None else images, size)
    out = tmp_path / "scene.h5"
    assert main(["convert-colmap", str(tmp_path / "sparse"), "--images", str(tmp_path / "images"),
                 "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) >= 1 and "error" in err[-1]
    assert match in err[-1], err[-1]
    assert not out.exists()


PHOTO = Path(__file__).parent / "data" / "cour_carree" / "floor2_01.jpg"  # a real photo, 360 x 640
DISTORTED = {
    "SIMPLE_RADIAL": [520.0, 180.0, 320.0, -0.108],
    "RADIAL": [515.0, 181.0, 318.0, -0.09, 0.02],
    "OPENCV": [520.0, 522.0, 179.0, 321.0, -0.1, 0.01, 0.001, -0.002],
    "FULL_OPENCV": [520.0, 522.0, 179.0, 321.0, -0.1, 0.01, 0.001, -0.002, 0.001, 0.0, 0.0, 0.0],
    "OPENCV_FISHEYE": [300.0, 301.0, 180.0, 320.0, 0.02, -0.01, 0.0, 0.0],
}


def _one_photo_model(folder, model, params):
    """A text model of one camera ``model`` seeing POINTS, and its image folder with the real photo twice
    (a.jpg held out, b.jpg trained on with ``heldout_every=2``: a scene needs both)."""
    width, height = Image.open(PHOTO).size
    (folder / "sparse").mkdir(parents=True)
    (folder / "sparse" / "cameras.txt").write_text(f"1 {model} {width} {height} {_num(params)}\n")
    q, t = _look_at(np.array([3.0, 0.0, 1.0]))
    (folder / "sparse" / "images.txt").write_text("".join(f"{i} {_num(q)} {_num(t)} 1 {name}\n\n"
                                                          for i, name in ((1, "a.jpg"), (2, "b.jpg"))))
    (folder / "sparse" / "points3D.txt").write_text(
        "".join(f"{i + 1} {_num(p)} 200 100 50 0.5 1 {i}\n" for i, p in enumerate(POINTS)))
    (folder / "images").mkdir()
    for name in ("a.jpg", "b.jpg"):
        (folder / "images" / name).write_bytes(PHOTO.read_bytes())


@pytest.mark.parametrize("model", sorted(DISTORTED))
def test_distorted_cameras_are_undistorted_as_pycolmap_does(tmp_path, model):
    """Oracle: pycolmap's own undistorter (COLMAP's image_undistorter) on the real photo."""
    pycolmap = pytest.importorskip("pycolmap")
    _one_photo_model(tmp_path, model, DISTORTED[model])
    scene = convert_colmap(tmp_path / "sparse", tmp_path / "images", heldout_every=2)
    photo = np.asarray(Image.open(PHOTO).convert("RGB"))
    camera = pycolmap.Camera(model=model, width=photo.shape[1], height=photo.shape[0], params=DISTORTED[model])
    options = pycolmap.UndistortCameraOptions()
    bitmap, pinhole = pycolmap.undistort_image(options, pycolmap.Bitmap.from_array(photo), camera)
    assert pinhole.model_name == "PINHOLE"
    assert (scene.width, scene.height) == (pinhole.width, pinhole.height) != (photo.shape[1], photo.shape[0])
    np.testing.assert_array_equal(scene.images[0], bitmap.to_array())
    fx, fy, cx, cy = pinhole.params
    np.testing.assert_allclose(scene.Ks[0], [[fx, 0, cx], [0, fy, cy], [0, 0, 1]], rtol=1e-6)


def test_undistorted_then_downscaled(tmp_path):
    pytest.importorskip("pycolmap")
    _one_photo_model(tmp_path, "SIMPLE_RADIAL", DISTORTED["SIMPLE_RADIAL"])
    full = convert_colmap(tmp_path / "sparse", tmp_path / "images", heldout_every=2)
    half = convert_colmap(tmp_path / "sparse", tmp_path / "images", downscale=2, heldout_every=2)
    assert (half.width, half.height) == (round(full.width / 2), round(full.height / 2))
    np.testing.assert_allclose(half.Ks[0][:2], full.Ks[0][:2] * [[half.width / full.width], [half.height / full.height]],
                               rtol=1e-6)


def test_distortion_without_pycolmap_says_how_to_install_it(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "pycolmap", None)  # import pycolmap raises ImportError
    _one_photo_model(tmp_path, "SIMPLE_RADIAL", DISTORTED["SIMPLE_RADIAL"])
    out = tmp_path / "scene.h5"
    assert main(["convert-colmap", str(tmp_path / "sparse"), "--images", str(tmp_path / "images"),
                 "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "undistorting SIMPLE_RADIAL cameras needs pycolmap" in err[0]
    assert "pip install 'pregel-mpi[colmap]'" in err[0] and not out.exists()


def _png16_rgb(path, pixels):
    """A 16-bit RGB PNG written by hand (zlib, filter 0 per row): Pillow cannot write one."""
    h, w, _ = pixels.shape
    raw = b"".join(b"\x00" + pixels[y].astype(">u2").tobytes() for y in range(h))

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 16, 2, 0, 0, 0))
                     + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def test_grayscale_and_16_bit_images_are_read_as_they_are(tmp_path):
    rng = np.random.default_rng(3)
    gray8 = rng.integers(0, 256, (5, 7), dtype=np.uint8)
    Image.fromarray(gray8).save(tmp_path / "g8.png")
    np.testing.assert_array_equal(read_rgb8(tmp_path / "g8.png"), np.repeat(gray8[..., None], 3, axis=2))
    gray16 = rng.integers(0, 65536, (5, 7)).astype(np.uint16)
    gray16[0, :3] = [0, 65535, 300]  # 300 / 65535 of full scale, not 300 clipped to 255
    Image.fromarray(gray16).save(tmp_path / "g16.png")
    expected = np.round(gray16 / 65535.0 * 255.0).astype(np.uint8)
    got = read_rgb8(tmp_path / "g16.png")
    np.testing.assert_array_equal(got, np.repeat(expected[..., None], 3, axis=2))
    assert got[0, :3, 0].tolist() == [0, 255, 1]
    rgb16 = rng.integers(0, 65536, (5, 7, 3)).astype(np.uint16)
    _png16_rgb(tmp_path / "c16.png", rgb16)
    assert np.abs(read_rgb8(tmp_path / "c16.png").astype(int) - rgb16 / 257.0).max() <= 1.0
    Image.fromarray(rng.random((5, 7)).astype(np.float32)).save(tmp_path / "f.tiff")
    with pytest.raises(InputError, match="f.tiff: image mode F .* has no known range"):
        read_rgb8(tmp_path / "f.tiff")


def test_missing_image_wrong_size_and_unknown_camera_are_one_line(tmp_path, capsys):
    images = _images()
    _convert_fails(tmp_path / "a", capsys, f"{images[2][4]}: image file is missing", image_files=images[:2] + images[3:])
    _convert_fails(tmp_path / "b", capsys, f"is {W + 2} x {H} but its camera says {W} x {H}", size=(W + 2, H))
    stray = images[:4] + [(99, images[4][1], images[4][2], 42, images[4][4])]
    _convert_fails(tmp_path / "c", capsys, f"image 99 ({images[4][4]}) refers to camera 42, which the model does not have",
                   images=stray)
    with pytest.raises(InputError, match="neither cameras.bin nor cameras.txt"):
        convert_colmap(tmp_path, tmp_path)


@pytest.mark.parametrize("cut", [1, 2])
def test_text_model_truncated_inside_a_points2d_line_is_one_line(tmp_path, capsys, cut):
    """images.txt cut short inside an image's POINTS2D line (a copy interrupted): its values are no
    longer (X, Y, POINT3D_ID) triples, and the model is refused naming the file, line and image instead
    of converting the images before the cut."""
    sparse = tmp_path / "sparse"
    write_text(sparse)
    write_images(tmp_path / "images")
    lines = (sparse / "images.txt").read_text().splitlines()
    points_line = next(i for i, line in enumerate(lines) if len(line.split()) == 6)  # two triples
    image_id = lines[points_line - 1].split()[0]
    kept = " ".join(lines[points_line].split()[:6 - cut])
    (sparse / "images.txt").write_text("\n".join(lines[:points_line] + [kept]))  # no newline: cut short
    out = tmp_path / "scene.h5"
    assert main(["convert-colmap", str(sparse), "--images", str(tmp_path / "images"), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "images.txt" in err[0] and f"line {points_line + 1}:" in err[0], err
    assert f"image {image_id}'s POINTS2D line has {6 - cut} values" in err[0], err
    assert not out.exists()
