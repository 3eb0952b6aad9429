"""``pregel train --device cuda`` where it cannot run: without CUDA (no driver, no simulator), on one
process and on several ranks, and with checkpoints. Each is one line and exit status 2 (printed once,
every rank exits), before any work: no file at ``--out``. (The device trainers themselves are tested
in tests/cudasim/test_train_cuda.py and tests/cudasim/test_train_odin_cuda.py.)"""
import os
import shutil
import subprocess
import sys

import pytest

from pregel.cli import main

BIN = os.path.dirname(sys.executable)
CHECKPOINTS = ("pregel train: error: --device cuda: checkpoints (--checkpoint-dir, --resume) are not supported "
               "on the GPU yet")


def launch(ranks, scene, out, extra=()):
    """``mpiexec -n ranks pregel train --device cuda EXTRA`` on a machine without CUDA."""
    environment = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    environment.update(NUMBA_DISABLE_CUDA="1", OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1")
    return subprocess.run(
        [shutil.which("mpiexec", path=BIN), "-n", str(ranks), shutil.which("pregel", path=BIN), "train",
         "--scene", scene, "--steps", "2", "--out", out, "--device", "cuda", *extra],
        capture_output=True, text=True, timeout=120, env=environment)


@pytest.mark.parametrize("ranks, extra", [(1, []), (2, []), (2, ["--mode", "barrier"])])
def test_no_cuda_is_one_line_and_exit_2(tiny_scene, tmp_path, ranks, extra):
    result = launch(ranks, tiny_scene, tmp_path / "t.h5", extra)
    assert result.returncode == 2
    line, = result.stderr.strip().splitlines()
    assert line.startswith("pregel train: error: --device cuda: rank 0 on ") and line.endswith(
        "sees no CUDA GPU (no driver or no device; NUMBA_ENABLE_CUDASIM=1 runs Numba's CPU simulator)")
    assert not (tmp_path / "t.h5").exists() and not (tmp_path / "t.png").exists()


def test_checkpoints_on_two_ranks_are_one_line_and_exit_2_on_every_rank(tiny_scene, tmp_path):
    result = launch(2, tiny_scene, tmp_path / "t.h5", ["--checkpoint-dir", str(tmp_path / "ckpt")])
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [CHECKPOINTS]
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("flag", ["--checkpoint-dir", "--resume"])
def test_checkpoints_are_one_line(tiny_scene, tmp_path, capsys, flag):
    assert main(["train", "--scene", str(tiny_scene), "--steps", "2", "--out", str(tmp_path / "t.h5"),
                 "--device", "cuda", flag, str(tmp_path / "ckpt")]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [CHECKPOINTS]
    assert os.listdir(tmp_path) == []
