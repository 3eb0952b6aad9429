"""Cells that split and move between owners (``odin_sched.odin.migration``).

Oracles: under mpiexec at P = 1, 2, 3, after every one of a random sequence of moves and splits every
Gaussian is owned by exactly one rank and the model gathered from the owners equals the model at the
start bit for bit (tests/mpi_scripts/migrate_cells.py); for ``rebalance``, a brute-force look at every
cell of the heaviest rank (no single move to the lightest rank could still lower the larger load).
"""
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from odin_sched.odin.migration import rebalance

MPIEXEC = shutil.which("mpiexec", path=os.path.dirname(sys.executable)) or "mpiexec"
SCRIPT = os.path.join(os.path.dirname(__file__), "mpi_scripts", "migrate_cells.py")


@pytest.mark.parametrize("size", [1, 2, 3])
def test_every_gaussian_has_one_owner_after_any_sequence_of_moves(size):
    env = dict(os.environ, OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1")
    done = subprocess.run([MPIEXEC, "-n", str(size), sys.executable, "-m", "mpi4py", SCRIPT, "9", str(size)],
                          capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[:2] == ["ok", "9"]


@pytest.mark.parametrize("seed", range(6))
def test_rebalance_stops_only_when_balanced_or_no_move_helps(seed):
    rng = np.random.default_rng(seed)
    size = int(rng.integers(2, 5))
    counts = rng.integers(0, 100, size=int(rng.integers(size, 30)))
    owner = rng.integers(0, size, size=len(counts))
    new = rebalance(counts, owner, size, 1.1)
    assert new.shape == owner.shape and new.min() >= 0 and new.max() < size
    before = np.bincount(owner, weights=counts, minlength=size)
    loads = np.bincount(new, weights=counts, minlength=size)
    assert loads.max() <= before.max()
    heavy, light = np.argmax(loads), np.argmin(loads)
    if loads[heavy] > 1.1 * counts.sum() / size:
        for cell in np.flatnonzero(new == heavy):  # brute force: no move lowers the larger load
            assert counts[cell] == 0 or max(loads[heavy] - counts[cell], loads[light] + counts[cell]) >= loads[heavy]


def test_rebalance_leaves_balanced_owners_alone():
    counts = np.array([10, 10, 10, 10])
    owner = np.array([0, 0, 1, 1])
    assert np.array_equal(rebalance(counts, owner, 2, 1.0), owner)
    assert np.array_equal(rebalance(np.array([30, 10, 10, 10]), np.array([0, 0, 1, 1]), 2, 1.0), [0, 1, 1, 1])


@pytest.mark.parametrize("keep_stats", [False, True])
def test_row_words_are_the_width_of_the_rows_migrate_sends(keep_stats):
    """``row_words`` (what the simulator charges per moved Gaussian) against the runtime's own packing."""
    import torch

    from odin_sched.odin.migration import row_words
    from odin_sched.odin.shard import Shard
    from odin_sched.training.densify import GradAccumulator
    from odin_sched.training.optim import VisibleAdam
    from odin_sched.training.step import param_columns

    for degree in (0, 3):
        g, coeffs = 5, (degree + 1) ** 2 - 1
        params = {"means": torch.zeros(g, 3), "scales": torch.zeros(g, 3), "quats": torch.zeros(g, 4),
                  "opacities": torch.zeros(g), "sh0": torch.zeros(g, 1, 3), "shN": torch.zeros(g, coeffs, 3)}
        opt = VisibleAdam(params, dict.fromkeys(params, 0.1))
        shard = Shard(0, np.array([0, g]), np.arange(g), np.array([0]), opt, GradAccumulator(g) if keep_stats else None)
        assert shard.packed().shape[1] == row_words(param_columns(degree), keep_stats)
