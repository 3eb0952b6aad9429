"""The window end: its motion check counts what the full computation over every row counts, and its one
combined exchange gives what the separate exchanges and a brute-force pass give.

``escaped`` measures only the rows whose means or log-scales changed since the snapshot; the oracle is
``motion_within_margin`` over every row (float64 norms and growths). Cases: rows moved by random steps
around the margin, rows that became infinite or NaN and rows left at infinity, and a negative margin,
which even a row that kept its values exceeds. The exchange runs under mpiexec at P = 1, 2, 3
(tests/mpi_scripts/window_end_exchange.py says what it checks).
"""
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch

from odin_sched.odin.window_end import escaped, motion_snapshot
from odin_sched.scenes.visibility import Margin, motion_within_margin
from odin_sched.training.optim import VisibleAdam

MPIEXEC = shutil.which("mpiexec", path=os.path.dirname(sys.executable)) or "mpiexec"
SCRIPT = os.path.join(os.path.dirname(__file__), "mpi_scripts", "window_end_exchange.py")


def oracle(snapshot: dict, opt: VisibleAdam, margin: Margin) -> int:
    ok = motion_within_margin(snapshot["means"].numpy(), snapshot["scales"].numpy(),
                              opt.params["means"].detach().numpy(), opt.params["scales"].detach().numpy(), margin)
    return int(np.count_nonzero(~ok))


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("margin", [Margin(0.05, 0.02), Margin(0.0, 0.0), Margin(-0.01, 0.02)])
def test_escaped_counts_what_every_row_counts(seed, margin):
    rng = np.random.default_rng(seed)
    g = 2000
    means = torch.from_numpy(rng.normal(0, 1, (g, 3)).astype(np.float32))
    scales = torch.from_numpy(rng.normal(-3, 0.5, (g, 3)).astype(np.float32))
    means[:5] = float("inf")  # left at infinity: inf - inf is NaN, which no margin holds
    opt = VisibleAdam({"means": means, "scales": scales}, {"means": 1.0, "scales": 1.0})
    snapshot = motion_snapshot(opt)
    with torch.no_grad():
        moved = torch.from_numpy(rng.choice(g, g // 3, replace=False))
        opt.params["means"][moved] += torch.from_numpy(rng.normal(0, 0.03, (len(moved), 3)).astype(np.float32))
        grown = torch.from_numpy(rng.choice(g, g // 5, replace=False))
        opt.params["scales"][grown] += torch.from_numpy(rng.normal(0, 0.02, (len(grown), 3)).astype(np.float32))
        opt.params["means"][10, 1] = float("nan")
        opt.params["scales"][11, 2] = float("inf")
    expected = oracle(snapshot, opt, margin)
    assert escaped(snapshot, opt, margin) == expected
    assert 0 < expected < g if margin.means >= 0 else expected == g


@pytest.mark.parametrize("size", [1, 2, 3])
def test_one_exchange_gives_the_separate_results(size):
    env = dict(os.environ, OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1")
    done = subprocess.run([MPIEXEC, "-n", str(size), sys.executable, "-m", "mpi4py", SCRIPT],
                          capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["ok", str(size)] * size
