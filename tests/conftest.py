"""Test-suite wiring.

CUDA kernels are tested on the CPU under Numba's simulator, which must be switched on before
``numba.cuda`` is first imported; so ``tests/cudasim`` runs as its own pytest invocation with
``NUMBA_ENABLE_CUDASIM=1`` (``make test`` does both runs) and is left out of the plain run. On a
machine with a GPU the same tests run on the real device with ``PREGEL_REAL_GPU=1``.
"""
import os

import pytest

if os.environ.get("NUMBA_ENABLE_CUDASIM") != "1" and os.environ.get("PREGEL_REAL_GPU") != "1":
    collect_ignore = ["cudasim"]


@pytest.fixture(scope="module")
def tiny_scene(tmp_path_factory):
    """A generated scene file for the device trainer's tests: 3 cameras at 16 x 16 (one held out)
    and 40 initial points, quick enough for Numba's CUDA simulator."""
    from odin_sched.scenes.scene_gen import generate_scene
    from odin_sched.scenes.scene_io import write_scene

    path = tmp_path_factory.mktemp("tiny_scene") / "scene.h5"
    write_scene(path, generate_scene(80, 3, 16, 16, seed=1))
    return path
