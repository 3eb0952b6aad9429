"""Numba's start-up without SciPy's linear algebra.

The first compiled (or cache-loaded) function makes numba load its NumPy support, whose module
``numba.np.arraymath`` checks at import whether BLAS is there by importing ``scipy.linalg``: about
0.3 s of a process's start-up (and more under load), for a flag that only ``np.correlate`` and
``np.convolve`` read (they then use a plain loop). ``import_numba_numpy_support`` imports that module
with the check answered "no BLAS"; ``np.dot`` and ``np.linalg`` in a kernel still import SciPy's BLAS
when they are compiled.
"""

import sys

_BLAS = "scipy.linalg.cython_blas"


def import_numba_numpy_support() -> None:
    """Import ``numba.np.arraymath`` with its BLAS check skipped (a no-op once it or SciPy's BLAS
    is imported)."""
    if "numba.np.arraymath" in sys.modules or _BLAS in sys.modules:
        return
    sys.modules[_BLAS] = None  # this import raises ImportError for the check alone
    try:
        import numba.np.arraymath  # noqa: F401
    finally:
        del sys.modules[_BLAS]
