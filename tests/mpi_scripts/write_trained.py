"""Write a trained model from rows split over this job's ranks with ``write_trained``.

Usage: mpiexec -n P python -m mpi4py tests/mpi_scripts/write_trained.py FOLDER CASE
FOLDER/model.npz holds the whole model (ids [G], means, scales, quats, opacities, sh0, shN, view, the
split seed); each rank takes the rows that a seeded random assignment gives it (at P = 3 rank 1 gets none),
in a shuffled order, and passes them; rank 0 passes the view. CASE 'ok' writes FOLDER/ok_P.{h5,ply,png};
CASE 'runs' the same from runs of 50 consecutive ids per rank (in turn), one row per block, as runs_P.*;
CASE 'duplicate' repeats one id on the last rank and prints each rank's InputError as "rank R: MESSAGE".
"""
import os
import sys

import numpy as np

from odin_sched.training.outputs import OutputPaths, write_trained
from pregel.comm import Comm
from pregel.errors import InputError
from tests_support import exit_with_collective_error  # noqa: E402  (tests/mpi_scripts is on sys.path)

NAMES = ("means", "scales", "quats", "opacities", "sh0", "shN")


def main(folder, case):
    comm = Comm()
    with np.load(os.path.join(folder, "model.npz")) as z:
        model = {k: z[k] for k in z.files}
    rng = np.random.default_rng(int(model["split_seed"]) + comm.size)
    owner = rng.integers(0, comm.size + 1, len(model["ids"])) % comm.size  # rank 0 gets about twice the rows
    if comm.size == 3:
        owner[owner == 1] = 2  # and rank 1 none
    piece_bytes = int(model["piece_bytes"])
    if case == "runs":  # as a spatial split gives them: runs of 50 consecutive ids a rank, in blocks of 1 row
        owner = (np.argsort(np.argsort(model["ids"])) // 50) % comm.size
        piece_bytes = 1
    mine = rng.permutation(np.flatnonzero(owner == comm.rank))
    ids = model["ids"][mine]
    if case == "duplicate" and comm.rank == comm.size - 1:
        ids = np.concatenate([ids, model["ids"][:1]])
        mine = np.concatenate([mine, [0]])
    name = f"{case}_{comm.size}"
    paths = OutputPaths(os.path.join(folder, f"{name}.h5"), os.path.join(folder, f"{name}.ply"),
                        os.path.join(folder, f"{name}.png"))
    try:
        write_trained(comm, ids, {k: model[k][mine] for k in NAMES}, model["scene"].item(), paths,
                      model["view"] if comm.rank == 0 else None, metrics={"loss": model["loss"]},
                      attrs={"steps": 7, "mode": "test"}, piece_bytes=piece_bytes)
    except InputError as err:
        exit_with_collective_error(comm, err)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
