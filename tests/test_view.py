"""`pregel view`'s server and the trainers' status file, without a browser: the binary model payload against
the PLY read by plyfile (covariances from scipy's rotations), the routes, a port in use, Ctrl-C, and the
status file against the trained file's /metrics."""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from types import SimpleNamespace

import numpy as np
import pytest
from plyfile import PlyData
from scipy.spatial.transform import Rotation

from kernels.splat.sh import SH_C0
from odin_sched.scenes.ply import write_ply
from odin_sched.scenes.scene_gen import generate_scene
from odin_sched.scenes.scene_io import read_scene, write_scene
from odin_sched.view.model import load_view_model
from odin_sched.view.server import dashboard_routes, make_server, serve_in_background, url, viewer_routes
from odin_sched.training.status import TrainStatus, latest_status, loss_curve
from pregel.cli import main

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def ply_file(tmp_path_factory):
    rng = np.random.default_rng(3)
    g = 257
    path = tmp_path_factory.mktemp("ply") / "m.ply"
    write_ply(path, rng.normal(size=(g, 3)), rng.normal(-2, 0.5, size=(g, 3)), rng.normal(size=(g, 4)),
              rng.normal(size=g), rng.random((g, 3)))
    return path


def _decode(payload: bytes, g: int) -> tuple:
    arr = np.frombuffer(payload, "<f4")
    assert arr.size == 13 * g
    return arr[:3 * g].reshape(g, 3), arr[3 * g:9 * g].reshape(g, 6), arr[9 * g:].reshape(g, 4)


def test_model_payload_round_trips_against_the_ply(ply_file):
    model_bin, info = load_view_model(ply_file)
    v = PlyData.read(str(ply_file))["vertex"].data
    g = len(v)
    means, covs, rgba = _decode(model_bin, g)
    assert info["count"] == g and info["cameras"] == []
    np.testing.assert_array_equal(means, np.stack([v["x"], v["y"], v["z"]], axis=1))
    col = lambda *names: np.stack([np.asarray(v[n], np.float64) for n in names], axis=1)  # noqa: E731
    np.testing.assert_allclose(rgba[:, :3], col("f_dc_0", "f_dc_1", "f_dc_2") * SH_C0 + 0.5, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(rgba[:, 3], 1 / (1 + np.exp(-np.asarray(v["opacity"], np.float64))), rtol=1e-6)
    rot = Rotation.from_quat(col("rot_1", "rot_2", "rot_3", "rot_0")).as_matrix()  # scipy: scalar last
    s = np.exp(col("scale_0", "scale_1", "scale_2"))
    cov = np.einsum("gij,gj,gkj->gik", rot, s ** 2, rot)
    expected = cov[:, [0, 0, 0, 1, 1, 2], [0, 1, 2, 1, 2, 2]]
    np.testing.assert_allclose(covs, expected, rtol=1e-5, atol=1e-7 * float(np.abs(expected).max()))


def test_model_payload_carries_the_sh_of_the_ply(tmp_path):
    rng = np.random.default_rng(4)
    g, k = 33, 9  # SH degree 2
    sh = rng.normal(0, 2, size=(g, k, 3)).astype(np.float32)
    write_ply(tmp_path / "sh.ply", rng.normal(size=(g, 3)), rng.normal(-2, 0.5, size=(g, 3)), rng.normal(size=(g, 4)),
              rng.normal(size=g), sh=sh)
    model_bin, info = load_view_model(tmp_path / "sh.ply")
    v = PlyData.read(str(tmp_path / "sh.ply"))["vertex"].data
    arr = np.frombuffer(model_bin, "<f4")
    assert info["sh_degree"] == 2 and arr.size == 13 * g + 3 * (k - 1) * g
    dc = np.stack([v[f"f_dc_{c}"] for c in range(3)], axis=1).astype(np.float64)
    np.testing.assert_allclose(arr[9 * g:13 * g].reshape(g, 4)[:, :3], dc * SH_C0 + 0.5, rtol=1e-6, atol=1e-6)  # unclamped
    rest = arr[13 * g:].reshape(g, k - 1, 3)
    for c in range(3):  # the PLY's f_rest_* are channel-major: f_rest_{c (K - 1) + j - 1} is coefficient j of channel c
        np.testing.assert_array_equal(rest[:, :, c], np.stack([v[f"f_rest_{c * (k - 1) + j}"] for j in range(k - 1)], axis=1))

    write_ply(tmp_path / "sh0.ply", rng.normal(size=(g, 3)), rng.normal(-2, 0.5, size=(g, 3)), rng.normal(size=(g, 4)),
              rng.normal(size=g), sh=sh[:, :1])
    model_bin, info = load_view_model(tmp_path / "sh0.ply")
    arr = np.frombuffer(model_bin, "<f4")
    assert info["sh_degree"] == 0 and arr.size == 13 * g
    expected = np.maximum(sh[:, 0].astype(np.float64) * SH_C0 + 0.5, 0)  # degree 0: clamped at 0, as rendered
    assert (expected == 0).any()
    np.testing.assert_allclose(arr[9 * g:].reshape(g, 4)[:, :3], expected, rtol=1e-6, atol=1e-6)


def test_served_model_and_pages(ply_file, tmp_path):
    scene = generate_scene(60, 4, 16, 12, seed=1)
    write_scene(tmp_path / "scene.h5", scene)
    model_bin, info = load_view_model(ply_file, tmp_path / "scene.h5")
    server = make_server(viewer_routes(model_bin, json.dumps(info).encode()), port=0)
    serve_in_background(server)
    try:
        get = lambda path: urllib.request.urlopen(url(server) + path).read()  # noqa: E731
        assert get("model.bin") == model_bin
        cams = json.loads(get("model.json"))["cameras"]
        assert len(cams) == 4 and cams[1]["width"] == 16 and cams[1]["heldout"] is False and cams[0]["heldout"]
        np.testing.assert_array_equal(np.array(cams[2]["viewmat"], np.float32).reshape(4, 4), scene.viewmats[2])
        assert (cams[2]["fx"], cams[2]["cy"]) == (float(scene.Ks[2, 0, 0]), float(scene.Ks[2, 1, 2]))
        assert b"viewer.js" in get("") and b"texelFetch" in get("viewer.js") and b"postMessage" in get("sort_worker.js")
        with pytest.raises(urllib.error.HTTPError):
            get("../setup.cfg")
    finally:
        server.shutdown()
        server.server_close()


def test_port_in_use_is_one_line_and_exit_2(ply_file, capsys):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert main(["view", str(ply_file), "--port", str(port)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"pregel view: error: port {port} on 127.0.0.1 is in use; choose another port"]


def test_other_host_warns(ply_file, capsys):
    server = make_server({}, host="127.0.0.2", port=0)
    server.server_close()
    assert "warning: --host 127.0.0.2: serving to other machines" in capsys.readouterr().err


def test_model_or_watch_and_bad_files(tmp_path, capsys):
    assert main(["view"]) == 2
    assert main(["view", str(tmp_path / "none.ply")]) == 2
    assert main(["view", "--watch", str(tmp_path / "nowhere")]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == ["pregel view: error: give either MODEL or --watch OUT_DIR",
                     f"pregel view: error: {tmp_path / 'none.ply'}: no such file",
                     f"pregel view: error: --watch {tmp_path / 'nowhere'}: no such folder"]


def test_ctrl_c_stops_with_one_line(ply_file):
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen([sys.executable, "-m", "pregel.cli", "view", str(ply_file), "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        first = proc.stdout.readline()
        assert first.startswith("pregel view: 257 Gaussians of") and "http://127.0.0.1:" in first
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0 and out == "" and err == "pregel view: stopped\n"


def test_loss_curve_bins():
    losses = np.arange(1, 1001, dtype=np.float64)
    curve = loss_curve(losses)
    assert len(curve["steps"]) == 400 and curve["steps"][-1] == 1000
    edges = [0] + curve["steps"]
    for i in (0, 17, 399):
        assert curve["values"][i] == pytest.approx(losses[edges[i]:edges[i + 1]].mean())
    assert loss_curve(np.array([0.5, 0.25])) == {"steps": [1, 2], "values": [0.5, 0.25]}


def test_status_writes_only_when_due_and_dashboard_serves_the_newest(tmp_path, monkeypatch):
    from odin_sched.training import status as status_module

    clock = [100.0]
    monkeypatch.setattr(status_module, "time", SimpleNamespace(perf_counter=lambda: clock[0], thread_time=time.thread_time))
    status = TrainStatus(tmp_path / "a.h5", "single", 1, 10, 2, "s.h5")
    losses = np.linspace(1, 0, 10)
    status.update(3, losses, [], [], 5, 1.5)
    status.flush()
    first = json.loads((tmp_path / "a.status.json").read_text())
    assert (first["step"], first["images_per_s"], first["done"], first["loss"]) == (3, 4.0, False, losses[2])
    clock[0] += 0.9 * status_module.EVERY_SECONDS
    status.update(4, losses, [], [], 5, 1.6)  # not due yet, not forced: not written
    status.flush()
    assert json.loads((tmp_path / "a.status.json").read_text())["step"] == 3
    clock[0] += 0.2 * status_module.EVERY_SECONDS
    status.update(5, losses, [], [], 5, 1.7)  # due
    status.flush()
    assert json.loads((tmp_path / "a.status.json").read_text())["step"] == 5
    status.update(10, losses, [10], [21.5], 6, 2.0, force=True, view=lambda p: open(p, "wb").write(b"PNG"))
    status.close()
    assert (tmp_path / "a.status.png").read_bytes() == b"PNG"
    assert sorted(os.listdir(tmp_path)) == ["a.status.json", "a.status.png"]  # no temporary files left
    assert latest_status(tmp_path) == str(tmp_path / "a.status.json")
    routes = dashboard_routes(tmp_path)
    served = json.loads(routes["/status.json"]())
    assert served["done"] and served["psnr"] == {"steps": [10], "values": [21.5]} and served["has_view"]
    assert routes["/heldout.png"]() == b"PNG"


def test_status_writer_keeps_the_newest_status_and_a_replaced_view(tmp_path):
    status = TrainStatus(tmp_path / "a.h5", "single", 1, 10, 1, "s.h5")
    gate = threading.Event()
    status.update(1, np.ones(10), [], [], 5, 1.0, force=True, view=lambda p: gate.wait() and open(p, "wb").write(b"A"))
    status.update(2, np.ones(10), [2], [20.0], 5, 2.0, force=True, view=lambda p: open(p, "wb").write(b"B"))
    status.update(3, np.ones(10), [2], [20.0], 5, 3.0, force=True)  # replaces step 2's status, keeps its view
    gate.set()  # the writer was held in step 1's view
    status.close()
    assert json.loads((tmp_path / "a.status.json").read_text())["step"] == 3
    assert (tmp_path / "a.status.png").read_bytes() == b"B"


def test_status_writer_counts_its_processor_time(tmp_path):
    burned = []

    def view(path):  # runs on the writer thread: 50 ms of that thread's processor time
        t0 = time.thread_time()
        while time.thread_time() - t0 < 0.05:
            pass
        burned.append(time.thread_time() - t0)
        open(path, "wb").write(b"A")

    processor = time.process_time()
    status = TrainStatus(tmp_path / "a.h5", "single", 1, 10, 1, "s.h5")
    status.update(1, np.ones(10), [], [], 5, 1.0, force=True, view=view)
    status.close()  # the main thread only waits meanwhile
    assert burned[0] <= status.writer_seconds <= time.process_time() - processor


def test_a_crashed_run_still_writes_its_last_status(tmp_path):
    code = ("import time, numpy as np\n"
            "from odin_sched.training.status import TrainStatus\n"
            f"status = TrainStatus({str(tmp_path / 'a.h5')!r}, 'single', 1, 10, 1, 's.h5')\n"
            "status.update(1, np.ones(10), [], [], 5, 1.0, force=True, view=lambda p: time.sleep(0.5) or open(p, 'wb').write(b'A'))\n"
            "status.update(2, np.ones(10), [], [], 5, 2.0, force=True)\n"
            "raise SystemExit('training failed')\n")
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 1 and proc.stderr.strip() == "training failed"
    assert json.loads((tmp_path / "a.status.json").read_text())["step"] == 2
    assert (tmp_path / "a.status.png").read_bytes() == b"A"


def test_status_write_failure_is_one_warning(tmp_path, capsys):
    status = TrainStatus(tmp_path / "a.h5", "single", 1, 10, 1, "s.h5")
    for step in (1, 2):
        status.update(step, np.ones(10), [], [], 5, 1.0, force=True, view=lambda p: 1 / 0)
        status.flush()
    status.close()
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"warning: {tmp_path / 'a.status.json'}: the dashboard's status file could not be written "
                   f"(division by zero)"]
    assert not os.listdir(tmp_path)  # nothing half-written


def test_status_of_training_runs_equals_their_metrics(tmp_path):
    write_scene(tmp_path / "scene.h5", generate_scene(60, 6, 16, 12, seed=2))
    for mode in ("single", "odin"):
        out = tmp_path / mode / "t.h5"
        out.parent.mkdir()
        extra = [] if mode == "single" else ["--mode", "odin", "--window", "2"]
        assert main(["train", "--scene", str(tmp_path / "scene.h5"), "--steps", "6", "--eval-every", "3",
                     "--out", str(out), *extra]) == 0
        status = json.loads((tmp_path / mode / "t.status.json").read_text())
        trained = read_scene(out)
        assert status["done"] and status["step"] == trained.attrs["steps"] == 6
        assert status["run"]["mode"] == trained.attrs["mode"]
        assert status["num_gaussians"] == trained.attrs["num_gaussians"]
        assert status["loss"] == trained.metrics["loss"][-1]
        assert status["loss_curve"] == {"steps": list(range(1, 7)), "values": list(trained.metrics["loss"])}
        assert status["psnr"] == {"steps": [3, 6], "values": list(trained.metrics["psnr"])}
        png = (tmp_path / mode / "t.status.png").read_bytes()
        assert png == (tmp_path / mode / "t.png").read_bytes()  # the final held-out view, as the trainer saves it
        if mode == "odin":
            fields = status["ranks"]["fields"]
            row = np.array(status["ranks"]["rows"][0])
            final = trained.metrics["per_rank"][0]
            for name in ("compute_seconds", "comm_seconds", "wait_seconds", "images", "bytes_sent"):
                assert row[fields.index(name)] == final[fields.index(name)]
            spans = status["ranks"]["timeline"]["spans"]
            assert spans and {s[0] for s in spans} == {0}
            assert {status["ranks"]["timeline"]["kinds"][s[1]] for s in spans} >= {"compute"}


BIN = os.path.dirname(sys.executable)
MPIEXEC = shutil.which("mpiexec", path=BIN) or "mpiexec"


def _mpi_train(ranks: int, *args) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([MPIEXEC, "-n", str(ranks), sys.executable, "-m", "pregel.cli", "train", *map(str, args)],
                          capture_output=True, text=True, timeout=300, env=env)


@pytest.fixture(scope="module")
def tiny_scene_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("mpi_view") / "scene.h5"
    write_scene(path, generate_scene(60, 6, 16, 12, seed=4))
    return path


@pytest.mark.parametrize("ranks", [1, 2])
def test_dashboard_port_in_use_ends_every_rank_with_one_line(ranks, tiny_scene_file, tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = _mpi_train(ranks, "--scene", tiny_scene_file, "--steps", 2, "--out", tmp_path / "t.h5",
                            "--dashboard", port)
    assert result.returncode == 2
    assert result.stderr == f"pregel train: error: port {port} on 127.0.0.1 is in use; choose another port\n"
    assert os.listdir(tmp_path) == []


def test_dashboard_under_mpiexec_reports_every_rank(tiny_scene_file, tmp_path):
    result = _mpi_train(2, "--scene", tiny_scene_file, "--steps", 4, "--batch-size", 2, "--eval-every", 2,
                        "--out", tmp_path / "t.h5", "--dashboard", 0)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("pregel train: dashboard at http://127.0.0.1:") == 1  # rank 0 alone serves
    status = json.loads((tmp_path / "t.status.json").read_text())
    trained = read_scene(tmp_path / "t.h5")
    assert status["run"]["ranks"] == 2 and status["step"] == 4 and status["done"]
    fields = status["ranks"]["fields"]
    for rank in (0, 1):
        for name in ("compute_seconds", "wait_seconds", "images", "bytes_sent"):
            assert status["ranks"]["rows"][rank][fields.index(name)] == \
                trained.metrics["per_rank"][rank][fields.index(name)]
    assert {span[0] for span in status["ranks"]["timeline"]["spans"]} == {0, 1}
