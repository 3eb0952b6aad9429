"""What the simulator charges between windows, and what a GPU holds during one.

Unsharded profiles end a window with an allgather of the whole model (``gather_bytes`` per Gaussian).
Sharded profiles (the GPU ones) charge what the sharded runtime does instead: each cell's metadata and each
image's loss and violation count (``METADATA_CELL_BYTES``, ``METADATA_IMAGE_BYTES``), whole cells moved
between owners (``migration_cost``), and cells that grow by the densification model (``densified_counts``).
``window_memory`` counts the bytes of model state each rank holds: its owned cells and the remote cells its
images read.
"""
import numpy as np

from odin_sched.odin.planner import image_ranks
from odin_sched.sim.costmodel import CostProfile
from odin_sched.training.step import param_columns
from pregel.edge_order import sorted_unique


def gather_bytes(sh_degree: int) -> int:
    """Bytes per Gaussian of the window-end allgather at SH degree ``sh_degree``: parameters and two Adam
    moments (float32, ``param_columns``: 14 at degree 0, 59 at degree 3), the densification accumulator
    and largest screen radius (float32) and the id, step count and accumulator count (int64): 200 bytes
    at degree 0, 740 at 3."""
    return 4 * (3 * param_columns(sh_degree) + 2) + 3 * 8


#: the sharded runtime's window end (issue 20's bounds): bytes per cell of metadata (box of means grown
#: by the largest scale, Gaussian count, predicted cost) and per image (loss, violation count)
METADATA_CELL_BYTES, METADATA_IMAGE_BYTES = 64, 16

#: the densification model of the sharded runtime's windows: each window, a cell's count grows by the factor
#: exp(DENSIFY_GROWTH x the window's images that see it), the rate per image of the project's own
#: densification on a real capture (README, "Real captures end to end": maupertuis, 1,039 -> 36,583
#: Gaussians over the rounds of images 600-1,500 with the defaults, ln(35.2) / 900 = 4.0e-3); then all
#: counts are scaled back to the scene's total (the simulated scene stands for the model at its size:
#: what densification adds where the images look, pruning takes evenly)
DENSIFY_GROWTH = 4.0e-3


def densified_counts(counts: np.ndarray, seen: np.ndarray, growth: float, total: int) -> np.ndarray:
    """[K] int64 Gaussians per cell after a window's densification: ``counts`` [K] each times
    exp(``growth`` x ``seen`` [K], the window's images that see the cell), rounded, scaled to ``total``."""
    grown = np.asarray(counts, np.float64) * np.exp(growth * np.asarray(seen, np.float64))
    return np.rint(grown * total / max(grown.sum(), 1.0)).astype(np.int64)


def exchange_seconds(profile: CostProfile, src: np.ndarray, dst: np.ndarray, nbytes: np.ndarray, gpus: int) -> float:
    """Seconds of point-to-point messages of ``nbytes`` [m] from ranks ``src`` [m] to ``dst`` [m], all sent
    at once: the busiest rank's bytes in or out over its links, plus one latency per peer it talks to."""
    if len(src) == 0:
        return 0.0
    latency, bandwidth = profile.link(src, dst)
    seconds = np.asarray(nbytes, np.float64) / bandwidth
    busy = np.maximum(np.bincount(src, seconds, gpus), np.bincount(dst, seconds, gpus))
    peers = np.bincount(np.unique(np.asarray(src) * gpus + dst) // gpus, minlength=gpus)
    return float((busy + peers * latency.max()).max())


def migration_cost(profile: CostProfile, counts: np.ndarray, owner: np.ndarray, new_owner: np.ndarray,
                   row_bytes: int, gpus: int) -> tuple[float, float]:
    """(seconds, bytes) of moving every cell whose owner changes from ``owner`` [K] to ``new_owner`` [K]
    as ``migration.migrate`` moves them: one message per pair of ranks carrying its cells' ``counts`` [K]
    Gaussians of ``row_bytes`` each, all pairs at once (``exchange_seconds``)."""
    moving = np.flatnonzero(np.asarray(new_owner) != np.asarray(owner))
    pairs, at = np.unique(owner[moving] * gpus + new_owner[moving], return_inverse=True)
    nbytes = np.bincount(at.reshape(-1), weights=np.asarray(counts, np.float64)[moving] * row_bytes,
                         minlength=len(pairs))
    return exchange_seconds(profile, pairs // gpus, pairs % gpus, nbytes, gpus), float(nbytes.sum())


def state_bytes(sh_degree: int) -> int:
    """Bytes of training state an owner holds per Gaussian: what the window-end gather moves
    (``gather_bytes``) and the gradient (float32 parameters)."""
    return gather_bytes(sh_degree) + 4 * param_columns(sh_degree)


def window_memory(win, gpus: int, sh_degree: int, previous: np.ndarray) -> tuple:
    """([P] bytes each rank holds in window ``win``: its owned cells' state and read-only parameters of
    the remote cells its images read in this window and the one before (``previous``: that window's
    reads), this window's reads: [n, 2] int64 distinct (rank, cell) pairs, ascending)."""
    steps, sizes, num_cells = win.steps, win.count, len(win.owner)
    cells = steps.version_cell[steps.version_index(steps.image_reads)]
    ranks = np.repeat(image_ranks(win), np.diff(steps.image_reads_indptr))
    reads = sorted_unique(ranks.astype(np.int64) * num_cells + cells)  # (rank, cell) as one key
    previous = np.asarray(previous, np.int64).reshape(-1, 2)
    held = sorted_unique(np.concatenate([reads, previous[:, 0] * num_cells + previous[:, 1]]))
    rank, cell = held // num_cells, held % num_cells
    remote = win.owner[cell] != rank
    cached = np.bincount(rank[remote], weights=sizes[cell[remote]], minlength=gpus)
    owned = np.bincount(win.owner, weights=sizes, minlength=gpus)
    return (owned * state_bytes(sh_degree) + cached * 4 * param_columns(sh_degree),
            np.column_stack([reads // num_cells, reads % num_cells]))
