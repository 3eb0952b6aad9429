"""Issue 24, inputs destroyed: every command refuses, before any work, an output that is one of its
inputs or that would replace a file in an input folder, through the one check of pregel.outputs; and
plot writes the format its --out names."""

import json
import shutil

import h5py
import numpy as np
import pytest
from PIL import Image
from test_colmap import _images, write_binary, write_images, write_text
from test_reliability import one_line, pregel

from odin_sched.scenes.scene_gen import generate_scene
from odin_sched.scenes.scene_io import write_scene


@pytest.fixture(scope="module")
def scene(tmp_path_factory):
    path = tmp_path_factory.mktemp("out") / "s.h5"
    write_scene(path, generate_scene(40, 4, 16, 16, seed=1))
    return path


def _snapshot(folder):
    return {p: p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_every_command_states_its_files():
    from pregel.cli import build_parser
    from pregel.cli.files import FILES

    commands = build_parser()._subparsers._group_actions[0].choices
    assert set(commands) == set(FILES)


@pytest.mark.parametrize("form", ["text", "binary"])
def test_convert_colmap_refuses_to_replace_the_model_or_an_image(tmp_path, form):
    (write_text if form == "text" else write_binary)(tmp_path / "sparse")
    write_images(tmp_path / "images")
    before = _snapshot(tmp_path)
    suffix = "txt" if form == "text" else "bin"
    image = tmp_path / "images" / _images()[0][4]
    for out, says in ((tmp_path / "sparse" / f"cameras.{suffix}", "is also the input"),
                      (tmp_path / "sparse" / f"points3D.{suffix}", "is also the input"),
                      (image, "inside the input folder")):
        one_line(pregel(1, "convert-colmap", tmp_path / "sparse", "--images", tmp_path / "images",
                        "--out", out), str(out), says)
    assert _snapshot(tmp_path) == before
    # a new file beside the images is no input: converting there works
    assert pregel(1, "convert-colmap", tmp_path / "sparse", "--images", tmp_path / "images",
                  "--out", tmp_path / "images" / "scene.h5").returncode == 0


def test_plot_refuses_to_overwrite_its_trace_or_result(tmp_path):
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps({"traceEvents": [{"ph": "X", "tid": 0, "ts": 0, "dur": 5, "name": "compute"}]}))
    result = tmp_path / "r.h5"
    with h5py.File(result, "w") as f:
        f["gpus"] = np.array([1, 2])
        f["steps_per_second/odin"] = np.array([1.0, 2.0])
    before = _snapshot(tmp_path)
    one_line(pregel(1, "plot", trace, "--out", trace), "is also the input")
    one_line(pregel(1, "plot", result, "--out", result), "is also the input")
    assert _snapshot(tmp_path) == before


def test_simulate_refuses_to_overwrite_its_scene(scene, tmp_path):
    copy = tmp_path / "x.h5"
    shutil.copy(scene, copy)
    before = copy.read_bytes()
    one_line(pregel(1, "simulate", "--scene", copy, "--gpus", "1", "--steps", "1", "--out", copy),
             "is also the input")
    assert copy.read_bytes() == before


@pytest.mark.parametrize("ranks", [1, 2])
def test_train_outputs_naming_the_same_file_say_which_options(scene, tmp_path, ranks):
    out = tmp_path / "t.h5"
    one_line(pregel(ranks, "train", "--scene", scene, "--steps", "1", "--out", out, "--ply", out),
             "--ply names the same file as --out")
    assert not out.exists()


def test_render_refuses_an_existing_file_as_its_folder_and_an_unwritable_one(scene, tmp_path):
    existing = tmp_path / "f.png"
    existing.write_bytes(b"keep")
    one_line(pregel(1, "render", "--scene", scene, "--out", existing), "not a folder")
    assert existing.read_bytes() == b"keep"
    one_line(pregel(1, "render", "--scene", scene, "--out", "/proc/pregel-test-renders"), "cannot")


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    path = tmp_path_factory.mktemp("plot") / "t.json"
    path.write_text(json.dumps({"traceEvents": [{"ph": "X", "tid": r, "ts": 10 * r, "dur": 5, "name": "compute"}
                                                for r in range(2)]}))
    return path


@pytest.mark.parametrize("name, magic", [("p.png", b"\x89PNG"), ("p.pdf", b"%PDF"), ("p.jpg", b"\xff\xd8\xff"),
                                         ("p.JPEG", b"\xff\xd8\xff"), ("p.svg", b"<?xml")])
def test_plot_writes_the_format_its_extension_names(trace, tmp_path, name, magic):
    result = pregel(1, "plot", trace, "--out", tmp_path / name)
    assert result.returncode == 0, result.stderr
    data = (tmp_path / name).read_bytes()
    assert data.startswith(magic), data[:8]
    if name.endswith((".jpg", ".JPEG")):
        assert Image.open(tmp_path / name).format == "JPEG"


@pytest.mark.parametrize("name", ["p.txt", "p"])
def test_plot_refuses_an_extension_it_cannot_write(trace, tmp_path, name):
    one_line(pregel(1, "plot", trace, "--out", tmp_path / name), "format")
    assert not (tmp_path / name).exists()


def test_render_refuses_to_replace_its_ply_or_scene_with_a_picture(scene, tmp_path):
    """The files render writes into --out (NNNN.png, orbit.gif) are checked against its inputs: a PLY or
    scene file that happens to carry such a name in that folder is refused, not overwritten."""
    from odin_sched.scenes.ply import write_ply

    g = 5
    ply = tmp_path / "0000.png"
    write_ply(ply, np.zeros((g, 3), np.float32), np.zeros((g, 3), np.float32), np.tile([1, 0, 0, 0], (g, 1)),
              np.zeros(g, np.float32), np.full((g, 3), 0.5, np.float32))
    gif = tmp_path / "orbit.gif"
    shutil.copy(scene, gif)
    before = _snapshot(tmp_path)
    one_line(pregel(1, "render", "--scene", scene, "--ply", ply, "--out", tmp_path, "--cameras", "0"),
             str(ply), "is also the input")
    one_line(pregel(1, "render", "--scene", gif, "--out", tmp_path, "--cameras", "1", "--orbit", "2"),
             str(gif), "is also the input")
    assert _snapshot(tmp_path) == before  # nothing replaced, nothing written (0001.png neither)
