"""Plan the schedule of every case in FOLDER/cases.npz at this job's size.

Usage: mpiexec -n P python -m mpi4py tests/mpi_scripts/plan_schedules.py FOLDER
A case ``name`` holds ``name/batches`` [S, B], ``name/visible`` [C, K], ``name/image_cost`` [I],
``name/version_cost`` [V], ``name/cell_bytes`` [K], ``name/owner_P`` [K] (the cell owners for P
ranks) and ``name/hop_cost`` [2]. Every rank writes FOLDER/schedule_P_RANK.npz with
``name/{level,priority,rank,phase}`` and ``name/priority_hops`` (the priority planned with the hop
cost), so the test can check that all ranks hold the same schedule.
"""

import os
import sys

import numpy as np

from odin_sched.odin.depgraph import build_step_graph
from odin_sched.odin.schedule import plan_schedule
from pregel.comm import Comm


def plan_cases(comm, cases: dict) -> dict:
    """{name/field: array} for every case of ``cases`` (the arrays of cases.npz) at ``comm.size``."""
    results = {}
    for name in sorted({key.split("/")[0] for key in cases}):
        steps = build_step_graph(cases[f"{name}/batches"], cases[f"{name}/visible"])
        schedule = plan_schedule(comm, steps, cases[f"{name}/image_cost"], cases[f"{name}/cell_bytes"],
                                 cases[f"{name}/owner_{comm.size}"], cases[f"{name}/version_cost"])
        for field in ("level", "priority", "rank", "phase"):
            results[f"{name}/{field}"] = getattr(schedule, field)
        hopping = plan_schedule(comm, steps, cases[f"{name}/image_cost"], cases[f"{name}/cell_bytes"],
                                cases[f"{name}/owner_{comm.size}"], cases[f"{name}/version_cost"],
                                hop_cost=tuple(cases[f"{name}/hop_cost"]))
        results[f"{name}/priority_hops"] = hopping.priority
    return results


def main(folder):
    comm = Comm()
    results = plan_cases(comm, dict(np.load(os.path.join(folder, "cases.npz"))))
    np.savez(os.path.join(folder, f"schedule_{comm.size}_{comm.rank}.npz"), **results)


if __name__ == "__main__":
    main(sys.argv[1])
