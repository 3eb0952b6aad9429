"""Train with the distributed trainer, recording which images each rank reads from the scene file.

Usage: mpiexec -n P python -m mpi4py tests/mpi_scripts/count_image_reads.py SCENE FOLDER
Trains SCENE (6 steps, batch 2, windows of 2, held-out evaluation at the end) and writes
FOLDER/reads-P-RANK.json: the cameras this rank read (in order), the cameras its windows assigned it
(from each window's plan, by a plain loop over the images), the most images it held at once and the
most cameras any one of its windows assigned it, and whether it held only its window's after each one.
"""
import json
import os
import sys

import odin_sched.odin.trainer as trainer
from odin_sched.odin.options import OdinOptions
from odin_sched.odin.trainer import train_distributed
from odin_sched.scenes.scene_io import SceneImages
from odin_sched.training.config import TrainConfig
from pregel.comm import Comm

record = {"read": [], "assigned": [], "largest_window": 0, "held_only_window": True}
read_image = SceneImages.__getitem__
run_window = trainer.DistributedTrainer._run_window


def counted_read(self, cam):
    record["read"].append(int(cam))
    return read_image(self, cam)


def recorded_window(self, window, reported=False):
    steps, rank = window.steps, self.comm.rank
    mine = {int(steps.image_camera[i]) for i in range(steps.num_images) if int(window.plan.rank[i]) == rank}
    losses = run_window(self, window, reported)
    record["assigned"] += sorted(mine)
    record["largest_window"] = max(record["largest_window"], len(mine))
    record["held_only_window"] &= set(self.setup.targets.held) <= mine
    return losses


SceneImages.__getitem__ = counted_read
trainer.DistributedTrainer._run_window = recorded_window


def main(scene, folder):
    comm = Comm()
    config = TrainConfig(scene, 6, os.path.join(folder, f"out-{comm.size}.h5"), batch_size=2, eval_every=6,
                         progress=False, densify=None)
    original = trainer.DistributedTrainer.run

    def run(self):
        result = original(self)
        record["peak"] = self.setup.targets.peak
        return result

    trainer.DistributedTrainer.run = run
    train_distributed(comm, config, OdinOptions(window=2, cells=6))
    with open(os.path.join(folder, f"reads-{comm.size}-{comm.rank}.json"), "w") as f:
        json.dump(record, f)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
