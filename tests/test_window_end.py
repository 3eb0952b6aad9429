"""The window end's motion check counts what the full computation over every row counts.

``escaped`` measures only the rows whose means or log-scales changed since the snapshot; the oracle is
``motion_within_margin`` over every row (float64 norms and growths). Cases: rows moved by random steps
around the margin, rows that became infinite or NaN and rows left at infinity, and a negative margin,
which even a row that kept its values exceeds.
"""
import numpy as np
import pytest
import torch

from odin_sched.odin.window_end import escaped, motion_snapshot
from odin_sched.scenes.visibility import Margin, motion_within_margin
from odin_sched.training.optim import VisibleAdam


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
