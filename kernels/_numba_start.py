"""Numba's start-up without what a run of cached kernels does not use.

Loading the first kernel from numba's disk cache used to cost about 0.1 s of every command:

* Before loading a cached kernel, numba refreshes its typing and lowering registries: it imports about
  40 modules of its own (typed containers, random generators, datetimes, polynomials, ...) and
  installs every implementation they register, 0.06 s and more under load. A cached kernel is machine
  code that needs only numba's runtime (NRT) to run. ``start`` makes a cache load initialise the runtime
  alone; a cache miss still compiles as before (numba's compiler refreshes the registries itself).
* The NumPy support those registries import, ``numba.np.arraymath``, checks at import whether BLAS is
  there by importing ``scipy.linalg``: about 0.3 s, for a flag that only ``np.correlate`` and
  ``np.convolve`` read (they then use a plain loop). Before a compile, ``start``'s loader imports that
  module with the check answered "no BLAS"; ``np.dot`` and ``np.linalg`` in a kernel still import
  SciPy's BLAS when they are compiled.
"""

import sys

_BLAS = "scipy.linalg.cython_blas"
_started = False


def start() -> None:
    """Have numba load cached kernels without its registries, and compile (a cache miss) without
    SciPy's BLAS check; idempotent. Where numba's cache loader is not the one this knows (another
    numba version), loading stays as numba does it and only the BLAS check is skipped, at once."""
    global _started
    if _started:
        return
    _started = True
    from numba.core import caching
    from numba.core.runtime import rtsys

    load = getattr(caching.Cache, "_load_overload", None)
    if load is None or not hasattr(rtsys, "initialize"):
        import_numba_numpy_support()
        return

    def load_overload(self, sig, target_context):
        """Numba's ``Cache.load_overload`` without its registry refresh: the kernel's machine code
        from the cache (None on a miss, after which numba compiles it)."""
        rtsys.initialize(target_context)
        cached = load(self, sig, target_context)
        if cached is None:
            import_numba_numpy_support()
        return cached

    caching.Cache.load_overload = load_overload


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
