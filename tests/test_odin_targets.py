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


def test_one_process_reads_its_batches_images_and_holds_at_most_one_batch(scene, tmp_path, monkeypatch):
    """The single-process trainer leaves the images on disk too: it reads a training camera's image only
    for a batch that renders it (at most once per batch), a held-out one only to evaluate, and never
    holds more than a batch's images at once (counted around the reader and the image cache)."""
    from odin_sched.scenes.scene_io import SceneImages
    from odin_sched.training.config import TrainConfig
    from odin_sched.training.image_order import BatchOrder
    from odin_sched.training.targets import Targets
    from odin_sched.training.train import train

    path, test_ids = scene
    read, caches = [], []
    read_image, make_cache = SceneImages.__getitem__, Targets.__init__

    def counted_read(self, cam):
        read.append(int(cam))
        return read_image(self, cam)

    def recorded_cache(self, *args, **kwargs):
        make_cache(self, *args, **kwargs)
        caches.append(self)

    monkeypatch.setattr(SceneImages, "__getitem__", counted_read)
    monkeypatch.setattr(Targets, "__init__", recorded_cache)
    steps, batch = 6, 3
    train(TrainConfig(path, steps, tmp_path / "one.h5", batch_size=batch, seed=4, eval_every=3, progress=False,
                      densify=None, image_order="shuffled"))
    train_ids = np.setdiff1d(np.arange(CAMERAS), test_ids)
    batches = BatchOrder(train_ids, steps, batch, 4)  # the shuffled order
    rendered = [int(c) for s in range(steps) for c in batches[s]]
    training_reads = [c for c in read if c not in set(test_ids.tolist())]
    assert set(training_reads) == set(rendered)
    assert len(training_reads) <= len(rendered)
    # two evaluations (steps 3 and 6) of every held-out view (the PNG's ground truth is read by the writer)
    assert len(read) - len(training_reads) == 2 * len(test_ids)
    assert max(cache.peak for cache in caches) <= batch
