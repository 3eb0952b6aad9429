"""Processor time of waiting ranks: how much of a processor a rank uses while it waits for a message.

    mpiexec -n P .venv/bin/python benchmarks/comm_waiting.py

Rank 0 computes (spins) for a while, then sends to every rank; the others wait in
``Comm.waitsome``, then meet at a barrier and in an allgather while rank 0 spins again. Prints, from
rank 0, JSON {shares_cores, cores, waiter_cpu_fraction: [processor seconds / wall seconds of each
waiting rank], values: [what the allgather gathered]}. Expected: near 1 where each rank has a processor
(MPI's own waiting polls), far below 0.5 where the ranks outnumber the processors (asleep between
looks); the figures depend on how busy the machine is, so they are measured here, not asserted in a
test (tests/test_comm_waiting.py checks which wait is chosen)."""
import json
import os
import time

import numpy as np

from pregel.comm import Comm

SPIN = 0.4


def spin(seconds):
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


comm = Comm()
comm.barrier()
wall, cpu = time.perf_counter(), time.process_time()
if comm.rank == 0:
    spin(SPIN)
    requests = [comm.isend(np.full(4, 7.0, np.float32), dest, 1) for dest in range(1, comm.size)]
    comm.waitall(requests)
    spin(SPIN)
else:
    buffer = np.zeros(4, np.float32)
    request = comm.irecv(buffer, 0, 1)
    while not comm.waitsome([request]):
        pass
comm.barrier()
values = comm.allgather(comm.rank)
fraction = (time.process_time() - cpu) / (time.perf_counter() - wall)
fractions = comm.allgather(fraction)
if comm.rank == 0:
    print(json.dumps({"shares_cores": comm.shares_cores, "cores": len(os.sched_getaffinity(0)),
                      "waiter_cpu_fraction": fractions[1:], "values": values}))
