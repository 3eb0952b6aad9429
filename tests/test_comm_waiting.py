"""How ranks wait (pregel.comm): inside MPI when each has a processor, asleep between looks when the
ranks outnumber the processors, so that waiting ranks leave the processors to computing ones.

Oracle: the launcher's rank count on the node against ``os.sched_getaffinity``, and the processor
time that waiting ranks actually used (``time.process_time``) while one rank computed.
"""
import json
import os
import shutil
import subprocess
import sys

import pytest

from pregel.comm import ranks_outnumber_cores

SCRIPT = os.path.join(os.path.dirname(__file__), "mpi_scripts", "wait_cpu.py")
MPIEXEC = shutil.which("mpiexec", path=os.path.dirname(sys.executable)) or "mpiexec"
CORES = len(os.sched_getaffinity(0))


@pytest.mark.parametrize("variable", ["MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE"])
def test_ranks_outnumber_cores_reads_the_launchers_count(monkeypatch, variable):
    for name in ("MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE"):
        monkeypatch.delenv(name, raising=False)
    assert not ranks_outnumber_cores()  # no launcher: MPI's own waiting
    monkeypatch.setenv(variable, str(CORES))
    assert not ranks_outnumber_cores()
    monkeypatch.setenv(variable, str(CORES + 1))
    assert ranks_outnumber_cores()


@pytest.mark.parametrize("size", sorted({2, CORES + 1}))
def test_waiting_ranks_sleep_only_when_they_outnumber_the_cores(size):
    out = subprocess.run([MPIEXEC, "-n", str(size), sys.executable, SCRIPT], capture_output=True, text=True,
                         timeout=120, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["values"] == list(range(size))
    assert report["shares_cores"] == (size > CORES)
    if size > CORES:
        # asleep between looks: far less processor time than wall time (MPI's own loop uses it all)
        assert max(report["waiter_cpu_fraction"]) < 0.5
    else:
        assert min(report["waiter_cpu_fraction"]) > 0.5  # polling inside MPI: a processor each
