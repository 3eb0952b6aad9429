"""The distributed trainer closes its scene file on every rank, whether the run ends well or fails.

Usage: mpiexec -n P python -m mpi4py tests/mpi_scripts/scene_closed.py SCENE FOLDER
Trains SCENE twice with ``train_distributed``: once to the end, once failing on every rank after
training (its ``write_outputs`` raises). Each time the set-up, with the scene's images, is kept alive
(as the traceback of a failed run keeps it), so the file is closed by the trainer, not when the images
are collected. Then every rank in turn must be able to open SCENE for writing, which HDF5 refuses while
any process still has it open for reading. Prints "ok P" on each rank.
"""
import sys

import h5py

import odin_sched.odin.trainer as trainer
from odin_sched.odin.options import OdinOptions
from odin_sched.odin.trainer import train_distributed
from odin_sched.training.config import TrainConfig
from pregel.comm import Comm


def writable_on_every_rank(comm, scene) -> bool:
    """Whether every rank, one after another, opens ``scene`` for writing (once every rank got here)."""
    ok = True
    comm.barrier()
    for rank in range(comm.size):
        if rank == comm.rank:
            try:
                h5py.File(scene, "r+").close()
            except OSError:
                ok = False
        comm.barrier()
    return all(comm.allgather(ok))


def main(scene, folder):
    comm = Comm()
    kept, set_up, write_outputs = [], trainer.set_up, trainer.write_outputs

    def keeping(*args, **kwargs):
        kept.append(set_up(*args, **kwargs))
        return kept[-1]

    def failing(*args, **kwargs):
        raise RuntimeError("writing failed")

    trainer.set_up = keeping
    assert writable_on_every_rank(comm, scene)
    for fails in (False, True):
        trainer.write_outputs = failing if fails else write_outputs
        config = TrainConfig(scene, 4, f"{folder}/closed_{fails}_{comm.size}.h5", seed=0, eval_every=4,
                             batch_size=3, progress=False)
        try:
            train_distributed(comm, config, OdinOptions(cells=4, window=2))
            assert not fails
        except RuntimeError as err:
            assert fails and str(err) == "writing failed"
        assert kept[-1][0].scene.images.reads > 0
        assert writable_on_every_rank(comm, scene), fails
    sys.stdout.write(f"ok {comm.size}\n")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
