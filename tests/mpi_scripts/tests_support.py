"""Settings and helpers shared by MPI tests and the scripts they launch (tests/mpi_scripts is on their path)."""
import os

from odin_sched.training.densify import DensifyConfig


def densify_config(case: dict):
    """The densification of a test case: every 3 batches from batch 3, low threshold (so it happens)."""
    if not case["densify"]:
        return None
    return DensifyConfig(interval=3, start=3, stop=case["steps"], grad_threshold=1e-5)


def exit_with_collective_error(comm, err) -> None:
    """An MPI script's end on a collective InputError (raised on every rank): print it as "rank R:
    MESSAGE", wait until every rank has printed, exit with status 2."""
    os.write(1, f"rank {comm.rank}: {err}\n".encode())  # one write, so mpiexec never splits or joins it
    comm.barrier()
    raise SystemExit(2)


def the_error_of_every_rank(stdout: str, size: int) -> str:
    """The one message that every rank of a job of ``size`` printed with ``exit_with_collective_error``
    (asserting that each rank printed it once and that they agree)."""
    lines = sorted(line for line in stdout.splitlines() if line.startswith("rank "))
    assert [line.split(":")[0] for line in lines] == [f"rank {r}" for r in range(size)], stdout
    messages = {line.split(": ", 1)[1] for line in lines}
    assert len(messages) == 1, messages
    return messages.pop()
