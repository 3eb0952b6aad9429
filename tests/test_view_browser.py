"""`pregel view` and the training dashboard in a real browser: headless Chromium (Debian's chromium and
chromium-driver, installed by .ci/run) driven by Selenium, WebGL2 in software (SwiftShader)."""
import base64
import contextlib
import io
import os
import shutil
import subprocess
import sys
import time
from dataclasses import replace

import numpy as np
import pytest
from PIL import Image

from kernels.splat.sh import num_bases
from odin_sched.scenes.scene_gen import generate_scene
from odin_sched.scenes.sh import rgb_to_sh0, sh0_to_rgb
from odin_sched.scenes.scene_io import read_scene, write_scene
from pregel.cli import main

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
FLAGS = ("--headless=new", "--use-angle=swiftshader", "--enable-unsafe-swiftshader", "--no-sandbox",
         "--window-size=1200,800")
WAIT_S = 120  # upper bound on any wait for the page; the tests never depend on how fast things are


@pytest.fixture(scope="module")
def browser():
    if not os.path.exists(CHROMEDRIVER):
        if os.environ.get("CI"):
            pytest.fail("chromium-driver is not installed (.ci/run installs it)")
        pytest.skip("needs Debian's chromium and chromium-driver (apt-get install chromium chromium-driver)")
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    for flag in FLAGS:
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    yield driver
    driver.quit()


def _start(args: list) -> tuple[subprocess.Popen, str]:
    """Start ``pregel ARGS`` and return (process, the page's address from its first line)."""
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen([sys.executable, "-m", "pregel.cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, env=env)
    line = proc.stdout.readline()
    assert "http://127.0.0.1:" in line, line
    return proc, line[line.index("http://"):].split()[0]


def _stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    proc.wait(timeout=30)


@contextlib.contextmanager
def _viewer(driver, path):
    """``pregel view PATH`` loaded in ``driver`` at the scene's size, its viewer started without an error;
    the server stops on leaving."""
    proc, address = _start(["view", str(path), "--port", "0"])
    try:
        driver.get(address + "?scale=1")
        _until(lambda: driver.execute_script("return !!window.viewer || window.viewerError"), "the viewer")
        assert driver.execute_script("return window.viewerError || null") is None
        yield
    finally:
        _stop(proc)


def _until(condition, what: str):
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def _canvas(driver) -> np.ndarray:
    """The canvas as drawn once the current view is sorted and drawn: uint8 [H, W, 3]. Read in the same
    task as the check that settles it, so that no frame comes between them."""
    data = driver.execute_async_script("const done = arguments[0]; window.viewer.settled().then(() => "
                                       "done(document.getElementById('canvas').toDataURL('image/png')))")
    return np.asarray(Image.open(io.BytesIO(base64.b64decode(data.split(",", 1)[1]))).convert("RGB"))


def _psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return float(10 * np.log10(255.0 ** 2 / mse))


@pytest.fixture(scope="module")
def scene_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("view") / "scene.h5"
    write_scene(path, generate_scene(400, 10, 64, 48, seed=2))
    return path


def test_viewer_draws_the_scene_cameras_as_pregel_render_does(browser, scene_file, tmp_path):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    scene = read_scene(scene_file)
    cam = 3
    assert main(["render", "--scene", str(scene_file), "--cameras", f"0,{cam}", "--out", str(tmp_path)]) == 0
    with _viewer(browser, scene_file):
        first = _canvas(browser)  # camera 0 at the scene's size
        assert first.shape == (scene.height, scene.width, 3) and first.std() > 5  # not blank
        assert _psnr(first, np.asarray(Image.open(tmp_path / "0000.png"))) >= 22

        browser.find_element(By.ID, f"cam-{cam}").click()
        view = np.array(browser.execute_script("return window.viewer.viewmat()")).reshape(4, 4)
        np.testing.assert_allclose(view, scene.viewmats[cam], atol=1e-5)
        shot = _canvas(browser)
        assert _psnr(shot, np.asarray(Image.open(tmp_path / f"{cam:04d}.png"))) >= 22
        assert np.abs(shot.astype(int) - first).mean() > 5  # the view moved

        for c in range(scene.num_cameras):  # the draw order: each Gaussian in front once, farthest first
            browser.execute_script(f"window.viewer.setCamera({c})")
            order = np.array(browser.execute_async_script(  # read as it settles (see _canvas)
                "const done = arguments[0], v = window.viewer; "
                "v.settled().then(() => done(Array.from(v.order.subarray(0, v.instances))))"))
            z = scene.means.astype(np.float64) @ scene.viewmats[c, 2, :3].astype(np.float64) + scene.viewmats[c, 2, 3]
            np.testing.assert_array_equal(np.sort(order), np.flatnonzero(z > 0.01))
            assert np.all(np.diff(z[order]) <= np.ptp(z[order]) / 65535 + 1e-6)  # 16-bit depth keys
        browser.execute_script(f"window.viewer.setCamera({cam})")

        canvas = browser.find_element(By.ID, "canvas")
        ActionChains(browser).drag_and_drop_by_offset(canvas, 25, 0).perform()  # orbit
        moved = np.array(browser.execute_script("return window.viewer.viewmat()")).reshape(4, 4)
        assert np.abs(moved - scene.viewmats[cam]).max() > 1e-3
        assert np.abs(_canvas(browser).astype(int) - shot).mean() > 2


def test_occlusion_culling_leaves_the_frame_as_it_was(browser, tmp_path):
    # 30,000 Gaussians: the page draws them front to back in chunks, culling those behind opaque pixels
    write_scene(tmp_path / "dense.h5", generate_scene(30000, 4, 128, 96, seed=4))
    assert main(["render", "--scene", str(tmp_path / "dense.h5"), "--cameras", "1", "--out", str(tmp_path)]) == 0
    with _viewer(browser, tmp_path / "dense.h5"):
        browser.execute_script("window.viewer.setCamera(1)")
        culled = _canvas(browser)
        browser.execute_script("window.viewer.occlusion = false; window.viewer.frame(true)")
        whole = _canvas(browser)
        assert _psnr(culled, np.asarray(Image.open(tmp_path / "0001.png"))) >= 40
        # what is culled lies behind pixels of transmittance <= ~1.5/255: at most 2 levels of 8 bits
        assert np.abs(culled.astype(int) - whole).max() <= 2


def test_a_view_drawn_whole_is_not_drawn_again_at_motion_quality(browser, scene_file):
    # Within the settle window after a change the viewer still counts as moving, and a slow moving frame may
    # lower its motion quality after the view was already drawn whole: that view must stay as drawn, not be
    # drawn again at the lower resolution. Here the quality drops and the window never ends (lastChange in
    # the future) for 10 animation frames; then the window ends.
    with _viewer(browser, scene_file):
        browser.execute_script("window.viewer.setCamera(0)")
        whole = _canvas(browser)
        drawn, still_whole = browser.execute_async_script(
            "const done = arguments[0], v = window.viewer, before = v.frames; let ticks = 0; "
            "v.quality = 1 / 16; v.lastChange = performance.now() + 1e9; "
            "const tick = () => { if (++ticks < 10) { requestAnimationFrame(tick); return; } "
            "  const result = [v.frames - before, v.drawnVersion === v.viewVersion]; "
            "  v.lastChange = -Infinity; done(result); }; "
            "requestAnimationFrame(tick)")
        assert (drawn, still_whole) == (0, True)
        np.testing.assert_array_equal(_canvas(browser), whole)


def _sh_scene(degree: int, path, seed: int = 5):
    """A scene whose Gaussians have SH of ``degree`` with large band-1 coefficients (strongly view-dependent
    colour); written to ``path``. Returns its SH-3 coefficients [G, 16, 3]."""
    scene = generate_scene(400, 10, 64, 48, seed=2)
    rng = np.random.default_rng(seed)
    sh = np.concatenate([rgb_to_sh0(scene.colors)[:, None], rng.normal(0, 1.0, (scene.num_gaussians, 3, 3)),
                         rng.normal(0, 0.3, (scene.num_gaussians, 12, 3))], axis=1).astype(np.float32)
    write_scene(path, replace(scene, sh=sh[:, :num_bases(degree)], colors=sh0_to_rgb(sh[:, 0])))


def test_viewer_draws_view_dependent_colour_as_pregel_render_does(browser, tmp_path):
    _sh_scene(3, tmp_path / "sh3.h5")
    _sh_scene(0, tmp_path / "sh0.h5")
    cams = (1, 6)
    for name in ("sh3", "sh0"):
        assert main(["render", "--scene", str(tmp_path / f"{name}.h5"), "--cameras", ",".join(map(str, cams)),
                     "--out", str(tmp_path / name)]) == 0
    with _viewer(browser, tmp_path / "sh3.h5"):
        for cam in cams:
            browser.execute_script(f"window.viewer.setCamera({cam})")
            shot = _canvas(browser)
            sh3, sh0 = (np.asarray(Image.open(tmp_path / name / f"{cam:04d}.png")) for name in ("sh3", "sh0"))
            assert _psnr(sh3, sh0) < 16  # the model's colour depends strongly on the view
            assert _psnr(shot, sh3) >= 22


def _shown(driver, element_id: str):
    return driver.execute_script(f"const e = document.getElementById('{element_id}'); return e && e.dataset.value")


def test_dashboard_of_a_finished_odin_run_shows_its_metrics(browser, scene_file, tmp_path):
    out = tmp_path / "t.h5"
    assert main(["train", "--scene", str(scene_file), "--steps", "8", "--eval-every", "4", "--mode", "odin",
                 "--window", "2", "--out", str(out)]) == 0
    trained = read_scene(out)
    proc, address = _start(["view", "--watch", str(tmp_path), "--port", "0"])
    try:
        browser.get(address)
        _until(lambda: _shown(browser, "step") == "8", "the status")
        assert _shown(browser, "state") == "finished"
        assert float(_shown(browser, "loss")) == trained.metrics["loss"][-1]
        assert int(_shown(browser, "gaussians")) == trained.attrs["num_gaussians"]
        psnr = browser.execute_script(
            "return [...document.querySelectorAll('.psnr-value')].map(e => [e.dataset.step, e.dataset.value])")
        assert [(int(s), float(v)) for s, v in psnr] == list(zip(trained.metrics["psnr_steps"], trained.metrics["psnr"]))
        fields = list(trained.attrs["per_rank_fields"])
        for name in ("compute_seconds", "comm_seconds", "wait_seconds", "images"):
            assert float(_shown(browser, f"rank-0-{name}")) == trained.metrics["per_rank"][0][fields.index(name)]
        assert browser.execute_script("return document.getElementById('heldout').naturalWidth") == 2 * 64
    finally:
        _stop(proc)


def test_dashboard_step_count_grows_during_training(browser, tmp_path):
    write_scene(tmp_path / "scene.h5", generate_scene(60, 6, 16, 12, seed=3))
    proc, address = _start(["train", "--scene", str(tmp_path / "scene.h5"), "--steps", "100000",
                            "--eval-every", "50000", "--out", str(tmp_path / "t.h5"), "--dashboard", "0"])
    try:
        browser.get(address)
        first = int(_until(lambda: _shown(browser, "step"), "a first status"))
        later = int(_until(lambda: int(_shown(browser, "step")) > first and _shown(browser, "step"), "a later step"))
        assert first < later < 100000 and _shown(browser, "state") == "running"
    finally:
        _stop(proc)
