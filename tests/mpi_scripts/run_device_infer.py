"""``pregel infer`` on the host and with ``--device cuda``, for several models in one launch
(tests/cudasim/test_device_infer.py): each launch of the interpreter costs seconds under the
simulator, so the commands run through ``pregel.cli.main`` in one process per rank.

Usage: mpiexec -n P python -m mpi4py tests/mpi_scripts/run_device_infer.py GRAPH OUT MODEL.pt...
writes OUT/<i>-cpu.h5 and OUT/<i>-cuda.h5 (with /layers) for the i-th MODEL.
"""

import sys

from pregel.cli import main

GRAPH, OUT, MODELS = sys.argv[1], sys.argv[2], sys.argv[3:]
for i, model in enumerate(MODELS):
    for device in ("cpu", "cuda"):
        status = main(["infer", "--graph", GRAPH, "--model", model, "--out", f"{OUT}/{i}-{device}.h5", "--quiet",
                       "--layer-outputs", "--device", device])
        assert status == 0, (model, device, status)
