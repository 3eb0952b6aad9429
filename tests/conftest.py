"""Test-suite wiring.

CUDA kernels are tested on the CPU under Numba's simulator, which must be switched on before
``numba.cuda`` is first imported; so ``tests/cudasim`` runs as its own pytest invocation with
``NUMBA_ENABLE_CUDASIM=1`` (``make test`` does both runs) and is left out of the plain run. On a
machine with a GPU the same tests run on the real device with ``PREGEL_REAL_GPU=1``.
"""
import os

if os.environ.get("NUMBA_ENABLE_CUDASIM") != "1" and os.environ.get("PREGEL_REAL_GPU") != "1":
    collect_ignore = ["cudasim"]
