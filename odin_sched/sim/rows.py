"""A what-if of the simulator, NOT what the runtime does: row-level messages (docs/row-messages.md).

The runtime sends a cell version to a reader rank whole, and each image sends its gradient of every cell
it reads whole. Here a cell version goes to a reader rank as only the rows (Gaussians) of the cell inside
the frusta, within the window's motion margin, of that rank's images that read it (the planner's
conservative premise, ``odin_sched.scenes.visibility``, applied to each Gaussian instead of each cell's
box), with their ids (``ID_WORDS``), and an image sends back the gradients of the rows inside its own
frustum. ``RowMessages`` is a hook for ``simulate`` (``message_sizes``): per planned window it returns
the words of every message group of the window's ``Routes`` and the seconds that choosing the rows,
gathering them and scattering them add to each vertex (``RowCosts``, measured by
``benchmarks/rows_whatif.py``). Off by default; never in the figures of record.

A generated scene's Gaussians may each stand for several (``SimScene.stands_for``) and the cells' counts
change with densification: a message carries the share of the cell's generated Gaussians it would carry,
times the cell's count in the window, rounded up, times ``scale`` (1: the scene's geometry as generated).
"""
from dataclasses import dataclass

import numpy as np

from odin_sched.odin.planner import image_ranks
from odin_sched.odin.program import GRAD_EXTRA
from odin_sched.scenes.cells import CellBounds, cell_members
from odin_sched.scenes.visibility import predict_visible_cells

#: words per row of a parameter message besides the parameters: the row's global id (int64), so that the
#: reader renders its rows in global id order as the single process does
ID_WORDS = 2


def gaussian_bounds(means: np.ndarray, log_scales: np.ndarray) -> CellBounds:
    """Every Gaussian as a cell of its own (box = its mean, sigma = its largest scale, count 1):
    ``predict_visible_cells`` on it is the planner's test for that Gaussian alone. means, log_scales: [G, 3]."""
    means = np.asarray(means, np.float64)
    return CellBounds(means, means, np.exp(np.asarray(log_scales, np.float64).max(axis=1)),
                      np.ones(len(means), np.int64))


def _subset(bounds: CellBounds, ids: np.ndarray) -> CellBounds:
    return CellBounds(bounds.lo[ids], bounds.hi[ids], bounds.max_sigma[ids], bounds.count[ids])


@dataclass
class PairRows:
    """The rows of each (camera, cell) pair read in a window that the camera's frustum may touch within
    the margin: pairs sorted by key = camera x K + cell; ``ids[indptr[p]:indptr[p + 1]]`` the Gaussian ids
    (ascending) of pair p; ``members`` [p] the cell's Gaussians (tested)."""

    key: np.ndarray
    indptr: np.ndarray
    ids: np.ndarray
    members: np.ndarray

    def find(self, camera: np.ndarray, cell: np.ndarray, num_cells: int) -> np.ndarray:
        """[m] index of each pair (``camera`` [m], ``cell`` [m]); ValueError if one was not computed."""
        wanted = np.asarray(camera, np.int64) * num_cells + np.asarray(cell, np.int64)
        at = np.minimum(np.searchsorted(self.key, wanted), max(len(self.key) - 1, 0))
        if len(wanted) and (not len(self.key) or np.any(self.key[at] != wanted)):
            raise ValueError("a (camera, cell) pair of the window's messages was not among the pairs read")
        return at


def pair_rows(points: CellBounds, member_indptr: np.ndarray, members: np.ndarray, cameras: np.ndarray,
              cells: np.ndarray, scene, margin) -> PairRows:
    """The rows of every pair (``cameras`` [m], ``cells`` [m]) inside the camera's frustum within
    ``margin``: each Gaussian of the cell (``members[member_indptr[c]:member_indptr[c + 1]]``) tested by
    ``predict_visible_cells`` on ``points`` (``gaussian_bounds``); one call per camera, over all the
    Gaussians of its cells at once. scene: its viewmats [C, 4, 4], Ks [C, 3, 3], width, height."""
    num_cells = len(member_indptr) - 1
    key = np.unique(np.asarray(cameras, np.int64) * num_cells + np.asarray(cells, np.int64))
    cam, cell = key // num_cells, key % num_cells
    size = member_indptr[cell + 1] - member_indptr[cell]
    kept, counts = [], np.zeros(len(key), np.int64)
    first = np.flatnonzero(np.diff(cam, prepend=-1) != 0)
    for a, b in zip(first, np.append(first[1:], len(cam))):  # one camera's pairs [a, b) at a time
        starts = np.concatenate([[0], np.cumsum(size[a:b])])
        flat = np.repeat(member_indptr[cell[a:b]] - starts[:-1], size[a:b]) + np.arange(starts[-1])
        ids = members[flat].astype(np.int32 if len(members) < 2 ** 31 else np.int64)
        c = int(cam[a])
        mask = predict_visible_cells(_subset(points, ids), scene.viewmats[c:c + 1], scene.Ks[c:c + 1], scene.width,
                                     scene.height, margin)[0]
        counts[a:b] = np.bincount(np.repeat(np.arange(b - a), size[a:b])[mask], minlength=b - a)
        kept.append(ids[mask])
    ids = np.concatenate([np.empty(0, np.int32), *kept])
    return PairRows(key, np.concatenate([[0], np.cumsum(counts)]), ids, size.astype(np.int64))


def union_counts(group: np.ndarray, pair: np.ndarray, rows: PairRows, groups: int, chunk: int = 1 << 24) -> np.ndarray:
    """[groups] the number of distinct rows over the pairs of each group: edges with ``group`` [e]
    (ascending) and ``pair`` [e] (into ``rows``). A group of one edge has its pair's rows; the others
    count the changes in their sorted (group, row id) keys, a chunk of about ``chunk`` keys at a time,
    each chunk whole groups."""
    n = np.diff(rows.indptr)[pair]
    edges = np.bincount(group, minlength=groups)
    out = np.zeros(groups, np.int64)
    single = edges[group] == 1
    out[group[single]] = n[single]
    group, pair, n = group[~single], pair[~single], n[~single]
    ends = np.cumsum(n)
    last = np.flatnonzero(np.diff(group, append=-1) != 0)  # the last edge of each group
    width = int(rows.ids.max(initial=0)) + 1
    lo = 0
    while lo < len(group):
        cut = np.searchsorted(ends[last], (ends[lo - 1] if lo else 0) + chunk, side="right")
        hi = int(last[max(cut - 1, np.searchsorted(last, lo))]) + 1  # whole groups, at least one
        m = n[lo:hi]
        at = np.repeat(rows.indptr[pair[lo:hi]] - (np.cumsum(m) - m), m) + np.arange(m.sum())
        keys = np.sort(np.repeat(group[lo:hi].astype(np.int64), m) * width + rows.ids[at])
        distinct = keys[np.flatnonzero(np.diff(keys, prepend=-1) != 0)]
        out += np.bincount(distinct // width, minlength=groups)
        lo = hi
    return out


@dataclass(frozen=True)
class RowCosts:
    """Seconds that row messages add, per row (``benchmarks/rows_whatif.py`` measures them): the owner's
    frustum test of one Gaussian against one camera (``test``), gathering one row of a message from a
    block (``gather``) and scattering one received row into a zeroed block (``scatter``), per word."""

    test: float = 0.0
    gather: float = 0.0
    scatter: float = 0.0


class RowMessages:
    """``simulate``'s ``message_sizes`` hook: row-level messages (module docstring). scene: the SimScene;
    columns: float32 parameters per Gaussian; costs: ``RowCosts``; scale: a factor on every row count
    (1: the scene's geometry); margin: the motion margin of the rows' test (None: the window's, as the
    planner's; ``Margin(0, 0)``: rows chosen when each message is sent, from the parameters it carries,
    which receives of unknown size would allow)."""

    def __init__(self, scene, columns: int, costs: RowCosts = RowCosts(), scale: float = 1.0, margin=None):
        self.scene, self.columns, self.costs, self.scale, self.margin = scene, columns, costs, scale, margin
        self.points = gaussian_bounds(scene.means, scene.scales)
        self.members = {}  # K -> (indptr, members) of win.cell_of
        self.sent = {"whole": 0.0, "rows": 0.0}  # remote words of the windows seen, as sent whole and as rows
        self.read_share = []  # per window: rows / whole rows of the (camera, cell) pairs read

    def _cells(self, win):
        k = len(win.count)
        if k not in self.members:
            self.members[k] = cell_members(win.cell_of, k)
        return self.members[k]

    def __call__(self, win, routes) -> tuple:
        """(words [G] of every group of ``routes`` (the window ``win``'s), seconds [N] added to each vertex)."""
        steps, k = win.steps, len(win.count)
        indptr, members = self._cells(win)
        read_image = np.repeat(np.arange(steps.num_images), np.diff(steps.image_reads_indptr))
        read_cell = steps.version_cell[steps.version_index(steps.image_reads)]
        rows = pair_rows(self.points, indptr, members, steps.image_camera[read_image], read_cell, self.scene,
                         win.margin if self.margin is None else self.margin)
        kept = np.diff(rows.indptr)
        self.read_share.append(float(kept.sum() / max(rows.members.sum(), 1)))
        # the share of a cell's generated Gaussians scales to its count in the window (stand-ins, densification)
        per_row = win.count / np.maximum(np.diff(indptr), 1) * self.scale
        words = routes.group_size.astype(np.int64).copy()
        src_image, dst_image = steps.is_image(routes.src), steps.is_image(routes.dst)
        remote = routes.remote[routes.group_of_edge]  # only messages between ranks change (a rank's own
        # edges carry nothing; among them the planner's ordering edges from a version to images of its rank)
        group_image = steps.is_image(routes.group_src) & routes.remote
        # gradients: each image's rows of every cell it writes, summed over the group's edges (versions)
        e = np.flatnonzero(src_image & remote)
        cell = steps.version_cell[steps.version_index(routes.dst[e])]
        grad = np.ceil(kept[rows.find(steps.image_camera[routes.src[e]], cell, k)] * per_row[cell])
        summed = np.bincount(routes.group_of_edge[e], grad * (self.columns + GRAD_EXTRA), len(words))
        words[group_image] = summed[group_image]
        # parameters: a version's rows inside the frusta of the group's images (their union), with their ids;
        # a group with a destination that is not an image (none between ranks) keeps its size
        e = np.flatnonzero(~src_image & dst_image & remote)
        cell = steps.version_cell[steps.version_index(routes.src[e])]
        pair = rows.find(steps.image_camera[routes.dst[e]], cell, k)
        generated = union_counts(routes.group_of_edge[e], pair, rows, len(words))
        other = np.zeros(len(words), bool)
        other[routes.group_of_edge[~src_image & ~dst_image]] = True
        version = np.flatnonzero(~steps.is_image(routes.group_src) & routes.remote & ~other)
        version_cell = steps.version_cell[steps.version_index(routes.group_src[version])]
        words[version] = np.ceil(generated[version] * per_row[version_cell]) * (self.columns + ID_WORDS)
        self.sent["whole"] += 4.0 * routes.group_size[routes.remote].sum()
        self.sent["rows"] += 4.0 * words[routes.remote].sum()
        return words, self._seconds(win, routes, rows, read_image, read_cell, words)

    def _seconds(self, win, routes, rows, read_image, read_cell, words) -> np.ndarray:
        """[N] seconds added: each remote message's gather of its words on its sender and scatter on its
        receiver (charged to the group's first destination), and the owner's frustum test of a cell's
        Gaussians (its count in the window) for each camera whose image reads the cell on another rank:
        once per window on the cell's initial version (the window's margin), or with a margin given (rows
        chosen at sending) on every version for each such image that reads it."""
        steps, costs = win.steps, self.costs
        extra = np.zeros(win.plan.rank.shape[0])
        g = np.flatnonzero(routes.remote)
        np.add.at(extra, routes.group_src[g], costs.gather * words[g])
        np.add.at(extra, routes.dst[routes.group_ptr[g]], costs.scatter * words[g])
        remote = image_ranks(win)[read_image] != win.owner[read_cell]
        if self.margin is not None:
            np.add.at(extra, steps.image_reads[remote], costs.test * win.count[read_cell[remote]])
            return extra
        pair = rows.find(steps.image_camera[read_image], read_cell, steps.num_cells)
        remote_reader = np.zeros(len(rows.key), bool)
        np.logical_or.at(remote_reader, pair, remote)
        cells = rows.key % steps.num_cells
        first = steps.version_of(cells, np.full(len(cells), -1))
        ok = (first >= 0) & remote_reader
        np.add.at(extra, first[ok], costs.test * win.count[cells[ok]])
        return extra
