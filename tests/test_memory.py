"""``keep_freed_memory``: freed blocks stay in the process (the kernel's own RSS count is the oracle)."""
import subprocess
import sys

import pytest

SCRIPT = """
import sys, numpy as np
from pregel.memory import keep_freed_memory
if sys.argv[1] == "keep":
    assert keep_freed_memory()
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096
block = np.ones(64 << 20, np.uint8)  # 64 MiB, touched
before = rss()
del block
print(before - rss())
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc and /proc/self/statm")
def test_freed_blocks_stay_resident_only_when_asked():
    released = {mode: int(subprocess.run([sys.executable, "-c", SCRIPT, mode], check=True, capture_output=True,
                                         text=True).stdout) for mode in ("default", "keep")}
    assert released["default"] > 60 << 20  # glibc hands a 64 MiB block back to the kernel at once
    assert released["keep"] < 1 << 20      # kept for the next allocation
