"""Checkpoint and restart of ``pregel train``: a training process (one process, or one rank of a
2-rank job) killed for real with SIGKILL ends the job promptly, with no result file and the last
complete checkpoint intact; resuming it (at the same or another number of ranks) ends with the
parameters and metrics of an uninterrupted single-process run, bit for bit, with densification on
and off. Mismatched and corrupted checkpoints are refused with one line and exit status 2."""

import os
import shutil
import subprocess
import sys

import h5py
import numpy as np
import pytest
import torch

from job_checks import assert_nothing_written, intact, kill_and_end, one_line_error, stop, wait_for
from odin_sched.scenes.ply import write_ply
from odin_sched.scenes.scene_gen import generate_scene
from odin_sched.scenes.scene_io import write_scene
from odin_sched.scenes.point_cloud import init_gaussians

BIN = os.path.dirname(sys.executable)
MPIEXEC = shutil.which("mpiexec", path=BIN) or "mpiexec"
PREGEL = shutil.which("pregel", path=BIN) or "pregel"
ENV = dict(os.environ, OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1")
STEPS, EVERY, HANG_AFTER = 12, 4, 6
# densification every 3 steps from step 3, evaluation every 5, windows of at most 4 batches
OPTIONS = ["--steps", STEPS, "--batch-size", 2, "--eval-every", 5, "--window", 4, "--seed", 3]
DENSIFY = ["--densify", "--densify-from", 3, "--densify-interval", 3, "--densify-until", 12]

# `python hang.py train ...` is `pregel train ...` whose last rank, once it has passed step HANG_AFTER
# (checkpoints are written by then), writes its pid to $TEST_PIDFILE and sleeps: the test kills it.
HANG = f'''
import os, sys, time
from odin_sched.training.checkpoint import TrainCheckpointer
from pregel.cli import main

save = TrainCheckpointer.save

def save_then_hang(self, start, state, **rows):
    save(self, start, state, **rows)
    if state.step >= {HANG_AFTER} and self.comm.rank == self.comm.size - 1:
        pidfile = os.environ["TEST_PIDFILE"]
        with open(pidfile + ".tmp", "w") as f:
            f.write(str(os.getpid()))
        os.replace(pidfile + ".tmp", pidfile)
        time.sleep(600)

TrainCheckpointer.save = save_then_hang
sys.exit(main())
'''


def _pregel(ranks, *args, command=(PREGEL,)):
    command = [*command, *map(str, args)]
    if ranks > 1:
        command = [MPIEXEC, "-n", str(ranks)] + command
    return subprocess.run(command, capture_output=True, text=True, timeout=180, env=ENV)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("train_ckpt")
    scene = generate_scene(400, 14, 32, 24, layout="city")
    write_scene(folder / "s.h5", scene)
    write_scene(folder / "other.h5", generate_scene(400, 14, 32, 24, seed=1, layout="city"))
    initial = init_gaussians(scene.init_means, scene.init_colors)
    sh = torch.cat([initial.pop("sh0"), initial.pop("shN")], dim=1)
    write_ply(folder / "init.ply", **{name: value.numpy() for name, value in initial.items()}, sh=sh.numpy())
    (folder / "hang.py").write_text(HANG)
    return folder


@pytest.fixture(scope="module")
def oracle(files):
    """Trained scene files of uninterrupted single-process runs, without and with densification."""
    outs = {}
    for densify in (False, True):
        outs[densify] = files / f"oracle-{densify}.h5"
        result = _pregel(1, "train", "--scene", files / "s.h5", "--out", outs[densify], *OPTIONS,
                         *(DENSIFY if densify else []))
        assert result.returncode == 0, result.stderr
    return outs


def _trained(path) -> dict:
    with h5py.File(path) as f:
        return {name: f[name][:] for name in ("gaussians/means", "gaussians/scales", "gaussians/quats",
                                              "gaussians/opacities", "gaussians/colors", "gaussians/sh",
                                              "metrics/loss",
                                              "metrics/psnr", "metrics/psnr_steps")}


def _assert_bitwise(path, oracle_path):
    got, want = _trained(path), _trained(oracle_path)
    for name in want:
        assert got[name].shape == want[name].shape, name
        assert np.array_equal(got[name], want[name]), f"{name} differs from the uninterrupted run"


def _kill_during_training(files, tmp_path, ranks, extra):
    """Start a checkpointed training run whose last rank hangs after step 6, SIGKILL that process
    once it hangs, and check that the job ends promptly and writes nothing at --out."""
    pidfile, ck, out = tmp_path / "pid", tmp_path / "ck", tmp_path / "out.h5"
    command = [sys.executable, str(files / "hang.py"), "train", "--scene", str(files / "s.h5"), "--out", str(out),
               "--checkpoint-dir", str(ck), "--checkpoint-every", str(EVERY), *map(str, OPTIONS + extra)]
    if ranks > 1:
        command = [MPIEXEC, "-n", str(ranks)] + command
    job = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           env=dict(ENV, TEST_PIDFILE=str(pidfile)))
    try:
        wait_for(pidfile, job, 120, "training never reached step 6")
        assert any((step / "manifest.json").exists() for step in ck.iterdir()), "a checkpoint has appeared"
        kill_and_end(job, int(pidfile.read_text()))
    finally:
        stop(job)
    assert_nothing_written(job, out, tmp_path)
    steps = sorted(p.name for p in ck.iterdir())
    assert steps and all(intact(ck / s, parts=1 + ranks) for s in steps)  # global values and a part per rank
    return ck, steps


@pytest.mark.parametrize("densify,resume_ranks,mode", [(False, 1, []), (True, 1, []), (True, 2, ["--mode", "odin"])])
def test_killed_single_process_then_resume_matches_uninterrupted_run(files, oracle, tmp_path, densify, resume_ranks,
                                                                     mode):
    extra = DENSIFY if densify else []
    ck, steps = _kill_during_training(files, tmp_path, 1, extra)
    assert steps == ["step-000000004"]  # step 8 is never reached; step 6 is no multiple of 4
    resumed = _pregel(resume_ranks, "train", "--scene", files / "s.h5", "--out", tmp_path / "resumed.h5", "--resume",
                      ck, *mode, *OPTIONS, *extra)
    assert resumed.returncode == 0, resumed.stderr
    _assert_bitwise(tmp_path / "resumed.h5", oracle[densify])
    if not mode:  # checkpointing went on in the folder resumed from, keeping the last two
        assert sorted(p.name for p in ck.iterdir()) == ["step-000000008", "step-000000012"]


@pytest.mark.parametrize("densify,resume_ranks,mode", [(True, 3, ["--mode", "odin"]), (False, 1, ["--mode", "odin"]),
                                                      (True, 1, [])])
def test_killed_rank_then_resume_at_another_size_matches_uninterrupted_run(files, oracle, tmp_path, densify,
                                                                           resume_ranks, mode):
    """A checkpoint of a 2-rank job (one part per owner) resumed by 3 ranks, by 1 rank of the distributed
    trainer and by the single-process trainer."""
    extra = DENSIFY if densify else []
    ck, steps = _kill_during_training(files, tmp_path, 2, ["--mode", "odin", *extra])
    # windows of at most 4 batches, ended early by evaluation (5) and densification (3, 6): they end at
    # 3, 5, 6 with densification, 4, 5, 9 without; the first end at or after each multiple of 4 is
    # checkpointed, and the last rank hangs at the first end at or after step 6
    assert steps == (["step-000000005"] if densify else ["step-000000004", "step-000000009"])
    resumed = _pregel(resume_ranks, "train", "--scene", files / "s.h5", "--out", tmp_path / "resumed.h5",
                      "--resume", ck, *mode, *OPTIONS, *extra)
    assert resumed.returncode == 0, resumed.stderr
    _assert_bitwise(tmp_path / "resumed.h5", oracle[densify])


@pytest.fixture(scope="module")
def checkpointed(files, tmp_path_factory):
    """A checkpoint folder of a complete single-process run with densification."""
    ck = tmp_path_factory.mktemp("complete") / "ck"
    result = _pregel(1, "train", "--scene", files / "s.h5", "--out", ck.parent / "o.h5", "--checkpoint-dir", ck,
                     "--checkpoint-every", EVERY, *OPTIONS, *DENSIFY)
    assert result.returncode == 0, result.stderr
    return ck


@pytest.mark.parametrize("change,densify,key,ranks", [
    (["--scene", "other.h5"], True, "scene", 2),
    (["--init-ply", "init.ply"], True, "init", 1),
    (["--batch-size", 1], True, "training", 1),
    (["--seed", 4], True, "training", 2),
    (["--ssim-weight", 0.3], True, "training", 1),
    (["--densify-grad-threshold", 0.001], True, "training", 1),
    (["--sh-degree", 1], True, "training", 1),
    ([], False, "training", 1),
])
def test_mismatched_checkpoint_is_refused(files, checkpointed, tmp_path, change, densify, key, ranks):
    change = [files / c if str(c).endswith((".h5", ".ply")) else c for c in change]
    before = sorted(p.name for p in checkpointed.iterdir())
    result = _pregel(ranks, "train", "--scene", files / "s.h5", "--out", tmp_path / "o.h5", *OPTIONS,
                     *(DENSIFY if densify else []), *change, "--resume", checkpointed)  # a later option wins
    one_line_error(result, "does not match this job", key)
    assert not (tmp_path / "o.h5").exists()
    assert sorted(p.name for p in checkpointed.iterdir()) == before


def test_corrupted_checkpoint_is_refused(files, checkpointed, tmp_path):
    ck = tmp_path / "ck"
    shutil.copytree(checkpointed, ck)
    part = ck / "step-000000012" / "part-00000.npz"
    data = bytearray(part.read_bytes())
    data[len(data) // 2] ^= 1
    part.write_bytes(bytes(data))
    args = ["--scene", files / "s.h5", "--out", tmp_path / "o.h5", *OPTIONS, *DENSIFY, "--resume", ck]
    one_line_error(_pregel(1, "train", *args), "part-00000.npz", "corrupted")
    (ck / "step-000000012" / "manifest.json").write_text('{"format": "pregel-chec')
    one_line_error(_pregel(1, "train", *args), "manifest.json", "unreadable checkpoint manifest")
    assert not (tmp_path / "o.h5").exists()


def test_a_fresh_run_refuses_a_folder_with_checkpoints(files, checkpointed, tmp_path):
    result = _pregel(1, "train", "--scene", files / "s.h5", "--out", tmp_path / "o.h5", *OPTIONS,
                     "--checkpoint-dir", checkpointed)
    one_line_error(result, "already holds checkpoints")


@pytest.mark.parametrize("ranks,mode", [(1, []), (2, ["--mode", "odin"]), (2, ["--mode", "barrier"])])
def test_resume_from_the_last_steps_checkpoint_writes_the_uninterrupted_outputs(files, oracle, checkpointed, tmp_path,
                                                                               ranks, mode):
    """A checkpoint of the run's last step resumed (nothing left to train) still writes the trained file
    and the held-out PNG of the uninterrupted run; the distributed trainer had no rendered view to put in
    the PNG and ended with a TypeError."""
    ck = tmp_path / "ck"
    shutil.copytree(checkpointed, ck)
    assert "step-000000012" in {p.name for p in ck.iterdir()}  # the last step, STEPS
    out = tmp_path / "resumed.h5"
    result = _pregel(ranks, "train", "--scene", files / "s.h5", "--out", out, "--resume", ck, *mode, *OPTIONS,
                     *DENSIFY)
    assert result.returncode == 0, result.stderr
    _assert_bitwise(out, oracle[True])
    assert out.with_suffix(".png").read_bytes() == oracle[True].with_suffix(".png").read_bytes()
