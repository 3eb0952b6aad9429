"""Scene files: round trip, atomic write, and a one-line InputError for each kind of bad input."""
import h5py
import numpy as np
import pytest

from odin_sched.scenes.scene_io import Scene, read_scene, write_scene
from pregel.errors import InputError


def small_scene(g=6, c=3, h=5, w=7):
    rng = np.random.default_rng(0)
    return Scene(
        means=rng.standard_normal((g, 3)).astype(np.float32),
        scales=rng.standard_normal((g, 3)).astype(np.float32),
        quats=rng.standard_normal((g, 4)).astype(np.float32),
        opacities=rng.standard_normal(g).astype(np.float32),
        colors=rng.random((g, 3)).astype(np.float32),
        viewmats=np.tile(np.eye(4, dtype=np.float32), (c, 1, 1)),
        Ks=np.tile(np.array([[10, 0, 3], [0, 10, 2], [0, 0, 1]], np.float32), (c, 1, 1)),
        images=rng.integers(0, 256, (c, h, w, 3), dtype=np.uint8),
        width=w, height=h,
        init_means=rng.standard_normal((4, 3)).astype(np.float32),
        init_colors=rng.random((4, 3)).astype(np.float32),
        heldout=np.array([False, False, True]),
        metrics={"psnr": np.array([10.0, 20.0])},
        attrs={"steps": 5, "note": "x"},
    )


def test_round_trip(tmp_path):
    scene = small_scene()
    path = tmp_path / "s.h5"
    write_scene(path, scene)
    back = read_scene(path)
    for name in ("means", "scales", "quats", "opacities", "colors", "viewmats", "Ks", "images",
                 "init_means", "init_colors", "heldout"):
        a, b = getattr(scene, name), getattr(back, name)
        assert a.dtype == b.dtype and np.array_equal(a, b), name
    assert (back.width, back.height) == (7, 5)
    assert np.array_equal(back.metrics["psnr"], [10.0, 20.0])
    assert back.attrs == {"steps": 5, "note": "x"}
    with h5py.File(path) as f:  # the v1 layout as the README specifies it
        assert f.attrs["format"] == "pregel-scene" and f.attrs["version"] == 1
        assert f["gaussians/opacities"].shape == (6,) and f["images"].dtype == np.uint8
    assert [p.name for p in tmp_path.iterdir()] == ["s.h5"]  # no temporary file left


def test_failed_write_leaves_old_file(tmp_path):
    path = tmp_path / "s.h5"
    write_scene(path, small_scene())
    bad = small_scene()
    bad.means = bad.means.astype(np.float64)
    with pytest.raises(InputError):
        write_scene(path, bad)
    read_scene(path)
    assert [p.name for p in tmp_path.iterdir()] == ["s.h5"]


def test_sh_coefficients_round_trip_and_scenes_without_them_stay_v1(tmp_path):
    scene = small_scene()
    scene.sh = np.random.default_rng(1).standard_normal((6, 16, 3)).astype(np.float32)
    write_scene(tmp_path / "sh.h5", scene)
    back = read_scene(tmp_path / "sh.h5")
    assert back.sh.dtype == np.float32 and np.array_equal(back.sh, scene.sh)
    assert set(back.gaussians()) == {"means", "scales", "quats", "opacities", "colors", "sh"}
    write_scene(tmp_path / "v1.h5", small_scene())
    with h5py.File(tmp_path / "v1.h5") as f:
        assert "sh" not in f["gaussians"] and f.attrs["version"] == 1
    assert read_scene(tmp_path / "v1.h5").sh is None


def edit(path, fn):
    with h5py.File(path, "r+") as f:
        fn(f)


def replace(name, data):
    def fn(f):
        del f[name]
        f[name] = data
    return fn


def add(name, data):
    def fn(f):
        f[name] = data
    return fn


def set_attr(key, value):
    def fn(f):
        f.attrs[key] = value
    return fn


CASES = [
    (lambda f: f.__delitem__("gaussians/colors"), "/gaussians/colors: dataset is missing"),
    (set_attr("format", "pregel-graph"), "attribute format"),
    (set_attr("version", 2), "only version 1"),
    (set_attr("width", 8), "attributes say width x height = 8 x 5"),
    (replace("gaussians/means", np.zeros((6, 3))), "/gaussians/means: dtype is float64"),
    (replace("gaussians/quats", np.zeros((6, 3), np.float32)), "/gaussians/quats: shape is [6, 3]"),
    (replace("gaussians/opacities", np.zeros(5, np.float32)), "/gaussians/opacities: has 5 rows"),
    (replace("cameras/Ks", np.tile(np.eye(3, dtype=np.float32), (2, 1, 1))), "/cameras/Ks: has 2 rows"),
    (replace("images", np.zeros((2, 5, 7, 3), np.uint8)), "/images: has 2 rows"),
    (replace("images", np.zeros((3, 5, 7, 3), np.float32)), "/images: dtype is float32"),
    (replace("gaussians/scales", np.full((6, 3), np.nan, np.float32)), "NaN or infinite"),
    (replace("cameras/viewmats", np.full((3, 4, 4), np.inf, np.float32)), "/cameras/viewmats: contains"),
    (replace("gaussians/quats", np.zeros((6, 4), np.float32)), "cannot be normalised"),
    (lambda f: f.__delitem__("init/colors"), "/init/colors: dataset is missing"),
    (replace("cameras/heldout", np.zeros(2, bool)), "/cameras/heldout: has 2 rows"),
    (add("gaussians/sh", np.zeros((6, 5, 3), np.float32)), "/gaussians/sh: has 5 coefficients per channel"),
    (add("gaussians/sh", np.zeros((5, 4, 3), np.float32)), "/gaussians/sh: has 5 rows"),
    (add("gaussians/sh", np.zeros((6, 4, 2), np.float32)), "/gaussians/sh: shape is [6, 4, 2]"),
]


@pytest.mark.parametrize("mutate, message", CASES)
def test_bad_files_give_one_line_errors(tmp_path, mutate, message):
    path = tmp_path / "s.h5"
    write_scene(path, small_scene())
    edit(path, mutate)
    with pytest.raises(InputError) as info:
        read_scene(path)
    text = str(info.value)
    assert message in text and str(path) in text and "\n" not in text


def test_missing_and_non_hdf5_file(tmp_path):
    with pytest.raises(InputError, match="file not found"):
        read_scene(tmp_path / "nope.h5")
    junk = tmp_path / "junk.h5"
    junk.write_bytes(b"not hdf5")
    with pytest.raises(InputError, match="cannot be opened as HDF5"):
        read_scene(junk)


def test_unwritable_output_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        write_scene(tmp_path / "no" / "s.h5", small_scene())
    with pytest.raises(InputError, match="is a directory"):
        write_scene(tmp_path, small_scene())


#: the cases whose problem is in the values of /gaussians (what a read without them does not see)
VALUE_CASES = ("NaN or infinite", "cannot be normalised")


@pytest.mark.parametrize("mutate, message", CASES)
def test_a_read_without_the_gaussians_and_init_still_checks_their_layout(tmp_path, mutate, message):
    path = tmp_path / "s.h5"
    write_scene(path, small_scene())
    edit(path, mutate)
    if message in VALUE_CASES:
        scene = read_scene(path, gaussians=False, init=False)  # values not read, so not checked
        assert scene.means is None
        return
    with pytest.raises(InputError) as info:
        read_scene(path, gaussians=False, init=False)
    text = str(info.value)
    assert message in text and str(path) in text and "\n" not in text


def test_a_read_without_the_gaussians_and_init_leaves_them_none_and_reads_the_rest(tmp_path):
    path = tmp_path / "s.h5"
    original = small_scene()
    original.sh = np.zeros((6, 4, 3), np.float32)
    original.ids = np.arange(6, dtype=np.int64) * 3
    write_scene(path, original)
    full, part = read_scene(path), read_scene(path, gaussians=False, init=False)
    for name in ("means", "scales", "quats", "opacities", "colors", "sh", "ids", "init_means", "init_colors"):
        assert getattr(full, name) is not None and getattr(part, name) is None
    for name in ("viewmats", "Ks", "images", "heldout"):
        np.testing.assert_array_equal(getattr(part, name), getattr(original, name))
    assert (part.width, part.height, part.attrs) == (7, 5, original.attrs)
    np.testing.assert_array_equal(read_scene(path, gaussians=False).init_means, original.init_means)


def test_pregel_train_from_a_ply_refuses_a_scene_whose_gaussians_have_a_bad_layout(tmp_path, capsys):
    from odin_sched.scenes.ply import write_ply
    from pregel.cli import main

    scene, ply, out = tmp_path / "s.h5", tmp_path / "init.ply", tmp_path / "out.h5"
    model = small_scene()
    write_scene(scene, model)
    write_ply(ply, model.means, model.scales, model.quats, model.opacities, colors=model.colors)
    edit(scene, replace("gaussians/means", np.zeros((6, 3))))
    capsys.readouterr()
    assert main(["train", "--scene", str(scene), "--init-ply", str(ply), "--steps", "1", "--out", str(out)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "/gaussians/means: dtype is float64" in lines[0] and not out.exists()
