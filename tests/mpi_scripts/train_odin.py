"""Train every case of a test on this job's ranks with the distributed trainer.

Usage: mpiexec -n P python -m mpi4py tests/mpi_scripts/train_odin.py FOLDER MODE
FOLDER/cases.json lists the cases: {name: {scene, steps, batch_size, densify (bool), cells, window,
sh_interval (images per SH degree, optional)}} (cells and window may be null: the defaults; an optional
init_ply starts from that PLY, read ply_chunk_rows vertex records at a time when given; an optional
batches_ahead and hold_share set those of ``OdinOptions``, except in barrier mode, which refuses them).
Each case is trained with ``odin_sched.odin.trainer.train_distributed`` in MODE (odin or barrier; odin+send-thread:
odin with its messages posted by a thread of their own, ``OdinOptions.send_thread``) and written to
FOLDER/NAME_MODE_P.h5, so the test can compare it with the single-process run of the same case.
No case may bring the whole model onto a rank (``Shard.gather`` raises here): densification rounds run
on each owner's Gaussians, the outputs are streamed from the owners.
"""
import json
import os
import sys

from odin_sched.odin.options import OdinOptions
from odin_sched.odin.shard import Shard
from odin_sched.odin.trainer import train_distributed
from odin_sched.training.config import TrainConfig
import odin_sched.scenes.ply
import odin_sched.scenes.sh
from pregel.comm import Comm
from tests_support import densify_config  # noqa: E402  (tests/mpi_scripts is on sys.path)

SH_DEGREE_INTERVAL = odin_sched.scenes.sh.SH_DEGREE_INTERVAL  # the reference's, unless a case sets its own
CHUNK_ROWS = odin_sched.scenes.ply.CHUNK_ROWS


def never_gathered(*args, **kwargs):
    raise AssertionError("the whole model was gathered onto a rank")


def main(folder, mode):
    comm = Comm()
    Shard.gather = never_gathered
    with open(os.path.join(folder, "cases.json")) as f:
        cases = json.load(f)
    for name, case in sorted(cases.items()):
        out = os.path.join(folder, f"{name}_{mode}_{comm.size}.h5")
        gate = {} if mode == "barrier" else {k: case[k] for k in ("batches_ahead", "hold_share") if k in case}
        options = OdinOptions(mode=mode.split("+")[0], cells=case["cells"],
                              window=case["window"] or OdinOptions.window, split_above=case.get("split_above"),
                              max_imbalance=case.get("max_imbalance", OdinOptions.max_imbalance),
                              send_thread=mode.endswith("+send-thread"), **gate)
        odin_sched.scenes.sh.SH_DEGREE_INTERVAL = case.get("sh_interval", SH_DEGREE_INTERVAL)
        odin_sched.scenes.ply.CHUNK_ROWS = case.get("ply_chunk_rows", CHUNK_ROWS)
        config = TrainConfig(case["scene"], case["steps"], out, seed=case["seed"], ssim_weight=0.2,
                             densify=densify_config(case), eval_every=case["steps"], batch_size=case["batch_size"],
                             progress=False, init_ply=case.get("init_ply"))
        train_distributed(comm, config, options)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
