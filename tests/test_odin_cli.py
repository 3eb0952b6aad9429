"""`mpiexec -n 2 pregel train --mode odin|barrier ...` end to end: outputs, timeline, schedule file, and
one-line refusals of bad options on every rank."""
import json
import os
import shutil
import subprocess
import sys

import h5py
import numpy as np
import pytest

from odin_sched.scenes.scene_gen import generate_scene
from odin_sched.scenes.scene_io import read_scene, write_scene
from pregel.graph_io import read_graph

BIN = os.path.dirname(sys.executable)
MPIEXEC = shutil.which("mpiexec", path=BIN) or "mpiexec"
PREGEL = shutil.which("pregel", path=BIN) or "pregel"


def mpirun(ranks, *args):
    env = dict(os.environ, OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1")
    return subprocess.run([MPIEXEC, "-n", str(ranks), PREGEL, "train", *map(str, args)], capture_output=True,
                          text=True, timeout=300, env=env)


@pytest.fixture(scope="module")
def scene(tmp_path_factory):
    path = tmp_path_factory.mktemp("odin_cli") / "city.h5"
    write_scene(path, generate_scene(400, 14, 32, 24, seed=2, layout="city"))
    return path


def test_odin_run_writes_metrics_timeline_and_schedule(scene, tmp_path):
    out, trace, sched = tmp_path / "t.h5", tmp_path / "t.json", tmp_path / "s.h5"
    result = mpirun(2, "--scene", scene, "--steps", 4, "--batch-size", 1, "--out", out, "--timeline", trace,
                    "--schedule-out", sched, "--cells", 4, "--window", 4, "--eval-every", 4, "--stats")
    assert result.returncode == 0, result.stderr
    assert "at most 1 ranks can work on a batch" in result.stdout
    assert "compute_seconds" in result.stdout and "visibility violations" in result.stdout
    trained = read_scene(out)
    assert trained.attrs["mode"] == "odin" and trained.attrs["ranks"] == 2
    assert trained.attrs["visibility_violations"] == 0 and trained.attrs["cells"] == 4
    assert trained.metrics["per_rank"].shape == (2, len(trained.attrs["per_rank_fields"]))
    assert trained.attrs["steps_per_second"] > 0
    fields = list(trained.attrs["per_rank_fields"])
    processor = trained.metrics["per_rank"][:, fields.index("processor_seconds")]
    wall = 4 / trained.attrs["steps_per_second"]  # the training's wall time, as each rank measured it
    assert np.all(processor > 0) and np.all(processor <= 1.05 * wall + 0.05)  # one thread of work per rank

    events = [e for e in json.loads(trace.read_text())["traceEvents"] if e["ph"] == "X"]
    assert {e["tid"] for e in events} == {0, 1}
    computes = [e for e in events if e["cat"] == "compute" and e["args"].get("label", "").startswith("image ")]
    labels = [e["args"]["label"] for e in computes]  # two spans per image: around its serving point
    assert len(set(labels)) == 4 and all(labels.count(label) == 2 for label in labels), "4 images, 2 spans each"

    graph = read_graph(sched)  # a graph file that the graph tools read
    assert graph.num_edges == trained.attrs["dependency_edges"]  # one window: the whole run
    with h5py.File(sched) as f:
        cameras, ranks = f["steps/camera"][()], f["steps/rank"][()]
        assert len(cameras) == 4 and set(ranks) <= {0, 1}
        assert (f["steps/level"][()] >= 1).all(), "an image reads at least its cells' initial versions"


@pytest.mark.parametrize("args,problem", [
    (("--cells", 1), "--cells 1 is fewer than the 2 ranks"),
    (("--cells", 0), "--cells must be at least 1"),
    (("--window", 0), "--window must be at least 1"),
    (("--batch-size", 0), "--batch-size must be at least 1"),
    (("--mode", "barrier", "--send-thread"), "--send-thread: barrier mode exchanges a phase's messages"),
    (("--batches-ahead", -1), "--batches-ahead must be at least 0, got -1"),
    (("--mode", "barrier", "--batches-ahead", 1), "--batches-ahead: barrier mode fires a phase's vertices in turn"),
    (("--hold-share", -1), "--hold-share must be at least 0 (inf: never), got -1.0"),
    (("--mode", "barrier", "--hold-share", "inf"), "--hold-share: barrier mode fires a phase's vertices in turn"),
])
def test_bad_options_get_one_line_and_exit_2(scene, tmp_path, args, problem):
    out = tmp_path / "t.h5"
    result = mpirun(2, "--scene", scene, "--steps", 2, "--out", out, *args)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and problem in lines[0], result.stderr
    assert not out.exists()


@pytest.mark.parametrize("gaussians,ranks,cells", [
    (3_000, 2, 32),           # a small model: 16 cells per rank
    (262_144, 2, 32),         # exactly 32 x 8192
    (262_145, 2, 33),         # one Gaussian more: one cell more
    (2_000_000, 2, 245),      # 2,000,000 / 8192 = 244.1, rounded up
    (2_000_000, 3, 245),
    (2_000_000, 16, 256),     # 16 per rank is more
    (100_000_000, 2, 1024),   # 12,208 wanted, at most 512 per rank
])
def test_default_cells_follow_the_model_size(gaussians, ranks, cells):
    from odin_sched.odin.options import OdinOptions

    assert OdinOptions().resolved_cells(ranks, gaussians) == cells
    assert OdinOptions(cells=7).resolved_cells(ranks, gaussians) == 7  # --cells wins


def test_cells_help_states_the_default(capsys):
    from odin_sched.odin.options import GAUSSIANS_PER_CELL, MAX_CELLS_PER_RANK, OdinOptions
    from pregel.cli import build_parser

    with pytest.raises(SystemExit):
        build_parser().parse_args(["train", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert (f"about one per {GAUSSIANS_PER_CELL} initial Gaussians, at least {OdinOptions.CELLS_PER_RANK} and at "
            f"most {MAX_CELLS_PER_RANK} per rank") in text


def test_send_thread_refused_without_mpi_thread_multiple(scene, tmp_path):
    """MPI initialised at a lower thread level (mpi4py.rc.thread_level 'serialized'): --send-thread is one
    line and exit 2 on every rank, nothing written."""
    out = tmp_path / "t.h5"
    code = ("import sys, mpi4py; mpi4py.rc.thread_level = 'serialized'; from pregel.cli import main; "
            "sys.exit(main(sys.argv[1:]))")
    env = dict(os.environ, OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1")
    result = subprocess.run([MPIEXEC, "-n", "2", sys.executable, "-c", code, "train", "--scene", str(scene),
                             "--steps", "2", "--out", str(out), "--send-thread"],
                            capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "--send-thread needs MPI initialised with MPI_THREAD_MULTIPLE" in lines[0], result.stderr
    assert not out.exists()
