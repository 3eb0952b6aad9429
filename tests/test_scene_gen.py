"""Generated scenes: valid files, deterministic, images match the renderer, city cameras see little."""
import numpy as np
import pytest
import torch

from kernels.splat.reference import _render
from odin_sched.scenes.scene_gen import generate_scene
from odin_sched.scenes.scene_io import read_scene, write_scene
from pregel.errors import InputError


def test_objects_scene_is_valid_and_deterministic(tmp_path):
    a = generate_scene(300, 9, 20, 16, seed=3, layout="objects")
    b = generate_scene(300, 9, 20, 16, seed=3, layout="objects")
    c = generate_scene(300, 9, 20, 16, seed=4, layout="objects")
    for name in ("means", "colors", "images", "init_means", "init_colors", "viewmats"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name
    assert not np.array_equal(a.means, c.means)
    assert a.num_gaussians == 300 and a.num_cameras == 9 and a.images.shape == (9, 16, 20, 3)
    assert a.heldout.tolist() == [True] + [False] * 7 + [True]
    assert a.init_means.shape == (150, 3)
    # the initial cloud is a noisy subsample: every point lies near some ground-truth mean
    d = np.linalg.norm(a.init_means[:, None] - a.means[None], axis=2).min(axis=1)
    assert 0 < np.median(d) < 0.5
    assert a.images.mean() > 10  # the objects are in view
    path = tmp_path / "s.h5"
    write_scene(path, a)
    assert read_scene(path).attrs["layout"] == "objects"


def test_images_are_renders_of_the_ground_truth():
    s = generate_scene(200, 2, 16, 16, seed=0, layout="objects")
    g = {k: torch.from_numpy(v) for k, v in s.gaussians().items()}
    ref, _ = _render(**g, viewmat=torch.from_numpy(s.viewmats[1]), K=torch.from_numpy(s.Ks[1]), width=16, height=16)
    expected = np.round(np.clip(ref.numpy(), 0, 1) * 255)
    assert np.abs(s.images[1].astype(float) - expected).max() <= 1


@pytest.mark.parametrize("layout, gaussians, views", [("city", 12000, 8), ("city", 40000, 1), ("objects", 3000, 1)])
def test_images_equal_renders_of_every_gaussian(layout, gaussians, views):
    # the generator renders only the k-d cells that may touch an image; the oracle renders them all
    from kernels.splat import render
    s = generate_scene(gaussians, 16, 24, 20, seed=2, layout=layout, views_per_spot=views)
    g = {k: torch.from_numpy(v) for k, v in s.gaussians().items()}
    for i in range(s.num_cameras):
        image, _ = render(**g, viewmat=torch.from_numpy(s.viewmats[i]), K=torch.from_numpy(s.Ks[i]), width=24,
                          height=20)
        assert np.array_equal(np.round(np.clip(image.numpy(), 0, 1) * 255).astype(np.uint8), s.images[i]), i
    assert s.images.mean() > 10


def test_city_cameras_each_see_a_small_part():
    s = generate_scene(12000, 8, 24, 24, seed=0, layout="city")
    g = {k: torch.from_numpy(v) for k, v in s.gaussians().items()}
    from kernels.splat import render
    fractions = []
    for i in range(s.num_cameras):
        _, visible = render(**g, viewmat=torch.from_numpy(s.viewmats[i]), K=torch.from_numpy(s.Ks[i]),
                            width=24, height=24)
        fractions.append(visible.float().mean().item())
    assert max(fractions) < 0.3 and min(fractions) > 0.0


def _visible_sets(scene, size):
    """The Gaussians each camera's render reports visible (the renderer is the oracle, not the generator)."""
    from kernels.splat import render
    g = {k: torch.from_numpy(v) for k, v in scene.gaussians().items()}
    return [set(np.flatnonzero(render(**g, viewmat=torch.from_numpy(scene.viewmats[i]),
                                      K=torch.from_numpy(scene.Ks[i]), width=size, height=size)[1].numpy()))
            for i in range(scene.num_cameras)]


def test_city_spots_let_held_out_views_see_what_training_views_see():
    # 16 cameras, 8 per spot: cameras 0 and 8 are held out, each with its spot's 7 training cameras
    spots = generate_scene(12000, 16, 24, 24, seed=0, layout="city", views_per_spot=8)
    plain = generate_scene(12000, 16, 24, 24, seed=0, layout="city")
    assert np.array_equal(spots.means, plain.means)  # the cameras draw nothing from the generator
    assert spots.heldout.tolist() == [True] + [False] * 7 + [True] + [False] * 7
    for scene, least in ((spots, 0.97), (plain, 0.0)):  # the fraction of a held-out view's Gaussians ...
        seen = _visible_sets(scene, 24)
        fractions = []
        for held in np.flatnonzero(scene.heldout):  # ... that its spot's training views also see
            training = set().union(*(seen[i] for i in range(held + 1, held + 8)))
            fractions.append(len(seen[held] & training) / len(seen[held]))
        assert min(fractions) >= least, fractions
    assert min(fractions) < 0.97  # without spots, cameras 1-7 and 9-15 are elsewhere on the flight
    # each spot's views stand side by side, SPOT_STEP apart across the street, the first in the middle,
    # looking the same way
    centres = np.stack([-v[:3, :3].T @ v[:3, 3] for v in spots.viewmats.astype(np.float64)])
    across = (centres[:8] - centres[0]) / 0.4
    assert np.allclose(across[:, [0, 2]], 0, atol=1e-3)
    assert np.allclose(across[:, 1], [0, -1, 1, -2, 2, -3, 3, -4], atol=1e-3)
    assert np.allclose(spots.viewmats[:8, :3, :3], spots.viewmats[0, :3, :3], atol=1e-6)
    assert not np.allclose(centres[0], centres[8], atol=1.0)  # the two spots are apart


@pytest.mark.parametrize("kwargs, message", [
    (dict(gaussians=5), "`gaussians`"), (dict(cameras=1), "`cameras`"),
    (dict(layout="forest"), "`layout`"), (dict(width=0), "`width`"),
    (dict(views_per_spot=0, layout="city"), "`views_per_spot`"), (dict(views_per_spot=2), "`views_per_spot`"),
])
def test_bad_arguments(kwargs, message):
    args = dict(gaussians=100, cameras=4, width=8, height=8) | kwargs
    with pytest.raises(InputError, match=message):
        generate_scene(**args)


def test_generate_scene_prints_progress_lines_unless_quiet(tmp_path, monkeypatch, capsys):
    # at 2,000,000 Gaussians the command ran 24 s without a word: off a terminal it prints a line every
    # Progress.LINE_SECONDS (0 here: a line at every update), once the Gaussians are placed and then by image
    from pregel.cli import main
    from pregel.progress import Progress

    monkeypatch.setattr(Progress, "LINE_SECONDS", 0.0)
    flags = ["generate-scene", "--gaussians", "40", "--cameras", "3", "--width", "16", "--height", "12"]
    assert main([*flags, "--out", str(tmp_path / "a.h5")]) == 0
    out, err = capsys.readouterr()
    lines = err.splitlines()
    assert [line.split(":")[0] for line in lines] == ["image 0/3", "image 1/3", "image 2/3", "image 3/3"], lines
    assert lines[0].startswith("image 0/3: 40 Gaussians placed, ") and lines[-1].endswith(" s"), lines
    assert out.startswith(f"wrote {tmp_path / 'a.h5'}: objects scene, 40 Gaussians, 3 cameras at 16 x 12")
    assert main([*flags, "--quiet", "--out", str(tmp_path / "b.h5")]) == 0
    out, err = capsys.readouterr()
    assert err == "" and out.startswith("wrote ")
