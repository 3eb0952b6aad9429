"""A rank's part of the model: the Gaussians of the cells it owns, with their optimizer state.

The cells (``odin_sched.scenes.cells``) persist from window to window. Every rank knows every cell's
members (by the Gaussians' rows in the whole model, which are the single-process trainer's rows, so
the order in which both render; 8 bytes per Gaussian on every rank; their global ids,
``VisibleAdam.ids``, travel with the owned state) and its owner, but holds parameters, Adam moments,
step counts and densification statistics only for the Gaussians of its own cells, in ascending id
(``Shard.opt``, ``Shard.accum``). What other ranks need of them travels point to point in a window's
program (``odin_sched.odin.program``); what every rank needs of a cell at a window's end is its
metadata (``odin_sched.odin.cell_meta``).

``Shard.gather`` brings the whole model together (on one rank or on all); training never needs it (the
tests compare the owners' rows with a whole-model oracle through it). Checkpoints are written by every
owner (its rows) and restored at any number of ranks by ``Shard.from_checkpoint``. A densification round
runs on each owner's rows (``odin_sched.odin.owner_densify``): the single process keeps its rows in
ascending id, so a Gaussian's row is the rank of its id, and the owners' new members give the new rows
without any parameter crossing ranks.
"""
from dataclasses import dataclass

import numpy as np
import torch

from odin_sched.odin.cell_meta import grouped_metadata
from odin_sched.scenes.cells import cell_members, kd_cells
from odin_sched.training.checkpoint import install_columns
from odin_sched.training.densify import GradAccumulator
from odin_sched.training.optim import VisibleAdam
from odin_sched.training.step import pack_params, param_columns, unpack_params


OWNER_GROUP = 1  # cells dealt together by default (``owners_by_count``; the runtime and the simulator)


def owners_by_count(counts: np.ndarray, size: int, group: int = OWNER_GROUP) -> np.ndarray:
    """Owner rank [K] of each cell, balanced by Gaussian count and interleaved in k-d order: the cells are
    cut into groups of ``group`` consecutive cells (spatial neighbours; fewer if there would be fewer groups
    than ranks, at least 1) and the groups dealt in rounds of ``size`` consecutive groups, each round's
    groups by decreasing count to the ranks by increasing load so far (ties: the lower group, the lower
    rank). So every rank owns at least one cell (for K >= size), the heaviest load is at most the lightest
    plus the largest group's count, and the cells of one region, which a batch's images all read, have
    about 1 / ``group`` as many owners as the region has cells: the batch's gradients and cell versions
    spread over that many ranks' links instead of queueing on a few owners' (README, issue 20's simulator
    check), and an image sends fewer messages the larger the groups. A loop over rounds (K / group / size).
    counts: [K] Gaussians per cell."""
    counts = np.asarray(counts, np.int64)
    group = max(1, min(group, len(counts) // max(size, 1)))
    of_cell = np.arange(len(counts)) // group
    counts_g = np.add.reduceat(counts, np.arange(0, len(counts), group)) if group > 1 else counts
    owner, loads = np.empty(len(counts_g), np.int64), np.zeros(size, np.int64)
    for start in range(0, len(counts_g), size):
        groups = np.arange(start, min(start + size, len(counts_g)))
        groups = groups[np.argsort(-counts_g[groups], kind="stable")]
        ranks = np.argsort(loads, kind="stable")[:len(groups)]
        owner[groups] = ranks
        loads[ranks] += counts_g[groups]
    return owner[of_cell]


def _cut(means: torch.Tensor, rank: int, size: int, num_cells: int) -> tuple:
    """The cells of Gaussians with ``means`` [G, 3] and this rank's part: (indptr [K + 1], members [G],
    owner [K], this rank's rows as an index tensor [g] on the means' device, ascending)."""
    points = means.detach().cpu().numpy()
    cells = min(num_cells, len(points))
    indptr, members = cell_members(kd_cells(points, cells), cells)
    owner = owners_by_count(np.diff(indptr), size)
    rows = np.sort(np.concatenate([np.empty(0, np.int64)] + [members[indptr[c]:indptr[c + 1]]
                                                             for c in np.flatnonzero(owner == rank)]))
    return indptr, members, owner, torch.from_numpy(rows).to(means.device)


@dataclass
class FullState:
    """The whole model in one place (global ids = rows): the optimizer over every Gaussian and the
    densification accumulator (None when the run keeps none)."""

    opt: VisibleAdam
    accum: GradAccumulator | None


class Shard:
    """One rank's cells and owned Gaussians.

    rank: this rank; indptr [K + 1], members [G] int64: the CSR of each cell's Gaussians (ascending id);
    owner [K] int64: each cell's rank; opt: visible Adam over the owned Gaussians (rows in ascending id,
    ``owned_ids`` [g]); accum: their densification statistics or None.
    """

    def __init__(self, rank: int, indptr: np.ndarray, members: np.ndarray, owner: np.ndarray, opt: VisibleAdam,
                 accum: GradAccumulator | None):
        self.rank, self.indptr, self.members, self.owner = rank, indptr, members, owner
        self.opt, self.accum = opt, accum
        self.owned_cells = np.flatnonzero(owner == rank)
        counts = np.diff(indptr)[self.owned_cells]
        cell_of = np.repeat(self.owned_cells, counts)
        by_cell = np.concatenate([np.empty(0, np.int64), *(self.cell_rows(c) for c in self.owned_cells)])
        # ids are distinct, so a sort's inverse permutation is each id's row: what a searchsorted of every
        # id would find, without its random accesses (seconds at millions of rows)
        order = np.argsort(by_cell, kind="stable")  # a merge of the cells' ascending runs
        self.owned_ids = by_cell[order]
        self.owned_by_cell = np.empty(len(by_cell), np.int64)  # [g] owned rows, cell after cell
        self.owned_by_cell[order] = np.arange(len(by_cell))
        self.owned_counts = counts                                       # [k] Gaussians of each owned cell
        self.owned_cell_of = np.empty(len(by_cell), np.int64)  # [g] cell of each owned row
        self.owned_cell_of[self.owned_by_cell] = cell_of
        self._meta = None       # the owned cells' metadata rows at the last ``metadata`` call
        self._moved = set()     # owned cells whose means or log-scales a cell version changed since
        # owned cell -> its parameters packed on the host [g_c, columns] float32 (read-only), as its last cell
        # version left them (``odin_sched.odin.program``): a window's initial versions send these instead of
        # packing every cell again; whatever else changes the parameters in place calls ``drop_blocks``
        self.blocks = {}

    def moved(self, cell: int) -> None:
        """Note that a cell version changed rows of owned ``cell`` (its metadata is computed again). Every
        other change of the owned means or log-scales comes with a new ``Shard`` (densification rounds,
        splits, migration, a restored checkpoint)."""
        self._moved.add(int(cell))

    def drop_blocks(self, keep=()) -> None:
        """Forget the packed copies (``blocks``) of every owned cell but those in ``keep`` [k]: called with
        nothing kept when the parameters change outside a cell version (an opacity reset in place)."""
        keep = set(np.asarray(keep, np.int64).tolist())
        self.blocks = {c: b for c, b in self.blocks.items() if c in keep}

    @classmethod
    def from_full(cls, rank: int, size: int, state: FullState, num_cells: int) -> "Shard":
        """This rank's shard of the whole model ``state``: ``num_cells`` k-d cells of its means (at most
        one per Gaussian), owned as ``owners_by_count`` deals them (balanced by count, interleaved)."""
        opt = state.opt
        indptr, members, owner, index = _cut(opt.params["means"], rank, size, num_cells)
        mine = VisibleAdam({k: v.detach()[index] for k, v in opt.params.items()}, opt.lrs, (opt.beta1, opt.beta2),
                           opt.eps)
        for name in opt.params:
            mine.exp_avg[name] = opt.exp_avg[name][index].clone()
            mine.exp_avg_sq[name] = opt.exp_avg_sq[name][index].clone()
        mine.step_count = opt.step_count[index].clone()
        mine.ids = opt.ids[index].clone()
        accum = None
        if state.accum is not None:
            accum = GradAccumulator(len(index), opt.device)
            accum.total, accum.count, accum.max_radii = (state.accum.total[index].clone(),
                                                         state.accum.count[index].clone(),
                                                         state.accum.max_radii[index].clone())
        return cls(rank, indptr, members, owner, mine, accum)

    @classmethod
    def from_initial(cls, rank: int, size: int, params: dict, lrs: dict, betas: tuple, eps: float, num_cells: int,
                     keep_stats: bool, read_rows=None) -> "Shard":
        """This rank's shard of a fresh run (zero optimizer state) from the initial Gaussians ``params``
        (name -> [G, ...]), cut as ``from_full`` does, without building the whole optimizer;
        keep_stats: keep densification statistics. read_rows: None, or ``params`` holds only the means
        (the cut) and read_rows(rows [g] int64 ascending) reads every parameter of the rows this rank owns
        (name -> tensor [g, ...], ``TrainingSetup.initial_rows``)."""
        indptr, members, owner, index = _cut(params["means"], rank, size, num_cells)
        owned = {k: v.detach()[index] for k, v in params.items()} if read_rows is None else \
            {k: v.to(index.device) for k, v in read_rows(index.cpu().numpy()).items()}
        mine = VisibleAdam(owned, lrs, betas, eps, copy=False)  # ``owned`` is this rank's own copy already
        mine.ids = index.clone()  # the initial ids are the rows
        accum = GradAccumulator(len(index), mine.device) if keep_stats else None
        return cls(rank, indptr, members, owner, mine, accum)

    @classmethod
    def from_checkpoint(cls, rank: int, size: int, checkpoint, state, num_cells: int, lrs: dict, betas: tuple,
                        eps: float, keep_stats: bool, device) -> "Shard":
        """This rank's shard of the model of the checkpoint ``checkpoint`` (an
        ``odin_sched.training.checkpoint.TrainCheckpointer``) resumes from, written at any number of ranks
        (collective): the cells are cut from the whole model's means as ``from_full`` does, and the rank
        reads only the rows of the cells it owns; the global values go into ``state`` (a ``TrainState``).
        keep_stats: keep densification statistics (zeros when the checkpoint has none)."""
        means = torch.from_numpy(checkpoint.whole_model_means())
        indptr, members, owner, index = _cut(means, rank, size, num_cells)
        del means
        mine = np.zeros(len(members), bool)
        mine[index.numpy()] = True
        columns = checkpoint.restore_rows(state, lambda row: mine[row])
        params = {name[len("params/"):]: torch.from_numpy(np.array(value)).to(device)
                  for name, value in columns.items() if name.startswith("params/")}
        opt = VisibleAdam(params, lrs, betas, eps, copy=False)  # ``params`` were read for it
        accum = install_columns(opt, columns, keep_stats)
        return cls(rank, indptr, members, owner, opt, accum)

    @property
    def num_cells(self) -> int:
        return len(self.owner)

    @property
    def num_gaussians(self) -> int:
        """Gaussians of the whole model."""
        return len(self.members)

    def cell_rows(self, cell: int) -> np.ndarray:
        """Global ids [g_c] of the Gaussians of ``cell``, ascending."""
        return self.members[self.indptr[cell]:self.indptr[cell + 1]]

    def local(self, ids: np.ndarray) -> np.ndarray:
        """Rows [k] in ``opt`` of owned Gaussians with global ``ids`` [k]."""
        return np.searchsorted(self.owned_ids, ids)

    def metadata(self) -> np.ndarray:
        """The metadata rows [k, META_COLUMNS] of the owned cells (``odin_sched.odin.cell_meta``): those of
        the cells ``moved`` since the last call computed again, the others kept."""
        if self._meta is None:
            which, rows = np.arange(len(self.owned_cells)), self.owned_by_cell
        else:
            which = np.flatnonzero(np.isin(self.owned_cells, np.fromiter(self._moved, np.int64)))
            picked = np.zeros(len(self.owned_cells), bool)
            picked[which] = True
            rows = self.owned_by_cell[np.repeat(picked, self.owned_counts)]
        means, log_scales = (self.opt.params[k].detach().cpu().numpy().take(rows, axis=0)
                             for k in ("means", "scales"))  # take: a faster gather than indexing
        part = grouped_metadata(means, log_scales, self.owned_counts[which])
        if self._meta is None:
            self._meta = part
        else:
            self._meta[which] = part
        self._moved.clear()
        return self._meta.copy()

    def state_bytes(self) -> int:
        """Bytes of the owned Gaussians' state: parameters, moments, step counts, accumulators."""
        tensors = [*self.opt.params.values(), *self.opt.exp_avg.values(), *self.opt.exp_avg_sq.values(),
                   self.opt.step_count, self.opt.ids]
        if self.accum is not None:
            tensors += [self.accum.total, self.accum.count, self.accum.max_radii]
        return int(sum(t.numel() * t.element_size() for t in tensors))

    def packed(self, rows: np.ndarray | None = None) -> np.ndarray:
        """The owned Gaussians' state as host rows [g, words] float32 (all, or the local ``rows`` [g]): row in
        the whole model, step count, Gaussian id (``VisibleAdam.ids``), parameters, both moments (and
        densification statistics); the integers' bits travel as pairs of float32 words (``unpacked``
        inverts it)."""
        opt, accum = self.opt, self.accum
        index = None if rows is None else torch.from_numpy(np.asarray(rows, np.int64)).to(opt.device)
        take = (lambda t: t) if index is None else (lambda t: t[index])
        floats = [pack_params(state, index) for state in (opt.params, opt.exp_avg, opt.exp_avg_sq)]
        ints = [torch.from_numpy(self.owned_ids if rows is None else self.owned_ids[rows]).to(opt.device),
                take(opt.step_count), take(opt.ids)]
        if accum is not None:
            floats += [take(accum.total)[:, None], take(accum.max_radii)[:, None]]
            ints.append(take(accum.count))
        floats = torch.cat(floats, dim=1).detach().cpu().numpy()
        ints = torch.stack(ints, dim=1).cpu().numpy()
        return np.ascontiguousarray(np.concatenate([ints.view(np.float32), floats], axis=1))

    def unpacked(self, rows: np.ndarray, device) -> tuple[np.ndarray, FullState]:
        """Global ids [g] and the state (a ``FullState`` of those g Gaussians, by ascending id, on
        ``device``) of ``packed`` rows [g, words] in any order."""
        keep_stats = self.accum is not None
        int_words = 2 * (4 if keep_stats else 3)
        ints = np.ascontiguousarray(rows[:, :int_words]).view(np.int64)
        order = np.argsort(ints[:, 0], kind="stable")
        ints, floats = ints[order], torch.from_numpy(np.ascontiguousarray(rows[order, int_words:])).to(device)
        ints_t = torch.from_numpy(ints).to(device)
        sh_degree = self._sh_degree()
        columns = param_columns(sh_degree)
        parts = [unpack_params(floats[:, i * columns:(i + 1) * columns], sh_degree) for i in range(3)]
        opt = VisibleAdam(parts[0], self.opt.lrs, (self.opt.beta1, self.opt.beta2), self.opt.eps)
        opt.exp_avg.update({k: v.clone() for k, v in parts[1].items()})
        opt.exp_avg_sq.update({k: v.clone() for k, v in parts[2].items()})
        opt.step_count = ints_t[:, 1].clone()
        opt.ids = ints_t[:, 2].clone()
        accum = None
        if keep_stats:
            accum = GradAccumulator(len(ints), opt.device)
            accum.total = floats[:, 3 * columns].clone()
            accum.max_radii = floats[:, 3 * columns + 1].clone()
            accum.count = ints_t[:, 3].clone()
        return ints[:, 0], FullState(opt, accum)

    def _sh_degree(self) -> int:
        """The largest SH degree of the parameters (from the width of ``shN``)."""
        return int(round((self.opt.params["shN"].shape[1] + 1) ** 0.5)) - 1

    def gather(self, comm, root: int | None = None) -> FullState | None:
        """The whole model (collective): every owner's rows on ``root`` (None: on every rank; elsewhere
        None), in global id order, on the shard's device."""
        rows = self.packed()
        if root is None:
            rows = comm.allgather_rows(rows)
        else:
            rows = comm.gather_rows(rows, root)
            if comm.rank != root:
                return None
        return self.unpacked(rows, self.opt.device)[1]
