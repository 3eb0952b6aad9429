"""Cells that split and cells that move between owners, at a window's end.

* A cell holding more than ``split_above`` Gaussians splits in two: its owner cuts it by a k-d split
  of its means (``odin_sched.scenes.cells.kd_cells`` with 2 cells) and keeps both halves; the new cell
  gets the next free id. Every rank knows which cells split (their counts are in the metadata) and how
  many Gaussians move to the new cell; the owner sends the ids that move (8 bytes each, the only
  per-Gaussian data of a split), so every rank updates its cell membership.
* When the ranks' loads (Gaussians owned, a cell's predicted cost being its count) are uneven, whole
  cells move from the heaviest rank to the lightest while that lowers the larger of the two
  (``rebalance``); each moving cell's Gaussians, with their optimizer state, go point to point from
  the old owner to the new (``migrate``).

Both run on every rank with the same inputs and give the same cells and owners everywhere.
"""
import numpy as np

from odin_sched.odin.shard import Shard
from odin_sched.scenes.cells import cell_members, kd_cells

#: message tag of a migration's rows
MIGRATION_TAG = 7


def row_words(columns: int, keep_stats: bool) -> int:
    """float32 words per Gaussian of ``Shard.packed`` rows, what ``migrate`` sends: the row in the model, step
    count and id (int64, two words each), the parameters and both Adam moments (``columns`` each,
    ``odin_sched.training.step.param_columns``), and with densification statistics their count (int64),
    accumulated norm and largest radius (float32). At SH degree 3 (59 columns) with statistics: 187."""
    return 2 * (4 if keep_stats else 3) + 3 * columns + (2 if keep_stats else 0)


def rebalance(counts: np.ndarray, owner: np.ndarray, size: int, tolerance: float) -> np.ndarray:
    """New owners [K] of cells with ``counts`` [K] now owned by ``owner`` [K] (ranks in [0, size)): while the
    heaviest rank's load exceeds ``tolerance`` times the mean, its largest cell whose move to the lightest
    rank lowers the larger of the two loads moves there; stops when none does. A loop over cells."""
    owner = np.asarray(owner, np.int64).copy()
    counts = np.asarray(counts, np.int64)
    loads = np.bincount(owner, weights=counts, minlength=size)
    mean = counts.sum() / size
    for _ in range(len(counts)):
        heavy, light = int(np.argmax(loads)), int(np.argmin(loads))
        if loads[heavy] <= tolerance * mean:
            break
        fits = np.flatnonzero((owner == heavy) & (loads[light] + counts < loads[heavy]) & (counts > 0))
        if fits.size == 0:
            break
        cell = int(fits[np.argmax(counts[fits])])  # the largest (the lowest id among equals)
        owner[cell] = light
        loads[heavy] -= counts[cell]
        loads[light] += counts[cell]
    return owner


def split_cells(comm, shard: Shard, counts: np.ndarray, split_above: int) -> Shard:
    """Split every cell with more than ``split_above`` Gaussians (counts [K], the same on every rank) in two
    (collective); returns the new shard (the same object's state, new membership), or ``shard`` when no
    cell splits."""
    splitting = np.flatnonzero(counts > split_above)
    if splitting.size == 0:
        return shard
    means = shard.opt.params["means"].detach().cpu().numpy()
    moved = [np.empty(0, np.int64)]
    for cell in splitting[shard.owner[splitting] == shard.rank]:  # a loop over cells
        ids = shard.cell_rows(cell)
        moved.append(ids[kd_cells(means[shard.local(ids)], 2) == 1])
    moved = comm.allgather_rows(np.concatenate(moved))  # by owner, then cell: the order of ``splitting``
    sizes = counts[splitting] - counts[splitting] // 2  # kd_cells puts n // 2 in the first half
    num_cells = shard.num_cells + len(splitting)
    cell_of = np.empty(shard.num_gaussians, np.int64)
    cell_of[shard.members] = np.repeat(np.arange(shard.num_cells), np.diff(shard.indptr))
    by_owner = splitting[np.argsort(shard.owner[splitting], kind="stable")]
    new_ids = shard.num_cells + np.searchsorted(splitting, by_owner)
    cell_of[moved] = np.repeat(new_ids, sizes[np.searchsorted(splitting, by_owner)])
    indptr, members = cell_members(cell_of, num_cells)
    owner = np.concatenate([shard.owner, shard.owner[splitting]])
    return Shard(shard.rank, indptr, members, owner, shard.opt, shard.accum)


def migrate(comm, shard: Shard, new_owner: np.ndarray, carried: np.ndarray) -> tuple:
    """(The shard after every cell moves to ``new_owner`` [K], the ``carried`` columns in its row order)
    (collective, the same on every rank): the rows of each moving cell go point to point from its old
    owner to its new one, one message per pair of ranks (cells in ascending id), with their ``carried``
    float32 columns [g, c] (c may be 0; in the shard's row order)."""
    new_owner = np.asarray(new_owner, np.int64)
    extra = np.asarray(carried, np.float32).reshape(shard.opt.ids.shape[0], -1)
    moving = np.flatnonzero(new_owner != shard.owner)
    if moving.size == 0:
        return shard, extra

    def rows_of(local):  # packed state, then the carried columns
        return np.concatenate([shard.packed(local), extra[local]], axis=1)

    counts = np.diff(shard.indptr)
    words = shard.packed(np.empty(0, np.int64)).shape[1] + extra.shape[1]
    requests, buffers = [], []
    for dest in range(comm.size):  # a loop over ranks
        out = moving[(shard.owner[moving] == shard.rank) & (new_owner[moving] == dest)]
        if out.size:
            rows = np.concatenate([shard.local(shard.cell_rows(c)) for c in out])
            buffers.append(np.ascontiguousarray(rows_of(rows)).reshape(-1))
            requests.append(comm.isend(buffers[-1], dest, MIGRATION_TAG))
    received = []
    for source in range(comm.size):
        arriving = moving[(shard.owner[moving] == source) & (new_owner[moving] == shard.rank)]
        if arriving.size:
            received.append(np.empty(int(counts[arriving].sum()) * words, np.float32))
            requests.append(comm.irecv(received[-1], source, MIGRATION_TAG))
    comm.waitall(requests)
    leaving = np.isin(shard.owned_cell_of, moving[shard.owner[moving] == shard.rank])
    kept = rows_of(np.flatnonzero(~leaving))
    rows = np.concatenate([kept, *(r.reshape(-1, words) for r in received)])
    state_words = words - extra.shape[1]
    _, state = shard.unpacked(rows[:, :state_words], shard.opt.device)
    moved = Shard(shard.rank, shard.indptr, shard.members, new_owner, state.opt, state.accum)
    order = np.argsort(np.ascontiguousarray(rows[:, :2]).view(np.int64)[:, 0], kind="stable")  # as ``unpacked``
    return moved, rows[order, state_words:]
