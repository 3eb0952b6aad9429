"""Keeping freed memory in the process, so that each superstep reuses pages instead of faulting in new ones.

glibc returns every freed block over its ``mmap`` threshold (128 KiB, raised at run time up to 32 MiB)
to the kernel at once, and trims the heap top past ``M_TRIM_THRESHOLD``. A superstep allocates
arrays of megabytes (message values, the gathered rows, the program's temporaries) and frees them
at its end; handed back and asked for again, each page costs a page fault and zeroing. On a 1M-vertex
graph that made the first PageRank superstep about 15 ms (30 %) slower than the next ones, and the
load phase, which frees large temporaries, paid the same on its own arrays. With both thresholds
raised, freed blocks stay in the heap and are reused: the peak resident size of a phase is unchanged
(what is kept was resident at its peak anyway), but the size after a phase no longer drops.

What one phase leaves free is not always reused by the next: the load's temporaries (edge arrays,
sort orders) are cut into holes that a superstep's arrays of another size do not fit, so they stay
resident under the supersteps' own peak (PageRank at 10M vertices / 100M edges, P = 2: a peak of 1.5 GB per
rank, measured).
``release_freed_memory`` hands such a phase's free heap back to the kernel when it is large.
"""

import ctypes
import ctypes.util
import os
import resource
import sys

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
#: blocks up to this size come from the heap (glibc's largest allowed mmap threshold on 64-bit)
HEAP_BLOCK_LIMIT = 1 << 30
#: ``release_freed_memory`` hands the free heap back only when more than this is free
RELEASE_ABOVE = 256 << 20


def keep_freed_memory() -> bool:
    """Ask glibc to keep freed blocks for reuse; returns False where the C library is not glibc
    (nothing changes there)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    # mallopt takes an int: 2**31 - 1 (2 GiB) is the largest trim threshold it can be told
    return bool(mallopt(_M_MMAP_THRESHOLD, HEAP_BLOCK_LIMIT)) and bool(mallopt(_M_TRIM_THRESHOLD, 2**31 - 1))


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


def release_freed_memory(keep: int = RELEASE_ABOVE) -> bool:
    """Hand the heap's free pages back to the kernel (glibc ``malloc_trim``) when more than ``keep``
    bytes of it are free (below that, keeping them for reuse is worth more); returns whether it did.
    Does nothing (False) where the C library is not glibc."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallinfo2, malloc_trim = libc.mallinfo2, libc.malloc_trim
    except (OSError, AttributeError):
        return False
    mallinfo2.restype = _MallInfo2
    if mallinfo2().fordblks <= keep:
        return False
    malloc_trim.argtypes, malloc_trim.restype = (ctypes.c_size_t,), ctypes.c_int
    malloc_trim(0)
    return True


class _MallInfo2(ctypes.Structure):
    """glibc's ``struct mallinfo2`` (all fields size_t); ``fordblks``: free bytes in the heap."""

    _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                      "fsmblks", "uordblks", "fordblks", "keepcost")]


def physical_memory() -> int:
    """Bytes of physical memory of this machine."""
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


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
