"""`pregel plot` on each kind of input: the PNG has the figure's size and real content in the
colours of what it draws."""
import json

import h5py
import numpy as np
import pytest
from PIL import Image

from odin_sched.scenes.scene_gen import generate_scene
from odin_sched.scenes.scene_io import write_scene
from pregel.cli import main
from pregel.convert import from_scipy
from pregel.graph_io import write_graph

BLUE, ORANGE, RED = (31, 119, 180), (255, 127, 14), (214, 39, 40)  # matplotlib tab:blue, tab:orange, tab:red


def _png(path, size):
    image = np.asarray(Image.open(path).convert("RGB")).astype(int)
    assert image.shape[1::-1] == size
    assert image.std() > 10 and len(np.unique(image.reshape(-1, 3), axis=0)) > 50  # not blank
    return image


def _pixels_of(image, colour, tol=3):
    return int((np.abs(image - np.array(colour)).max(axis=2) <= tol).sum())


def test_run_result(tmp_path):
    import scipy.sparse as sp

    write_graph(tmp_path / "g.h5", from_scipy(sp.random(300, 300, density=0.03, random_state=0, format="csr")))
    assert main(["run", "pagerank", "--graph", str(tmp_path / "g.h5"), "--out", str(tmp_path / "r.h5"),
                 "--quiet"]) == 0
    assert main(["plot", str(tmp_path / "r.h5"), "--out", str(tmp_path / "r.png")]) == 0
    image = _png(tmp_path / "r.png", (1100, 400))
    assert _pixels_of(image, BLUE) > 100 and _pixels_of(image, ORANGE) > 100


@pytest.mark.parametrize("per_rank", [None, "compound", "array"])
def test_train_result(tmp_path, per_rank):
    scene = generate_scene(50, 4, 16, 16, seed=0)
    scene.metrics = {"loss": np.exp(-np.arange(200) / 80.0) + 0.01, "psnr_steps": np.array([100, 200]),
                     "psnr": np.array([20.0, 25.0])}
    write_scene(tmp_path / "t.h5", scene)
    times = np.array([[1.0, 0.5, 0.2], [1.2, 0.4, 0.1]])
    if per_rank:
        with h5py.File(tmp_path / "t.h5", "a") as f:
            if per_rank == "compound":
                table = np.rec.fromarrays(times.T, names="compute_seconds,comm_seconds,wait_seconds")
                f.create_dataset("metrics/per_rank", data=table)
            else:
                f.create_dataset("metrics/per_rank", data=times).attrs["fields"] = [
                    "compute_seconds", "comm_seconds", "wait_seconds"]
    assert main(["plot", str(tmp_path / "t.h5"), "--out", str(tmp_path / "t.png")]) == 0
    image = _png(tmp_path / "t.png", (1500 if per_rank else 1000, 400))
    assert _pixels_of(image, BLUE) > 100
    assert (_pixels_of(image, RED) > 100) == bool(per_rank)


def _trace(path, ranks, kinds):
    events, rng = [], np.random.default_rng(len(kinds))
    for rank in range(ranks):
        t = 0.0
        for i in range(20):
            dur = float(rng.uniform(100, 1000))
            events.append({"ph": "X", "tid": rank, "pid": 0, "name": kinds[i % len(kinds)], "ts": t, "dur": dur})
            t += dur
    path.write_text(json.dumps({"traceEvents": events + [{"ph": "M", "name": "thread_name", "tid": 0}]}))


def test_gantt_of_one_and_two_traces(tmp_path, capsys):
    _trace(tmp_path / "a.json", 3, ["compute", "send", "recv", "wait"])
    _trace(tmp_path / "b.json", 3, ["compute", "barrier"])
    assert main(["plot", str(tmp_path / "a.json"), "--out", str(tmp_path / "a.png")]) == 0
    one = _png(tmp_path / "a.png", (1000, int(100 * (1.2 + 0.45 * 3 + 0.6))))
    assert _pixels_of(one, BLUE) > 500 and _pixels_of(one, RED) > 500
    assert main(["plot", str(tmp_path / "a.json"), str(tmp_path / "b.json"), "--labels", "odin,barrier",
                 "--out", str(tmp_path / "ab.png")]) == 0
    two = _png(tmp_path / "ab.png", (1000, int(100 * (1.2 + 0.45 * 6 + 1.2))))
    assert _pixels_of(two, BLUE) > 2 * _pixels_of(one, BLUE) * 0.8
    capsys.readouterr()
    assert main(["plot", str(tmp_path / "a.json"), "--labels", "x,y", "--out", str(tmp_path / "c.png")]) == 2
    assert "--labels has 2 names for 1 files" in capsys.readouterr().err
    (tmp_path / "bad.json").write_text('{"traceEvents": [{"ph": "X", "tid": 0}]}')
    assert main(["plot", str(tmp_path / "bad.json"), "--out", str(tmp_path / "c.png")]) == 2
    assert "lacks a numeric tid, ts or dur" in capsys.readouterr().err
    assert not (tmp_path / "c.png").exists()
