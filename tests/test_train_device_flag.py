"""``pregel train --device cuda`` where it cannot run: without CUDA (no driver, no simulator), in the
distributed trainer (more than one rank, or ``--mode``) and with checkpoints. Each is one line and
exit status 2 (printed once, every rank exits), before any work: no file at ``--out``. (The device
trainer itself is tested in tests/cudasim/test_train_cuda.py.)"""
import os
import shutil
import subprocess
import sys

import pytest

from pregel.cli import main

BIN = os.path.dirname(sys.executable)
DISTRIBUTED = ("pregel train: error: --device cuda: the distributed trainer (more than one rank, --mode, "
               "--timeline, --schedule-out) is not supported on the GPU yet; use --device cpu")


def launch(ranks, scene, out):
    """``mpiexec -n ranks pregel train --device cuda`` on a machine without CUDA."""
    environment = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    environment.update(NUMBA_DISABLE_CUDA="1", OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1")
    return subprocess.run(
        [shutil.which("mpiexec", path=BIN), "-n", str(ranks), shutil.which("pregel", path=BIN), "train",
         "--scene", scene, "--steps", "2", "--out", out, "--device", "cuda"],
        capture_output=True, text=True, timeout=120, env=environment)


def test_no_cuda_is_one_line_and_exit_2(tiny_scene, tmp_path):
    result = launch(1, tiny_scene, tmp_path / "t.h5")
    assert result.returncode == 2
    line, = result.stderr.strip().splitlines()
    assert line.startswith("pregel train: error: --device cuda: rank 0 on ") and line.endswith(
        "sees no CUDA GPU (no driver or no device; NUMBA_ENABLE_CUDASIM=1 runs Numba's CPU simulator)")
    assert not (tmp_path / "t.h5").exists() and not (tmp_path / "t.png").exists()


def test_two_ranks_are_one_line_and_exit_2_on_every_rank(tiny_scene, tmp_path):
    result = launch(2, tiny_scene, tmp_path / "t.h5")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [DISTRIBUTED]
    assert not (tmp_path / "t.h5").exists()


@pytest.mark.parametrize("flags, message", [
    (["--mode", "barrier"], DISTRIBUTED),
    (["--checkpoint-dir", "CKPT"], "pregel train: error: --device cuda: checkpoints (--checkpoint-dir, --resume) "
                                   "are not supported on the GPU yet"),
])
def test_unsupported_options_are_one_line(tiny_scene, tmp_path, capsys, flags, message):
    flags = [str(tmp_path / "ckpt") if f == "CKPT" else f for f in flags]
    assert main(["train", "--scene", str(tiny_scene), "--steps", "2", "--out", str(tmp_path / "t.h5"),
                 "--device", "cuda", *flags]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [message]
    assert os.listdir(tmp_path) == []
