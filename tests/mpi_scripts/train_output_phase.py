"""``pregel train ARGS`` in this process with rank 0's writing of the outputs altered, to test that phase.

Usage: mpiexec -n P python tests/mpi_scripts/train_output_phase.py CASE ARGS...

Before rank 0 writes its first block of rows: CASE 'spike' allocates and touches SPIKE_BYTES (then frees
them), 'sleep' sleeps SLEEP_SECONDS, 'input_error' raises an InputError, 'crash' a RuntimeError. At the
end every rank prints one line "rank R: ru_maxrss BYTES output_processor_s S" (the operating system's
peak of this process, and the processor seconds this process used in ``write_outputs``).
"""
import os
import resource
import sys
import time

import numpy as np

import odin_sched.odin.trainer as trainer
from odin_sched.training import outputs
from pregel import cli
from pregel.errors import InputError

SPIKE_BYTES = 192 << 20
SLEEP_SECONDS = 3.0


def main(case: str, args: list) -> int:
    write, seconds = outputs._TrainedFiles.write, []

    def altered(self, rows):
        if self.done == 0:
            if case == "spike":
                np.ones(SPIKE_BYTES // 8).sum()  # every page touched, then freed
            elif case == "sleep":
                time.sleep(SLEEP_SECONDS)
            elif case == "input_error":
                raise InputError.at(self.paths.out, None, "injected problem while writing")
            elif case == "crash":
                raise RuntimeError("injected crash while writing")
        write(self, rows)

    write_outputs = trainer.write_outputs

    def timed(*a, **k):
        t0 = time.process_time()
        try:
            return write_outputs(*a, **k)
        finally:
            seconds.append(time.process_time() - t0)

    outputs._TrainedFiles.write, trainer.write_outputs = altered, timed
    code = cli.main(["train", *args])
    from mpi4py import MPI

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB
    os.write(1, f"rank {MPI.COMM_WORLD.Get_rank()}: ru_maxrss {peak} output_processor_s {sum(seconds):.3f}\n"
             .encode())
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2:]))
