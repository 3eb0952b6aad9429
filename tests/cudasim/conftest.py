"""CUDA kernel tests: under Numba's simulator (``NUMBA_ENABLE_CUDASIM=1``, what ``make test`` does on
machines without a GPU) or on a real GPU (``PREGEL_REAL_GPU=1``). Without either they refuse to run
rather than silently pass."""
import os

import pytest


def pytest_configure(config):
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        return
    if os.environ.get("PREGEL_REAL_GPU") == "1":
        from numba import cuda

        if not cuda.is_available():
            raise pytest.UsageError("PREGEL_REAL_GPU=1 but numba.cuda finds no GPU")
        return
    raise pytest.UsageError("tests/cudasim needs NUMBA_ENABLE_CUDASIM=1 (make test sets it) "
                            "or PREGEL_REAL_GPU=1 on a machine with a GPU")
