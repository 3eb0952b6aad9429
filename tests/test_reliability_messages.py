"""Issue 24, messages that named the wrong thing: a checkpoint of another kind of job, a changed option on
resume (the field is named), ``--resume`` given a file, a version attribute (printed as a plain number),
and ``--densify-grad-threshold nan`` (which never densified) — each one line, exit 2."""

import h5py
import numpy as np
import pytest
from test_reliability import one_line, pregel

from odin_sched.scenes.scene_gen import generate_scene
from odin_sched.scenes.scene_io import write_scene
from pregel.generate import generate_graph
from pregel.graph_io import GraphData, write_graph


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("msg")
    write_scene(folder / "s.h5", generate_scene(40, 4, 16, 16, seed=1))
    indptr, indices = generate_graph("er", 40, 3, seed=2)
    write_graph(folder / "g.h5", GraphData(indptr, indices))
    result = pregel(1, "train", "--scene", folder / "s.h5", "--steps", 2, "--out", folder / "t.h5",
                    "--checkpoint-dir", folder / "train_ck", "--checkpoint-every", 1)
    assert result.returncode == 0, result.stderr
    result = pregel(1, "run", "pagerank", "--graph", folder / "g.h5", "--out", folder / "r.h5", "--checkpoint-dir",
                    folder / "run_ck", "--checkpoint-every", 1, "--max-iter", 3)
    assert result.returncode == 0, result.stderr
    return folder


@pytest.mark.parametrize("ranks", [1, 2])
def test_a_changed_option_on_resume_is_named(files, tmp_path, ranks):
    one_line(pregel(ranks, "train", "--scene", files / "s.h5", "--steps", 3, "--out", tmp_path / "t.h5",
                    "--resume", files / "train_ck"), "training.steps was 2, now 3")


def test_a_checkpoint_of_another_kind_of_job_says_so(files, tmp_path):
    one_line(pregel(1, "train", "--scene", files / "s.h5", "--steps", 2, "--out", tmp_path / "t.h5",
                    "--resume", files / "run_ck"), "written by another kind of job", "no scene")
    one_line(pregel(1, "run", "pagerank", "--graph", files / "g.h5", "--out", tmp_path / "r.h5",
                    "--resume", files / "train_ck"), "written by another kind of job", "no graph")


def test_resume_given_a_file_says_to_give_the_folder(files, tmp_path):
    manifest = next((files / "train_ck").glob("step-*/manifest.json"))
    one_line(pregel(1, "train", "--scene", files / "s.h5", "--steps", 2, "--out", tmp_path / "t.h5",
                    "--resume", manifest), str(manifest), "is a file: give the checkpoint folder")


def test_versions_are_printed_as_plain_numbers(files, tmp_path):
    for name, command in (("s.h5", ("train", "--scene")), ("g.h5", ("run", "wcc", "--graph"))):
        copy = tmp_path / name
        copy.write_bytes((files / name).read_bytes())
        with h5py.File(copy, "a") as f:
            f.attrs["version"] = np.int64(7)
        result = pregel(1, *command, copy, "--out", tmp_path / "o.h5", *(("--steps", 1) if name == "s.h5" else ()))
        one_line(result, "7")
        assert "np." not in result.stderr


def test_densify_grad_threshold_nan_is_one_line(files, tmp_path):
    one_line(pregel(1, "train", "--scene", files / "s.h5", "--steps", 2, "--out", tmp_path / "t.h5", "--densify",
                    "--densify-grad-threshold", "nan"), "--densify-grad-threshold must be a positive number, got nan")
