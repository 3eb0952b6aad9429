"""``mpiexec -n P pregel train --device cuda`` (the distributed trainer on every rank's GPU) under Numba's
simulator (on a GPU with ``PREGEL_REAL_GPU=1``: the launched ranks run as this process does), against two
oracles on the same tiny scene, seed and batch size:

* the single-process ``pregel train --device cuda`` (the distributed trainer's own contract: it equals
  the single process with the same batch size). Not bit for bit: the rasterizer's CUDA backward adds
  each pixel's contribution to a Gaussian's gradient with float32 atomics whose order is not fixed
  (the threads of a block race, on a GPU and under the simulator's Python threads), so two runs of
  the single-process device trainer differ in the last bits too. Adam turns those into parameter
  differences of about 1e-7 relative; the test allows 1e-6;
* the distributed trainer on the CPU (``--device cpu``, the same P), within 1e-5 relative.

At P = 2 in modes odin (with a timeline) and barrier; every payload crosses ranks through host
buffers, so the file says ``cuda_aware_mpi`` False and ``bytes_staged`` > 0. Not at P = 3: three ranks
on a 2-core machine, each simulating CUDA threads as Python threads, took 13 s in one run and 118 s
in another (the simulated threads hand the GIL to each other at every barrier of a kernel); the
trainer's P = 3 schedule is covered on the CPU (tests/test_odin.py).
"""
import json
import os
import shutil
import subprocess
import sys

import h5py
import numpy as np
import pytest

from pregel.cli import main

BIN = os.path.dirname(sys.executable)
PARAMS = ("means", "scales", "quats", "opacities", "colors", "sh")
STEPS, BATCH = 2, 2


def options(scene, out, device, extra=()):
    return ["train", "--scene", str(scene), "--steps", str(STEPS), "--batch-size", str(BATCH), "--eval-every",
            str(STEPS), "--seed", "3", "--out", str(out), "--device", device, *extra]


def launch(ranks, args):
    """``mpiexec -n ranks pregel ARGS`` on the simulator or the GPU, as this process; returns the finished
    process."""
    environment = dict(os.environ, OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1")
    result = subprocess.run([shutil.which("mpiexec", path=BIN), "-n", str(ranks), shutil.which("pregel", path=BIN),
                             *args], capture_output=True, text=True, timeout=300, env=environment)
    assert result.returncode == 0, result.stderr
    return result


@pytest.fixture(scope="module")
def single(tiny_scene, tmp_path_factory):
    """The oracle: the single-process device trainer, run in this process."""
    out = tmp_path_factory.mktemp("single") / "single.h5"
    assert main(options(tiny_scene, out, "cuda")) == 0
    return h5py.File(out)


@pytest.fixture(scope="module")
def cpu_distributed(tiny_scene, tmp_path_factory):
    """Oracle per P: the distributed trainer on the CPU, mode odin."""
    folder = tmp_path_factory.mktemp("cpu")
    runs = {}

    def run(ranks):
        if ranks not in runs:
            out = folder / f"cpu_{ranks}.h5"
            launch(ranks, options(tiny_scene, out, "cpu", ["--mode", "odin"]))
            runs[ranks] = h5py.File(out)
        return runs[ranks]
    return run


@pytest.mark.parametrize("ranks, mode", [(2, "odin"), (2, "barrier")])
def test_distributed_device_training_equals_the_single_process(tiny_scene, tmp_path, single, cpu_distributed,
                                                               ranks, mode):
    out, trace = tmp_path / "gpu.h5", tmp_path / "trace.json"
    launch(ranks, options(tiny_scene, out, "cuda", ["--mode", mode, "--timeline", str(trace)]))
    got, cpu = h5py.File(out), cpu_distributed(ranks)
    assert got.attrs["device"] == "cuda" and got.attrs["mode"] == mode and got.attrs["ranks"] == ranks
    assert not got.attrs["cuda_aware_mpi"] and got.attrs["bytes_staged"] > 0
    assert got.attrs["visibility_violations"] == 0
    assert cpu.attrs["device"] == "cpu" and "bytes_staged" not in cpu.attrs
    for name in PARAMS:
        value = got[f"gaussians/{name}"][()]
        np.testing.assert_allclose(value, single[f"gaussians/{name}"][()], rtol=1e-6, atol=1e-7, err_msg=name)
        np.testing.assert_allclose(value, cpu[f"gaussians/{name}"][()], rtol=1e-5, atol=1e-7, err_msg=name)
    np.testing.assert_allclose(got["metrics/loss"][()], single["metrics/loss"][()], rtol=1e-6)
    with open(trace) as f:  # every rank's spans (one row per rank)
        assert {event["tid"] for event in json.load(f)["traceEvents"] if event["ph"] == "X"} == set(range(ranks))
