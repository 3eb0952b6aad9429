"""Keeping freed memory in the process, so that each superstep reuses pages instead of faulting in new ones.

glibc returns every freed block over its ``mmap`` threshold (128 KiB, raised at run time up to 32 MiB)
to the kernel at once, and trims the heap top past ``M_TRIM_THRESHOLD``. A superstep allocates
arrays of megabytes (message values, the gathered rows, the program's temporaries) and frees them
at its end; handed back and asked for again, each page costs a page fault and zeroing. On a 1M-vertex
graph that made the first PageRank superstep about 15 ms (30 %) slower than the next ones. With both
thresholds raised (``keep_freed_memory``), freed blocks stay in the heap and are reused.

The graph load is the exception (``returning_freed_memory``): its temporaries (edge arrays, sort
orders, exchange buffers) are each freed once and never asked for again, and kept, they left holes
that its later arrays of other sizes did not fit, so the heap grew past what was ever live at once
(PageRank at 10M vertices / 100M edges, P = 2: a peak of 1.60-1.65 GB a rank, against 1.25-1.44 GB
with the load's blocks handed back as they were freed, measured).
"""

import ctypes
import ctypes.util
import os
import resource
import sys
from contextlib import contextmanager

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
#: blocks up to this size come from the heap (glibc's largest allowed mmap threshold on 64-bit)
HEAP_BLOCK_LIMIT = 1 << 30
#: the heap top kept when freed blocks are kept: 2**31 - 1 (2 GiB), the largest int mallopt takes
_KEPT_TOP = 2**31 - 1
#: while freed blocks are handed back: glibc's own starting thresholds (128 KiB) for both
_RETURN_ABOVE = 128 << 10
_keeping = False  # whether keep_freed_memory is in force


def _set_thresholds(mmap_threshold: int, trim_threshold: int) -> bool:
    """Set glibc's mmap and trim thresholds (bytes); False where the C library is not glibc."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, mmap_threshold)) and bool(mallopt(_M_TRIM_THRESHOLD, trim_threshold))


def keep_freed_memory() -> bool:
    """Ask glibc to keep freed blocks for reuse; returns False where the C library is not glibc
    (nothing changes there)."""
    global _keeping
    _keeping = _set_thresholds(HEAP_BLOCK_LIMIT, _KEPT_TOP)
    return _keeping


@contextmanager
def returning_freed_memory():
    """Around a phase whose large arrays are each freed once and not asked for again (the graph load):
    while it runs, every freed block over 128 KiB goes back to the kernel at once, as glibc does by
    default; afterwards ``keep_freed_memory`` is in force again where it was. Does nothing where it
    was not (or where the C library is not glibc)."""
    if not _keeping:
        yield
        return
    _set_thresholds(_RETURN_ABOVE, _RETURN_ABOVE)
    try:
        yield
    finally:
        _set_thresholds(HEAP_BLOCK_LIMIT, _KEPT_TOP)


def peak_rss_bytes() -> int:
    """This process's own peak resident set size in bytes, as the operating system counts it: Linux's
    ``VmHWM`` (/proc/self/status), else ``getrusage``'s ``ru_maxrss`` (KiB on Linux, bytes on macOS).
    Linux's ``ru_maxrss`` is not used where ``VmHWM`` exists because it keeps the parent's size at
    ``fork`` across ``exec`` (a rank started by a large process would report that process's size)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak) if sys.platform == "darwin" else int(peak) * 1024


def physical_memory() -> int:
    """Bytes of physical memory of this machine."""
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def available_memory() -> int:
    """Bytes of memory the kernel says are available for new work (``MemAvailable`` of
    ``/proc/meminfo``: free memory and caches it can drop), or the physical memory where it does not say."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) << 10
    except OSError:
        pass
    return physical_memory()


def require_memory(nbytes: int, what: str) -> None:
    """``InputError`` naming ``what`` when ``nbytes`` is more than this machine's physical memory (so a
    job that cannot fit says so at once, instead of a MemoryError or the kernel killing it later)."""
    from pregel.errors import InputError

    total = physical_memory()
    if nbytes > total:
        raise InputError(f"{what} would take {nbytes / 2**30:,.1f} GiB, more than this machine's "
                         f"{total / 2**30:,.1f} GiB of memory")


#: what torch's CPU allocator says when an allocation fails (it raises RuntimeError, not MemoryError)
TORCH_ALLOCATION_FAILED = "DefaultCPUAllocator: can't allocate memory"


def out_of_memory(err: BaseException) -> str | None:
    """One line for an allocation that failed (``MemoryError``, or torch's CPU allocator's RuntimeError),
    naming what was asked for where the error says and the limit that stopped it: this process's
    address-space limit (``prlimit --as``, ``ulimit -v``, RLIMIT_AS) when one is set, else the machine's
    memory. None for any other error."""
    text = str(err)
    if not (isinstance(err, MemoryError) or (isinstance(err, RuntimeError) and TORCH_ALLOCATION_FAILED in text)):
        return None
    if TORCH_ALLOCATION_FAILED in text:  # "... you tried to allocate N bytes. Error code 12 ..."
        asked = text.partition("tried to allocate ")[2].partition(" bytes")[0]
        what = f"could not allocate {int(asked) / 2**30:,.2f} GiB" if asked.isdigit() else "an allocation failed"
    else:
        what = text.splitlines()[0] if text.strip() else "an allocation failed"
    limit = resource.getrlimit(resource.RLIMIT_AS)[0]
    if limit != resource.RLIM_INFINITY:
        within = f"this process's address-space limit of {limit / 2**30:,.2f} GiB (RLIMIT_AS: prlimit --as, ulimit -v)"
    else:
        within = f"this machine's {physical_memory() / 2**30:,.1f} GiB"
    return f"out of memory: {what}, within {within}"
