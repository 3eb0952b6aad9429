"""Throughput-first reads (``--mode odin-fast --max-staleness K``): let an image read an older version
of a cell whose influence on it is predicted to be small, so that it need not wait for that cell's
latest update.

In the exact step graph (``odin_sched.odin.depgraph``) an image of batch b reads the version of each cell
it sees written by the last batch before b that touched the cell. ``relax_reads`` rewires the reads
of *low-impact* (image, cell) pairs to the version up to K updates older (never before the window's
initial version: a window ends at every densification, so a stale read never crosses one). The
impact of a read is the share of the image's predicted visible Gaussians its cell holds; an image
may read stale cells holding together at most ``impact`` of them, its smallest cells first (so where
every camera sees nearly everything, an image still reads most of its Gaussians up to date). The image's
gradient still goes to the version of its own batch. Because a cell's versions must still be
applied in order on its owner (one up-to-date Adam state), consecutive versions of every cell are
chained by an edge (version j -> version j + 1, the same rank: no transfer). The staleness of a read
is the number of the cell's updates it misses (0 for exact reads); ``stale_reads`` counts the reads
with staleness > 0 and ``max_staleness_seen`` the largest, never more than K.
"""
from dataclasses import replace

import numpy as np

from odin_sched.odin.depgraph import StepGraph
from odin_sched.odin.options import STALE_IMPACT
from pregel.generate import edges_to_csr
from pregel.graph_io import GraphData



def relax_reads(steps: StepGraph, cell_count: np.ndarray, max_staleness: int,
                impact: float = STALE_IMPACT) -> tuple[StepGraph, np.ndarray]:
    """The step graph with low-impact reads up to ``max_staleness`` updates old, and the staleness
    [R] int64 of each read (in ``image_reads`` order). cell_count: [K] Gaussians per cell.

    max_staleness = 0 returns ``steps`` itself with zero staleness.
    """
    if max_staleness < 0:
        raise ValueError(f"max_staleness must be >= 0, got {max_staleness}")
    reads = steps.version_index(steps.image_reads)  # version index of each exact read [R]
    if max_staleness == 0 or reads.size == 0:
        return steps, np.zeros(len(reads), np.int64)
    pair_image = np.repeat(np.arange(steps.num_images), np.diff(steps.image_reads_indptr))
    pair_cell = steps.version_cell[reads]
    count = np.asarray(cell_count, np.float64)
    total = np.bincount(pair_image, weights=count[pair_cell], minlength=steps.num_images)
    share = count[pair_cell] / np.maximum(total[pair_image], 1.0)
    first = np.searchsorted(steps.version_cell, pair_cell)  # each cell's initial version
    can_lag = reads > first  # a read of the initial version has nothing older to read
    # per image, its lagging-capable reads by increasing share (ties: read order) while their
    # running sum stays within the budget
    order = np.lexsort((np.arange(len(reads)), np.where(can_lag, share, np.inf), pair_image))
    running = np.cumsum(np.where(can_lag, share, 0.0)[order])
    image_start = np.searchsorted(pair_image[order], np.arange(steps.num_images))
    before_image = np.concatenate([[0.0], running])[image_start]
    within = np.empty(len(reads), bool)
    within[order] = running - before_image[pair_image[order]] <= impact
    skip = np.where(can_lag & within, np.minimum(max_staleness, reads - first), 0).astype(np.int64)
    new_reads = steps.image_reads - skip
    versions = np.arange(steps.num_versions)
    chained = versions[1:][steps.version_cell[1:] == steps.version_cell[:-1]]  # j with j - 1 the same cell
    src = np.concatenate([new_reads, pair_image, steps.version_vertex(chained - 1)])
    dst = np.concatenate([pair_image, steps.image_writes, steps.version_vertex(chained)])
    indptr, indices = edges_to_csr(steps.num_vertices, src, dst)
    graph = GraphData(indptr, indices, directed=True)
    return replace(steps, graph=graph, image_reads=new_reads), skip
