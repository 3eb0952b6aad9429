"""Issue 24, training: a camera that sees none of the Gaussians (it faces away), and starting from a PLY
of 1 or 5 Gaussians, train with ``--mode odin`` at P = 1 and 2 and ``--mode barrier`` at P = 2 to the
single-process trainer's Gaussians bit for bit (the oracle); a PLY of 0 Gaussians is refused up front,
naming it."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from test_reliability import ENV, MPIEXEC, one_line, pregel

from odin_sched.scenes.ply import write_ply
from odin_sched.scenes.scene_gen import generate_scene
from odin_sched.scenes.scene_io import read_scene, write_scene
from odin_sched.training.config import TrainConfig
from odin_sched.training.train import train

STEPS = 4
NAMES = ("means", "scales", "quats", "opacities", "colors")
SCRIPT = os.path.join(os.path.dirname(__file__), "mpi_scripts", "train_odin.py")
RUNS = [(1, "odin"), (2, "barrier"), (2, "odin")]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("away")
    scene = generate_scene(40, 6, 16, 16, seed=1)
    assert not scene.heldout[1]
    flip = np.diag([-1.0, 1.0, -1.0, 1.0]).astype(np.float32)  # half a turn about its y axis: faces away
    scene.viewmats[1] = flip @ scene.viewmats[1]
    write_scene(folder / "away.h5", scene)
    for n in (0, 1, 5):
        write_ply(folder / f"g{n}.ply", **{k: v[:n] for k, v in scene.gaussians().items()})
    return folder


@pytest.fixture(scope="module")
def trained(files):
    """The cases trained by the single-process trainer and by each (P, mode) of ``RUNS``."""
    cases = {name: dict(scene=str(files / "away.h5"), steps=STEPS, batch_size=1, densify=False, cells=None,
                        window=None, seed=0, init_ply=ply)
             for name, ply in (("away", None), ("ply1", str(files / "g1.ply")), ("ply5", str(files / "g5.ply")))}
    (files / "cases.json").write_text(json.dumps(cases))
    for name, case in cases.items():
        train(TrainConfig(case["scene"], STEPS, files / f"{name}_single.h5", eval_every=STEPS, progress=False,
                          init_ply=case["init_ply"]))
    for ranks, mode in RUNS:
        result = subprocess.run([MPIEXEC, "-n", str(ranks), sys.executable, "-m", "mpi4py", SCRIPT, str(files), mode],
                                capture_output=True, text=True, timeout=600, env=ENV)
        assert result.returncode == 0, result.stderr[-3000:]
    return cases


@pytest.mark.parametrize("ranks, mode", RUNS)
@pytest.mark.parametrize("case", ["away", "ply1", "ply5"])
def test_distributed_modes_train_a_camera_that_sees_nothing_and_tiny_init_plys(files, trained, case, ranks, mode):
    got, expected = read_scene(files / f"{case}_{mode}_{ranks}.h5"), read_scene(files / f"{case}_single.h5")
    for name in NAMES:
        np.testing.assert_array_equal(getattr(got, name), getattr(expected, name), err_msg=name)


@pytest.mark.parametrize("ranks", [1, 2])
def test_an_init_ply_without_gaussians_is_refused_naming_it(files, tmp_path, ranks):
    out = tmp_path / "t.h5"
    one_line(pregel(ranks, "train", "--scene", files / "away.h5", "--steps", 2, "--out", out,
                    "--init-ply", files / "g0.ply"), "g0.ply", "no Gaussians")
    assert not out.exists()
