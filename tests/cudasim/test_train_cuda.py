"""``pregel train --device cuda`` under Numba's simulator against ``pregel train --device cpu`` on the
same tiny scene and seed: the Gaussians, their Adam state and the images are "device" tensors (CPU
tensors under the simulator), and the rasterizer runs its CUDA kernels on them (through
``kernels._device.across``, counted here), with and without densification. The CPU and CUDA kernels
are each tested against the torch reference elsewhere; here the CPU trainer is the oracle of the
whole device trainer.
"""
import importlib

import h5py
import numpy as np
import pytest

from pregel.cli import main

render_module = importlib.import_module("kernels.splat.render")  # the module, not the function
PARAMS = ("means", "scales", "quats", "opacities", "colors", "sh")
# a round after step 2 of 3 (image 2: past --densify-from, before --densify-until; never after the last step)
DENSIFY = ["--densify", "--densify-from", "1", "--densify-interval", "1", "--densify-until", "3",
           "--densify-grad-threshold", "1e-6"]


def train(scene, out, device, extra, monkeypatch):
    """Run ``pregel train`` in this process; returns (trained file, calls of the rasterizer's ``across``)."""
    calls = []
    across = render_module.across

    def counted(value):
        calls.append(type(value).__name__)
        return across(value)

    with monkeypatch.context() as patch:
        patch.setattr(render_module, "across", counted)
        assert main(["train", "--scene", str(scene), "--steps", "3", "--eval-every", "3", "--seed", "4",
                     "--out", str(out), "--device", device, *extra]) == 0
    return h5py.File(out), len(calls)


@pytest.mark.parametrize("densify", [False, True], ids=["plain", "densify"])
def test_device_training_equals_the_cpu_run(tiny_scene, tmp_path, monkeypatch, densify):
    extra = DENSIFY if densify else ["--no-densify"]
    cpu, cpu_crossings = train(tiny_scene, tmp_path / "cpu.h5", "cpu", extra, monkeypatch)
    cuda, cuda_crossings = train(tiny_scene, tmp_path / "cuda.h5", "cuda", extra, monkeypatch)
    assert cpu_crossings == 0 and cuda_crossings > 0  # the device run's kernels ran on device arrays
    assert cpu.attrs["device"] == "cpu" and cuda.attrs["device"] == "cuda"
    assert cuda.attrs["num_gaussians"] == cpu.attrs["num_gaussians"]
    assert (cpu.attrs["num_gaussians"] > 40) == densify
    for name in PARAMS:
        np.testing.assert_allclose(cuda[f"gaussians/{name}"][()], cpu[f"gaussians/{name}"][()], rtol=1e-5,
                                   atol=1e-7, err_msg=name)
    np.testing.assert_allclose(cuda["metrics/loss"][()], cpu["metrics/loss"][()], rtol=1e-5)
    np.testing.assert_allclose(cuda["metrics/psnr"][()], cpu["metrics/psnr"][()], rtol=1e-5)
    assert (tmp_path / "cuda.png").exists()
