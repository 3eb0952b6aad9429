"""Save and restore a row-sharded checkpoint on this job's ranks.

Usage: mpiexec -n P python -m mpi4py tests/mpi_scripts/sharded_checkpoint.py FOLDER save|restore
save: every rank takes the rows of ``model(...)`` whose cell it owns (cell % P == rank) and writes them
with the global values into FOLDER/ckpt (step 12). restore: every rank reads FOLDER/ckpt keeping the rows
of its cells (cell % P == rank), 700 bytes of rows at a time, and writes them to FOLDER/restored-P-RANK.npz
(with the global values); an InputError is printed as "rank R: MESSAGE" (exit 2).
"""
import os
import sys

import numpy as np

from pregel.comm import Comm
from pregel.errors import InputError
from tests_support import exit_with_collective_error  # noqa: E402  (tests/mpi_scripts is on sys.path)
from pregel.sharded_checkpoint import ShardedCheckpointer

IDENTITY = {"job": {"test": "sharded"}}


def model(rows: int = 500) -> dict:
    """The whole table: ids, cells, parameters, Adam moments, step counts and accumulators."""
    rng = np.random.default_rng(0)
    return {"ids": rng.choice(2 ** 60, rows, replace=False).astype(np.int64),
            "cell": rng.integers(0, 11, rows).astype(np.int32),
            "params": rng.normal(size=(rows, 14)).astype(np.float32),
            "exp_avg": rng.normal(size=(rows, 14)).astype(np.float32),
            "exp_avg_sq": rng.uniform(size=(rows, 2, 7)).astype(np.float32),
            "step_count": rng.integers(0, 99, rows).astype(np.int64),
            "accum_total": rng.uniform(size=rows).astype(np.float32)}


SCALARS = {"losses": np.linspace(0.0, 1.0, 12), "safety": np.array(2.0)}


def main(folder, action):
    comm = Comm()
    directory = os.path.join(folder, "ckpt")
    try:
        if action == "save":
            table = model()
            mine = table["cell"] % comm.size == comm.rank
            checkpointer = ShardedCheckpointer(comm, IDENTITY, directory, every=1)
            checkpointer.save_rows(12, {k: v[mine] for k, v in table.items()}, SCALARS, {"note": "test"})
        else:
            checkpointer = ShardedCheckpointer(comm, IDENTITY, resume=directory)
            rows, scalars = checkpointer.load_rows(lambda small: small["cell"] % comm.size == comm.rank,
                                                   keys=("cell",), chunk_bytes=700)
            np.savez(os.path.join(folder, f"restored-{comm.size}-{comm.rank}.npz"), **rows,
                     **{f"scalar_{k}": v for k, v in scalars.items()})
    except InputError as err:
        exit_with_collective_error(comm, err)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
