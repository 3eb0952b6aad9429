"""CUDA-simulator tests: refuse to run without the simulator instead of silently passing."""
import os

import pytest


def pytest_configure(config):
    if os.environ.get("NUMBA_ENABLE_CUDASIM") != "1":
        raise pytest.UsageError("tests/cudasim needs NUMBA_ENABLE_CUDASIM=1 (make test sets it)")
