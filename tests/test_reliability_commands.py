"""Issue 24, crashes and unbounded memory of the newer commands: simulate, render, generate-scene and
train answer impossible or meaningless sizes with one line and exit 2 before any work; the camera order
is made as it is read (memory independent of the step count); Ctrl-C ends train with one line and exit
130 on every rank."""

import os
import signal
import subprocess
import time
import tracemalloc

import numpy as np
import pytest
from test_reliability import ENV, MPIEXEC, PREGEL, one_line, pregel

from odin_sched.training.image_order import BatchOrder
from odin_sched.scenes.scene_gen import generate_scene
from odin_sched.scenes.ply import write_ply
from odin_sched.scenes.scene_io import read_scene, write_scene
from odin_sched.training.config import TrainConfig
from odin_sched.training.train import prepare


@pytest.fixture(scope="module")
def scene(tmp_path_factory):
    path = tmp_path_factory.mktemp("cmd") / "s.h5"
    write_scene(path, generate_scene(40, 9, 16, 16, seed=1))  # 8 training cameras
    return path


@pytest.mark.parametrize("args, says", [
    (("--cameras", 50, "--batch-size", 60), "--batch-size 60 is more than the 43 training cameras"),
    (("--cameras", 50, "--gpus", 64), "the GPU count of --gpus 64"),
    (("--gpus", 100000), "cells is more than the"),
    (("--gaussians", 20000, "--cameras", 200, "--gpus", 100000, "--batch-size", 4), "a cell would hold none"),
    (("--gaussians", 2000000, "--cameras", 3000000, "--gpus", 64, "--batch-size", 4), "visibility table"),
    (("--width", 0), "--width must be at least 1"),
    (("--batches-ahead", -1), "--batches-ahead must be at least 0, got -1"),
    (("--hold-share", "nan"), "--hold-share must be at least 0, got nan"),
])
def test_simulate_refuses_what_cannot_be_meaningful_or_fit(tmp_path, args, says):
    defaults = {"--gaussians": 2000, "--cameras": 50, "--steps": 1, "--gpus": 1}
    given = dict(zip(args[::2], args[1::2]))
    flags = [str(x) for k, v in {**defaults, **given}.items() for x in (k, v)]
    one_line(pregel(1, "simulate", *flags, "--out", tmp_path / "r.h5"), says)
    assert not (tmp_path / "r.h5").exists()


def test_render_cameras_beyond_int64_is_one_line(scene, tmp_path):
    one_line(pregel(1, "render", "--scene", scene, "--out", tmp_path / "v", "--cameras", "99999999999999999999"),
             "camera 99999999999999999999 does not exist")


def test_render_of_a_ply_without_gaussians_is_one_line_and_writes_nothing(scene, tmp_path):
    empty = tmp_path / "empty.ply"
    write_ply(empty, **{k: v[:0] for k, v in read_scene(scene).gaussians().items()})
    one_line(pregel(1, "render", "--scene", scene, "--ply", empty, "--out", tmp_path / "v", "--orbit", 3),
             str(empty), "no Gaussians")
    assert not (tmp_path / "v").exists() or not any((tmp_path / "v").iterdir())


def test_generate_scene_larger_than_memory_is_one_line(tmp_path):
    one_line(pregel(1, "generate-scene", "--gaussians", 16, "--cameras", 8, "--width", 100000, "--height", 100000,
                    "--out", tmp_path / "s.h5"), "GiB, more than this machine's")


@pytest.mark.parametrize("ranks", [1, 2])
def test_train_seed_and_steps_out_of_range_are_one_line(scene, tmp_path, ranks):
    out = tmp_path / "t.h5"
    one_line(pregel(ranks, "train", "--scene", scene, "--steps", 1, "--seed", "99999999999999999999999",
                    "--out", out), "--seed must be in")
    one_line(pregel(ranks, "train", "--scene", scene, "--steps", "99999999999999999999", "--out", out),
             "does not fit the checkpoint and result formats")
    assert not out.exists()


def test_the_camera_order_is_made_as_it_is_read(scene):
    ids = np.arange(1, 9)
    tracemalloc.start()
    order = BatchOrder(ids, 10 ** 15, 3, seed=2, sees=np.eye(9, 4, dtype=bool))
    first = order[:4]
    window = order[3000:3002]  # made a pass at a time: 1,125 passes of 8 cameras
    setup = prepare(TrainConfig(scene, 10 ** 9, batch_size=2, eval_every=10 ** 9))
    later = setup.batches[1000]
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 64 * 2 ** 20, peak  # the whole order would be 8 GB at 10^9 steps of 2 cameras
    assert first.shape == (4, 3) and window.shape == (2, 3) and later.shape == (2,)
    # independently: each pass of the spread order visits every training camera once
    passes = order[:8].ravel()
    assert sorted(passes[:8].tolist()) == ids.tolist() and sorted(passes[8:16].tolist()) == ids.tolist()


@pytest.mark.parametrize("ranks", [1, 2])
def test_ctrl_c_during_train_is_one_line_and_exit_130_on_every_rank(scene, tmp_path, ranks):
    checkpoints = tmp_path / "ck"
    command = [PREGEL, "train", "--scene", str(scene), "--steps", "100000000", "--out", str(tmp_path / "t.h5"),
               "--checkpoint-dir", str(checkpoints), "--checkpoint-every", "1", "--eval-every", "100000000"]
    if ranks > 1:
        command = [MPIEXEC, "-n", str(ranks)] + command
    job = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV,
                           start_new_session=True)
    try:
        while not (checkpoints.is_dir() and any(checkpoints.iterdir())):  # training is under way
            assert job.poll() is None, job.communicate()
            time.sleep(0.05)
        os.killpg(job.pid, signal.SIGINT)  # as a terminal's Ctrl-C: every process of the job
        _, err = job.communicate(timeout=120)
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
    assert job.returncode == 130, (job.returncode, err)
    # a step slower than the progress interval (a cold numba cache on a busy machine) prints a progress
    # line before Ctrl-C; what Ctrl-C itself prints is one line per rank
    lines = [line for line in err.strip().splitlines() if line.strip() and not line.startswith("step ")]
    assert "Traceback" not in err and len(lines) == ranks and all("interrupted" in line for line in lines), err
