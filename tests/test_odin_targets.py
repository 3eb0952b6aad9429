"""A distributed rank reads from the scene file only the images of the cameras its windows assign it
(and the held-out views it evaluates), one at a time, and holds at most one window's images: counted
by a counter around the reader at P = 2 and 3, against each window's plan. (That the results stay the
single process's bit for bit is tests/test_odin.py's.)"""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from odin_sched.scenes.scene_gen import generate_scene
from odin_sched.scenes.scene_io import heldout_mask, write_scene

MPIEXEC = shutil.which("mpiexec", path=os.path.dirname(sys.executable)) or "mpiexec"
SCRIPT = os.path.join(os.path.dirname(__file__), "mpi_scripts", "count_image_reads.py")
CAMERAS = 40


@pytest.fixture(scope="module")
def scene(tmp_path_factory):
    path = tmp_path_factory.mktemp("targets") / "s.h5"
    generated = generate_scene(300, CAMERAS, 32, 24, seed=2, layout="city")
    write_scene(path, generated)
    return path, np.flatnonzero(heldout_mask(generated))


@pytest.mark.parametrize("size", [2, 3])
def test_each_rank_reads_only_the_images_assigned_to_it(scene, tmp_path, size):
    path, test_ids = scene
    subprocess.run([MPIEXEC, "-n", str(size), sys.executable, "-m", "mpi4py", SCRIPT, str(path), str(tmp_path)],
                   check=True, timeout=300, env=dict(os.environ, OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1"),
                   capture_output=True)
    everyone = set()
    for rank in range(size):
        rec = json.loads((tmp_path / f"reads-{size}-{rank}.json").read_text())
        evaluated = {int(c) for t, c in enumerate(test_ids) if t % size == rank}  # views t go to rank t mod P
        read, assigned = rec["read"], set(rec["assigned"])
        assert set(read) <= assigned | evaluated, (rank, sorted(set(read) - assigned - evaluated))
        assert assigned <= set(read)  # every image it rendered was read by it
        # 3 windows of 2 batches: an image is read again only in a later window (at most once per window)
        assert len(read) <= len(rec["assigned"]) + len(evaluated)
        assert rec["held_only_window"] and rec["peak"] <= rec["largest_window"] <= 4
        assert len(set(read)) < CAMERAS
        everyone |= assigned
    assert len(everyone) >= 6  # the images of 6 batches of 2 were read by the ranks that render them


def test_lazy_images_are_the_scene_files_and_convert_as_the_whole_array_does(scene):
    """``read_scene(..., lazy_images=True)`` leaves the images on disk; a camera's image read alone equals
    that camera of the eagerly read array, and ``Targets`` converts it to the same float32 numbers as
    converting the whole array at once (the earlier trainers' way)."""
    import torch

    from odin_sched.scenes.scene_io import read_scene
    from odin_sched.training.targets import Targets

    path, _ = scene
    eager, lazy = read_scene(path), read_scene(path, lazy_images=True)
    assert lazy.images.reads == 0 and lazy.images.shape == eager.images.shape
    whole = torch.from_numpy(eager.images).float() / 255.0
    targets = Targets(lazy.images)
    targets.keep([3, 5])
    for cam in (5, 0, 3, 5):
        assert np.array_equal(lazy.images[cam], eager.images[cam])
        assert torch.equal(targets[cam], whole[cam])
    assert sorted(targets.held) == [3, 5] and lazy.images.reads == 4 + 3  # 5 is held after its first read
