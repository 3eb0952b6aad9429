"""A window's training steps as a dataflow program (``pregel.dataflow``) over its step graph.

Image steps render the rows of the cells they read that can touch their image (``CellCulling``) and send
each cell its gradient; cell versions take the visible-Adam step of one batch on one cell and send the
new parameters to the next readers. A window's
*initial* cell versions fire on the cells' owners at once and send the owners' parameters, point to
point, to the ranks whose images read them: that is how the last version of a cell in one window
reaches its readers in the next, and the only way parameters cross ranks (``Shard``: nobody else holds
them). What a rank receives of other ranks' cells in a window is its cache of read-only copies; it is
dropped with the window's inputs. ``EvalViews`` renders held-out views the same way, on the plan
``eval_plan`` makes.
"""
from dataclasses import dataclass

import numpy as np
import torch

from odin_sched.odin.depgraph import StepGraph
from odin_sched.odin.shard import Shard
from odin_sched.odin.staging import HostStaging
from odin_sched.scenes.scene_io import Scene
from odin_sched.scenes.sh import render_args
from odin_sched.training.culling import CELLS_PER_AXIS, box_cells, kept_by_cells
from odin_sched.training.densify import GradAccumulator
from odin_sched.training.metrics import psnr
from odin_sched.training.optim import VisibleAdam
from odin_sched.training.step import batch_gradient, image_gradients, pack_params, param_columns, unpack_params
from odin_sched.training.train import camera
from pregel.dataflow import DataflowPlan, DataflowProgram
from pregel.generate import edges_to_csr
from pregel.graph_io import GraphData

#: columns of an image's message to a cell after the parameter gradients: visible (0/1), screen norm,
#: screen radius (pixels)
GRAD_EXTRA = 3
#: culling sub-cells over the whole model in an image step: as many as the single process's grid has
#: cells (16^3, ``odin_sched.training.culling.CELLS_PER_AXIS``), so a sub-cell holds about as many Gaussians
#: as one of its cells (about 500 at 2,000,000 Gaussians, 50 at 200,000) and an image renders about as
#: many Gaussians as the single process's
SUB_CELLS = CELLS_PER_AXIS ** 3


class StepMessages(DataflowProgram):
    """What the vertices of a window's step graph send (the part of ``TrainingSteps`` the simulator shares).

    An image sends each cell it sees [g_c, columns + GRAD_EXTRA] floats; a cell version broadcasts its
    parameters [g_c, columns] (an initial version only when ``initial_sends``: the sharded runtime's
    owners send their cells' window-start parameters; without, every rank is taken to hold them).
    steps: the window's StepGraph; cell_sizes: [K] Gaussians per cell; columns: float32 parameters per
    Gaussian (``odin_sched.training.step.param_columns`` of the SH degree: 14 at degree 0, 59 at degree 3).
    """

    def __init__(self, steps: StepGraph, cell_sizes: np.ndarray, columns: int, initial_sends: bool = False):
        self.steps, self.cell_sizes, self.columns, self.initial_sends = steps, cell_sizes, columns, initial_sends

    def broadcasts(self, vertices: np.ndarray) -> np.ndarray:
        return ~self.steps.is_image(vertices)

    def servable(self, vertices: np.ndarray) -> np.ndarray:
        """[k] bool, True for the cell versions among ``vertices`` [k]: an owner updates its cells between an
        image's forward and backward pass (``TrainingSteps._image``'s serving point), so a remote reader does
        not wait for the owner's whole image. Safe: an image renders from its own copies of its cells'
        parameters (its inputs) and writes nothing but its gradient blocks, and a version touches only its own
        cell's optimizer and accumulator rows, which no image reads; so every fire computes what it would at any
        other time. Nor can a served version be of a cell the image reads, outside odin-fast: each version of
        such a cell c is an ancestor of the image (the version it reads, (c, b_prev), and those before it) or
        needs the image's own gradient (its (c, b), and every later one through the images reading (c, b)), so
        it is not ready while the image runs (tests/test_simulate.py)."""
        return ~self.steps.is_image(vertices)

    def payload_size(self, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
        from_image = self.steps.is_image(src)
        version = self.steps.version_index(np.where(from_image, dst, src))
        cells = self.steps.version_cell[version]
        rows = self.cell_sizes[cells]
        initial = ~from_image & (self.steps.version_batch[version] < 0) & (not self.initial_sends)
        params = np.where(initial, 0, rows * self.columns)
        return np.where(from_image, rows * (self.columns + GRAD_EXTRA), params).astype(np.int64)


def received(payload, cell: int, columns: int) -> np.ndarray:
    """A cell's parameters as they arrived: the host array [g_c, columns] float32 (no copy)."""
    if payload is None:
        raise RuntimeError(f"cell {int(cell)}'s parameters did not arrive")
    return np.asarray(payload).reshape(-1, columns)


class CellCulling:
    """Which rows of the cells an image reads can touch the image: the single process's conservative test
    (``odin_sched.training.culling.kept_by_cells``, zero motion margin) on sub-cells of each cell (a uniform
    grid over the cell's means, ``SUB_CELLS`` over the whole model, made the first time the cell is read
    and kept while the cells keep their members), with their bounds taken from the parameters the image
    renders. Every Gaussian with a screen radius > 0 is kept, so rendering only the kept rows gives the
    image, the loss and their gradients bit for bit (a culled Gaussian's would be exactly zero). One per
    rank, for the whole run."""

    def __init__(self):
        self.members = None  # the Shard.members the sub-cells were made for
        self.sub = {}        # cell -> (sub-cell [g_c] int64, number of sub-cells)

    def _sub_cells(self, cell: int, means: np.ndarray) -> tuple:
        if cell not in self.sub or len(self.sub[cell][0]) != len(means):
            per_axis = max(1, round((len(means) * SUB_CELLS / max(len(self.members), 1)) ** (1.0 / 3.0)))
            self.sub[cell] = box_cells(means, per_axis), per_axis ** 3
        return self.sub[cell]

    def kept(self, shard: Shard, cells: np.ndarray, blocks: list, sh_degree: int, scene: Scene, cam: int) -> list:
        """For each of ``cells`` [k] of ``shard`` with parameters ``blocks`` ([g_c, columns] host arrays,
        ``pack_params`` at SH degree ``sh_degree``), the rows [kept_c] int64 (ascending, into the block) that
        may have a screen radius > 0 in camera ``cam`` of ``scene``."""
        if shard.members is not self.members:
            self.members, self.sub = shard.members, {}
        if not blocks:
            return []
        parts = [unpack_params(b, sh_degree) for b in blocks]
        offset, grouped = 0, []
        for cell, part in zip(cells, parts):
            sub, count = self._sub_cells(int(cell), part["means"])
            grouped.append(sub + offset)
            offset += count
        means = torch.from_numpy(np.concatenate([np.empty((0, 3), np.float32), *(p["means"] for p in parts)]))
        log_scales = torch.from_numpy(np.concatenate([np.empty((0, 3), np.float32), *(p["scales"] for p in parts)]))
        cell_of = torch.from_numpy(np.concatenate([np.empty(0, np.int64), *grouped]))
        mask = kept_by_cells(means, log_scales, cell_of, offset, scene, [cam])[0].numpy()
        starts = np.cumsum([0] + [len(b) for b in blocks])
        return [np.flatnonzero(mask[starts[i]:starts[i + 1]]) for i in range(len(blocks))]

    def gather(self, shard: Shard, cells: np.ndarray, blocks: list, staging: HostStaging, sh_degree: int,
               scene: Scene, cam: int) -> tuple[dict, np.ndarray, list]:
        """What camera ``cam`` renders of ``cells`` [k] (``blocks`` as in ``kept``): the parameters of the kept
        rows in global id order (name -> tensor [n, ...] on the staging's device; only those rows are
        copied), the place [n] of each kept row (cell after cell, ascending within a cell) in that order,
        and the kept rows of each cell (``kept``)."""
        kept = self.kept(shard, cells, blocks, sh_degree, scene, cam)
        rows = np.concatenate([np.empty(0, np.int64), *(shard.cell_rows(c)[k] for c, k in zip(cells, kept))])
        order = np.argsort(rows, kind="stable")  # render in global id order, as the single process does
        columns = param_columns(sh_degree)
        block = staging.to_device(np.concatenate([np.empty((0, columns), np.float32),
                                                  *(b.take(k, axis=0) for b, k in zip(blocks, kept))]), columns)
        params = unpack_params(block.index_select(0, torch.from_numpy(order).to(staging.device)), sh_degree)
        position = np.empty(len(rows), np.int64)
        position[order] = np.arange(len(rows))
        return params, position, kept


@dataclass
class ImageInputs:
    """What an image step reads besides its cells: the scene's cameras, the target images [H, W, 3] by
    camera, the rasterizer, the loss's SSIM weight, whether to return screen-space gradient norms
    (for densification), the SH degree rendered in each batch of the window ([stop - start]) and the
    rank's ``CellCulling``."""

    scene: Scene
    targets: dict
    render: object
    ssim_weight: float
    screen_norms: bool
    sh_degrees: list
    culling: CellCulling


@dataclass
class CellInputs:
    """What a cell version updates and with what: the rank's ``Shard`` (its optimizer and accumulator
    rows of the owned Gaussians), whether densification statistics are kept, the learning rates of each
    batch of the window (name -> float, [stop - start]), the batch size B and the largest SH degree."""

    shard: Shard
    keep_stats: bool
    lrs: list
    batch_size: int
    sh_degree: int

    @property
    def opt(self) -> VisibleAdam:
        return self.shard.opt

    @property
    def accum(self) -> GradAccumulator | None:
        return self.shard.accum if self.keep_stats else None


def cell_block(shard: Shard, cell: int, staging: HostStaging) -> np.ndarray:
    """The owner's parameters of ``cell`` packed on the host [g_c, columns] float32 (read-only): the shard's
    kept copy (``Shard.blocks``), else packed now and kept."""
    block = shard.blocks.get(cell)
    if block is None:
        rows = torch.from_numpy(shard.local(shard.cell_rows(cell))).to(staging.device)
        block = staging.to_host(pack_params(shard.opt.params, rows))
        block.flags.writeable = False
        shard.blocks[cell] = block
    return block


class TrainingSteps(StepMessages):
    """The training step as a dataflow program over a window's step graph (one instance per rank).

    Image vertex i: inputs are the cell versions it reads ([g_c, columns] parameters, ``param_columns`` of
    the SH degree); it renders at its batch's SH degree, and sends each cell it sees a
    [g_c, columns + GRAD_EXTRA] block (gradients, visible flag, screen-space gradient norm, screen radius).
    Initial cell version (c, -1): fires on c's owner at once and sends c's parameters. Cell version
    (c, b): inputs are the blocks of batch b's images that see c (and, in odin-fast mode, the previous
    version of c, which only orders the updates); it takes the visible-Adam step of batch b on the cell
    and broadcasts the new parameters [g_c, columns] to the ranks of the images that read this version.
    window: the planned ``Window``; staging: the rank's ``HostStaging`` (its device and host copies).
    """

    def __init__(self, window, images: ImageInputs, cells: CellInputs, staging: HostStaging):
        super().__init__(window.steps, window.count, param_columns(cells.sh_degree), initial_sends=True)
        self.window, self.images, self.cells, self.staging = window, images, cells, staging
        self.image_losses = {}  # image -> its loss
        self.updated = {}       # cell version -> Gaussians its Adam step moved (for the timeline)
        # the packed copies of the owned cells kept from the last window (Shard.blocks): only those this one reads
        cells.shard.drop_blocks(self.steps.version_cell[self.steps.version_batch < 0])
        self.target_rank = window.plan.rank  # [N] the rank of each vertex, to lay out an image's messages

    def fire(self, ctx, vertex: int, inputs: dict):
        if self.steps.is_image(vertex):
            return self._image(vertex, inputs, ctx.serve)
        return self._version(self.steps.version_index(vertex), inputs)

    def _index(self, rows: np.ndarray) -> torch.Tensor:
        """Rows [k] int64 as an index tensor on the rank's device."""
        return torch.from_numpy(rows).to(self.staging.device)

    # --- image step
    def _image(self, image: int, inputs: dict, serve) -> dict:
        """Image ``image``'s step from its cells' ``inputs``; ``serve`` is called between its forward and
        backward pass (the rank's serving point, ``servable``)."""
        steps, staging, given, shard = self.steps, self.staging, self.images, self.cells.shard
        reads = steps.image_reads[steps.image_reads_indptr[image]:steps.image_reads_indptr[image + 1]]
        cells = steps.version_cell[steps.version_index(reads)]
        blocks = [received(inputs.get(v), c, self.columns) for v, c in zip(reads, cells)]
        cam = int(steps.image_camera[image])
        scene = given.scene
        params, position, kept = given.culling.gather(shard, cells, blocks, staging, self.cells.sh_degree, scene, cam)
        result = image_gradients(given.render, params, *camera(scene, cam, staging.device), scene.width,
                                 scene.height, given.targets[cam], given.ssim_weight, given.screen_norms,
                                 given.sh_degrees[int(steps.image_batch[image])], between=serve)
        self.image_losses[image] = result.loss
        none = torch.zeros(len(position), device=staging.device)
        packed = staging.to_host(torch.cat(
            [pack_params(result.grads), result.visible[:, None].to(torch.float32),
             (result.screen_norm if result.screen_norm is not None else none)[:, None],
             (result.radii.to(torch.float32) if result.radii is not None else none)[:, None]], dim=1))
        starts = np.cumsum([0] + [len(k) for k in kept])
        read_of = {int(c): i for i, c in enumerate(cells)}
        writes = steps.image_writes[steps.image_writes_indptr[image]:steps.image_writes_indptr[image + 1]]
        # one zeroed array (culled rows' gradients are exactly zero) holds every block, by (rank of the
        # version, version): the blocks to one rank lie back to back, so the engine sends them without a copy
        writes = writes[np.lexsort((writes, self.target_rank[writes]))]
        which = [read_of[int(c)] for c in steps.version_cell[steps.version_index(writes)]]
        ends = np.cumsum([len(blocks[i]) * packed.shape[1] for i in which])
        buffer = np.zeros(ends[-1] if len(ends) else 0, np.float32)
        out = {}
        for target, i, end in zip(writes.tolist(), which, ends.tolist()):
            grads = buffer[end - len(blocks[i]) * packed.shape[1]:end]
            grads.reshape(-1, packed.shape[1])[kept[i]] = packed.take(position[starts[i]:starts[i + 1]], axis=0)
            out[target] = grads
        return out

    # --- cell version: the window-start parameters, or the visible-Adam step of one batch on one cell
    def _version(self, version: int, inputs: dict) -> np.ndarray:
        """Cell version ``version``: an initial one sends the owner's packed parameters of its cell
        (``cell_block``: the copy its last version left, packed again only when there is none); a later one
        sums, Adam-steps and repacks only the rows that batch's images saw (every other row keeps its
        parameters and state, ``VisibleAdam.step_rows``), and sends the cell's parameters now: a copy of the
        latest packed block with those rows replaced, which it keeps as the cell's block (``Shard.blocks``);
        when they saw none, the latest block itself, with nothing summed or stepped."""
        steps, staging, given, columns = self.steps, self.staging, self.cells, self.columns
        cell, batch = int(steps.version_cell[version]), int(steps.version_batch[version])
        if batch < 0:
            return cell_block(given.shard, cell, staging).reshape(-1)
        blocks = [np.asarray(inputs[k]).reshape(-1, columns + GRAD_EXTRA)
                  for k in sorted(k for k in inputs if steps.is_image(k))]  # batch order (position in batch)
        seen = np.zeros(len(given.shard.cell_rows(cell)), bool)
        for block in blocks:
            seen |= block[:, columns] > 0
        seen = np.flatnonzero(seen)  # rows of the cell that batch's images saw, ascending
        self.updated[version] = len(seen)
        if not len(seen):  # no image saw the cell: its rows, state and statistics stay; so does its block
            return cell_block(given.shard, cell, staging).reshape(-1)
        ids = self._index(given.shard.local(given.shard.cell_rows(cell)[seen]))
        total = torch.zeros(len(seen), columns, device=staging.device)
        for block in blocks:  # a row's sum runs over every image in batch order, as the dense sum did
            part = staging.rows_to_device(block, seen)
            total += part[:, :columns]
            if given.accum is not None:
                given.accum.add_rows(ids, part[:, columns + 1], part[:, columns] > 0, part[:, columns + 2])
        grads = batch_gradient(unpack_params(total, given.sh_degree), given.batch_size)
        given.opt.step_rows(ids, grads, lrs=given.lrs[batch])
        given.shard.moved(cell)
        latest = cell_block(given.shard, cell, staging).copy()  # a new array: the blocks sent stay as sent
        latest[seen] = staging.to_host(pack_params(given.opt.params, ids))
        latest.flags.writeable = False
        given.shard.blocks[cell] = latest
        return latest.reshape(-1)


class EvalViews(DataflowProgram):
    """Held-out evaluation as a dataflow program: vertices [0, T) are the views (``cameras`` [T]), vertex
    T + j is cell ``cells[j]``, with an edge to every view that may see it. A cell fires on its owner
    and broadcasts its parameters; a view renders the cells it reads (in global id order) at SH degree
    ``sh_degree`` (only their rows that can touch the view: ``culling``, the rank's ``CellCulling``) and
    keeps its PSNR in ``psnr`` {view: dB} (and view 0's image in ``first_view``)."""

    def __init__(self, cameras: np.ndarray, cells: np.ndarray, shard: Shard, scene: Scene, targets: dict, render,
                 sh_degree: int, max_degree: int, staging: HostStaging, culling: CellCulling):
        self.cameras, self.cells, self.shard, self.scene, self.targets = cameras, cells, shard, scene, targets
        self.render, self.sh_degree, self.max_degree, self.staging = render, sh_degree, max_degree, staging
        self.culling = culling
        self.columns = param_columns(max_degree)
        self.psnr = {}
        self.first_view = None  # view 0's image [H, W, 3], on the rank that rendered it

    def payload_size(self, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
        cells = self.cells[np.asarray(src) - len(self.cameras)]
        return (np.diff(self.shard.indptr)[cells] * self.columns).astype(np.int64)

    @torch.no_grad()
    def fire(self, ctx, vertex: int, inputs: dict):
        views = len(self.cameras)
        if vertex >= views:
            return cell_block(self.shard, int(self.cells[vertex - views]), self.staging).reshape(-1)
        sources = sorted(inputs)
        cells = self.cells[np.asarray(sources, np.int64) - views]
        blocks = [received(inputs[s], c, self.columns) for s, c in zip(sources, cells)]
        cam = int(self.cameras[vertex])
        params, _, _ = self.culling.gather(self.shard, cells, blocks, self.staging, self.max_degree, self.scene, cam)
        viewmat, K = camera(self.scene, cam, self.staging.device)
        image, _ = self.render(**render_args(params, self.sh_degree), viewmat=viewmat, K=K, width=self.scene.width,
                               height=self.scene.height)
        self.psnr[vertex] = psnr(image.clamp(0, 1), self.targets[cam]).item()
        if vertex == 0:
            self.first_view = image
        return None


def eval_plan(visible: np.ndarray, owner: np.ndarray, size: int) -> tuple[DataflowPlan, np.ndarray]:
    """The dataflow plan of a held-out evaluation: visible [T, K] bool (the cells each view may see),
    owner [K]. Views 0..T-1 go to ranks t mod size, the cells any view sees (returned [k]) follow, on
    their owners, each with an edge to the views that may see it."""
    views = visible.shape[0]
    cells = np.flatnonzero(visible.any(axis=0))
    view, j = np.nonzero(visible[:, cells])
    n = views + len(cells)
    indptr, indices = edges_to_csr(n, views + j, view)
    rank = np.concatenate([np.arange(views) % size, owner[cells]]).astype(np.int64)
    priority = np.concatenate([np.zeros(views), np.ones(len(cells))])
    phase = np.concatenate([np.ones(views, np.int64), np.zeros(len(cells), np.int64)])
    return DataflowPlan(GraphData(indptr, indices, directed=True), rank, priority, phase), cells
