"""Issue 24, convert-colmap: corrupt binary counts, names that are not UTF-8, NaN options and values
answered with one line naming the input file (no segfault, no traceback, no numpy warning); 16-bit and
grayscale images scaled properly; models that train would refuse are refused when converting.

The 16-bit PNGs are written by a small encoder here, from the PNG specification (signature, IHDR, one
zlib-compressed IDAT of filter-0 rows, IEND), independently of PIL."""

import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
from test_colmap import CAMERAS, W, H, _images, write_binary, write_images, write_text
from test_reliability import one_line, pregel

from odin_sched.scenes.colmap import convert_colmap
from odin_sched.scenes.scene_io import read_scene
from pregel.cli import main

PHOTOS = Path(__file__).parent / "data" / "cour_carree"  # five photos of 360 x 640 pixels


def _convert(tmp_path, capsys, *extra):
    """(exit status, stderr lines) of convert-colmap in this process; the output must not appear."""
    out = tmp_path / "scene.h5"
    status = main(["convert-colmap", str(tmp_path / "sparse"), "--images", str(tmp_path / "images"),
                   "--out", str(out), *map(str, extra)])
    assert not out.exists() or status == 0
    return status, capsys.readouterr().err.strip().splitlines()


def _fails(tmp_path, capsys, *fragments, extra=()):
    status, lines = _convert(tmp_path, capsys, *extra)
    assert status == 2 and len(lines) == 1, lines
    assert all(f in lines[0] for f in fragments), lines[0]


def _binary_model(tmp_path):
    write_binary(tmp_path / "sparse")
    write_images(tmp_path / "images")
    return tmp_path / "sparse"


def _patch(path, offset, data):
    raw = bytearray(path.read_bytes())
    raw[offset:offset + len(data)] = data
    path.write_bytes(bytes(raw))


TRACK_OFFSET = 8 + 8 + 24 + 3 + 8  # count, then the first point's id, xyz, rgb, error


def test_a_track_length_of_2_to_the_60_is_one_line_not_a_segfault(tmp_path):
    sparse = _binary_model(tmp_path)
    _patch(sparse / "points3D.bin", TRACK_OFFSET, struct.pack("<Q", 2 ** 60))
    result = pregel(1, "convert-colmap", sparse, "--images", tmp_path / "images", "--out", tmp_path / "s.h5")
    one_line(result, "points3D.bin", "corrupt")


def test_counts_larger_than_the_file_are_one_line(tmp_path, capsys):
    sparse = _binary_model(tmp_path)
    _patch(sparse / "points3D.bin", 0, struct.pack("<Q", 2 ** 62))
    _fails(tmp_path, capsys, "points3D.bin", f"{2 ** 62} points")
    sparse = _binary_model(tmp_path / "b")
    name = _images()[0][4].encode()
    _patch(sparse / "images.bin", 8 + 64 + len(name) + 1, struct.pack("<Q", 2 ** 60))
    _fails(tmp_path / "b", capsys, "images.bin", f"{2 ** 60} 2D points")
    sparse = _binary_model(tmp_path / "c")
    _patch(sparse / "images.bin", 0, struct.pack("<Q", 2 ** 62))
    _fails(tmp_path / "c", capsys, "images.bin", f"{2 ** 62} images")


@pytest.mark.parametrize("form", ["text", "binary"])
def test_an_image_name_that_is_not_utf8_is_one_line(tmp_path, capsys, form):
    (write_text if form == "text" else write_binary)(tmp_path / "sparse")
    write_images(tmp_path / "images")
    images = tmp_path / "sparse" / f"images.{'txt' if form == 'text' else 'bin'}"
    name = _images()[0][4].encode()
    raw = images.read_bytes()
    images.write_bytes(raw.replace(name, b"\xff\xfe" + name[2:], 1))
    _fails(tmp_path, capsys, str(images), "not UTF-8")


def test_downscale_nan_and_inf_are_one_line(tmp_path, capsys):
    _binary_model(tmp_path)
    for value in ("nan", "inf"):
        _fails(tmp_path, capsys, "--downscale", extra=("--downscale", value))


def test_a_downscale_that_leaves_less_than_a_tile_is_refused_before_any_image_is_read(tmp_path, capsys):
    # 96 x 72 images: --downscale 1000 made them 1 x 1 pixels without a word. Refused, naming the flag, the
    # size it would give and the largest that works (round(72 / 4.64) = 16, round(72 / 4.65) = 15); the
    # images are not there yet, so the refusal comes before any is read
    write_binary(tmp_path / "sparse")
    _fails(tmp_path, capsys, "--downscale 1000 would make the 96 x 72 images 1 x 1 pixels", "at least 16 on a side",
           "the largest --downscale that works is 4.64", extra=("--downscale", 1000))
    _fails(tmp_path, capsys, "--downscale 4.65", "21 x 15 pixels", "is 4.64", extra=("--downscale", 4.65))
    write_images(tmp_path / "images")
    status, _ = _convert(tmp_path, capsys, "--downscale", 4.64)
    scene = read_scene(tmp_path / "scene.h5")
    assert status == 0 and (scene.width, scene.height) == (21, 16)


def test_sfm_refuses_such_a_downscale_before_the_structure_from_motion(tmp_path, capsys, monkeypatch):
    import odin_sched.scenes.sfm as sfm

    def reconstruct(*args, **kwargs):
        raise AssertionError("structure from motion ran")

    monkeypatch.setattr(sfm, "reconstruct", reconstruct)
    out = tmp_path / "s.h5"
    assert main(["sfm", str(PHOTOS), "--out", str(out), "--downscale", "100"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and f"--downscale 100 would make the 360 x 640 photos of {PHOTOS} 4 x 6 pixels" in lines[0]
    assert "the largest --downscale that works is 23.22" in lines[0] and not out.exists()  # 360 / 15.5 = 23.226


def test_nan_point_and_zero_or_nan_qvec_name_the_input_file_and_line(tmp_path, capsys):
    write_text(tmp_path / "sparse")
    write_images(tmp_path / "images")
    points = tmp_path / "sparse" / "points3D.txt"
    lines = points.read_text().splitlines()
    words = lines[2].split()
    words[2] = "nan"
    points.write_text("\n".join(lines[:2] + [" ".join(words)] + lines[3:]) + "\n")
    _fails(tmp_path, capsys, str(points), "line 3")
    write_text(tmp_path / "sparse")
    images = tmp_path / "sparse" / "images.txt"
    for qvec in ("0.0 0.0 0.0 0.0", "nan 0.0 0.0 1.0"):
        lines = images.read_text().splitlines()
        words = lines[3].split()  # the second image: header, image 10, its points, image 11
        lines[3] = " ".join([words[0], qvec, *words[5:]])
        images.write_text("\n".join(lines) + "\n")
        _fails(tmp_path, capsys, str(images), "line 4", "qvec")
        write_text(tmp_path / "sparse")


@pytest.mark.parametrize("form", ["text", "binary"])
def test_a_model_without_points_is_one_line_without_warnings(tmp_path, form):
    (write_text if form == "text" else write_binary)(tmp_path / "sparse")
    write_images(tmp_path / "images")
    points = tmp_path / "sparse" / f"points3D.{'txt' if form == 'text' else 'bin'}"
    points.write_bytes(b"# no points\n" if form == "text" else struct.pack("<Q", 0))
    result = pregel(1, "convert-colmap", tmp_path / "sparse", "--images", tmp_path / "images", "--out",
                    tmp_path / "s.h5", "--heldout-every", 2)  # a process of its own: numpy's warnings on stderr
    one_line(result, "no 3D points")


def _png(path, pixels: np.ndarray) -> None:
    """A 16-bit PNG of ``pixels`` uint16 [H, W] (grayscale) or [H, W, 3] (RGB)."""
    height, width = pixels.shape[:2]
    colour = 0 if pixels.ndim == 2 else 2
    rows = pixels.astype(">u2").reshape(height, -1).view(np.uint8).reshape(height, -1)
    data = zlib.compress(b"".join(b"\x00" + row.tobytes() for row in rows))

    def chunk(kind, body):
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 16, colour, 0, 0, 0))
                     + chunk(b"IDAT", data) + chunk(b"IEND", b""))


@pytest.mark.parametrize("channels", [1, 3])
def test_16_bit_images_are_scaled_to_their_range_and_gray_becomes_rgb(tmp_path, channels):
    write_text(tmp_path / "sparse")
    rng = np.random.default_rng(3)
    expected = {}
    for *_, name in _images():
        pixels = rng.integers(0, 65536, (H, W) if channels == 1 else (H, W, 3)).astype(np.uint16)
        (tmp_path / "images").mkdir(exist_ok=True)
        _png(tmp_path / "images" / name, pixels)
        # 16 bits to 8: the nearest of 256 levels (PIL keeps the high byte of RGB, within one level)
        rgb = np.repeat(pixels[:, :, None], 3, axis=2) if channels == 1 else pixels
        expected[name] = rgb / 65535 * 255
    scene = convert_colmap(tmp_path / "sparse", tmp_path / "images")
    for image, name in zip(scene.images, sorted(expected)):
        assert image.dtype == np.uint8 and image.shape == (H, W, 3)
        assert np.abs(image - expected[name]).max() <= 1.0
        assert image.std() > 50  # not the 0/255 of a clipping conversion: spread over the range
        assert len(np.unique(image)) > 200


def test_models_that_train_would_refuse_are_refused_when_converting(tmp_path, capsys):
    pinholes = {cam: CAMERAS[cam] for cam in (1, 2)}  # no distortion warning
    write_text(tmp_path / "sparse", pinholes)
    write_images(tmp_path / "images", _images(pinholes))
    for every in (0, 1):
        _fails(tmp_path, capsys, "--heldout-every", extra=("--heldout-every", every))
    assert _convert(tmp_path, capsys, "--heldout-every", 2)[0] == 0
    one = {1: CAMERAS[1]}
    write_text(tmp_path / "one" / "sparse", one)
    write_images(tmp_path / "one" / "images", _images(one))
    _fails(tmp_path / "one", capsys, "1 registered image", "training")
