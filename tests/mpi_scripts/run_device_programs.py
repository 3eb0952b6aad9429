"""``pregel run ALGORITHM`` on the host and with ``--device cuda``, for several programs in one
launch (tests/cudasim/test_device_run.py): each launch of the interpreter costs seconds under the
simulator, so the commands run through ``pregel.cli.main`` in one process per rank.

Usage: mpiexec -n P python -m mpi4py tests/mpi_scripts/run_device_programs.py GRAPH OUT ALGORITHM...
writes OUT/<i>-cpu.h5 and OUT/<i>-cuda.h5 for the i-th ALGORITHM.
"""

import sys

from pregel.cli import main

GRAPH, OUT, ALGORITHMS = sys.argv[1], sys.argv[2], sys.argv[3:]
for i, algorithm in enumerate(ALGORITHMS):
    source = ["--source", "3"] if algorithm in ("sssp", "bfs") else []  # only they take it (others refuse it)
    for device in ("cpu", "cuda"):
        status = main(["run", algorithm, "--graph", GRAPH, "--out", f"{OUT}/{i}-{device}.h5", "--quiet",
                       "--device", device, *source])
        assert status == 0, (algorithm, device, status)
