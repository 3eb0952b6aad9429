"""The window's program: the training step as a dataflow program over a window's step graph.

``StepMessages`` says what the vertices send (shared with the simulator); ``TrainingSteps`` adds what
they compute, from explicit inputs: ``ImageInputs`` for the image steps (scene, targets, rasterizer,
loss) and ``CellInputs`` for the cell versions (the optimizer, the densification accumulator and the
learning rates of the window's batches).
"""
from dataclasses import dataclass

import numpy as np
import torch

from odin_sched.odin.depgraph import StepGraph
from odin_sched.odin.staging import HostStaging
from odin_sched.scenes.scene_io import Scene
from odin_sched.training.densify import GradAccumulator
from odin_sched.training.optim import VisibleAdam
from odin_sched.training.step import PARAM_COLUMNS, batch_gradient, image_gradients, pack_params, unpack_params
from odin_sched.training.train import camera
from pregel.dataflow import DataflowProgram

#: columns of an image's message to a cell: the 14 parameter gradients, visible (0/1), screen norm
GRAD_COLUMNS = PARAM_COLUMNS + 2


class StepMessages(DataflowProgram):
    """What the vertices of a window's step graph send (the part of ``TrainingSteps`` the simulator shares).

    An image sends each cell it sees [g_c, GRAD_COLUMNS] floats; a cell version broadcasts its
    parameters [g_c, PARAM_COLUMNS] (nothing for an initial version: every rank holds it).
    steps: the window's StepGraph; cell_sizes: [K] Gaussians per cell.
    """

    def __init__(self, steps: StepGraph, cell_sizes: np.ndarray):
        self.steps, self.cell_sizes = steps, cell_sizes

    def broadcasts(self, vertices: np.ndarray) -> np.ndarray:
        return ~self.steps.is_image(vertices)

    def payload_size(self, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
        from_image = self.steps.is_image(src)
        version = self.steps.version_index(np.where(from_image, dst, src))
        cells = self.steps.version_cell[version]
        rows = self.cell_sizes[cells]
        initial = ~from_image & (self.steps.version_batch[version] < 0)
        params = np.where(initial, 0, rows * PARAM_COLUMNS)
        return np.where(from_image, rows * GRAD_COLUMNS, params).astype(np.int64)


@dataclass
class ImageInputs:
    """What an image step reads besides its cells: the scene's cameras, the target images [H, W, 3] by
    camera, the rasterizer, the loss's SSIM weight, and whether to return screen-space gradient norms
    (for densification)."""

    scene: Scene
    targets: dict
    render: object
    ssim_weight: float
    screen_norms: bool


@dataclass
class CellInputs:
    """What a cell version updates and with what: the optimizer (its rows of the cell's Gaussians), the
    densification accumulator (None without densification), the learning rates of each batch of the
    window (name -> float, [stop - start]) and the batch size B."""

    opt: VisibleAdam
    accum: GradAccumulator | None
    lrs: list
    batch_size: int


class TrainingSteps(StepMessages):
    """The training step as a dataflow program over a window's step graph (one instance per rank).

    Image vertex i: inputs are the cell versions it reads ([g_c, 14] parameters, or nothing for a cell
    still at its window-start state); it renders, and sends each cell it sees a [g_c, 16] block
    (gradients, visible flag, screen-space gradient norm). Cell-version vertex (c, b): inputs are the
    blocks of batch b's images that see c (and, in odin-fast mode, the previous version of c, which
    only orders the updates); it takes the visible-Adam step of batch b on the cell and broadcasts the
    new parameters [g_c, 14] to the ranks of the images that read this version.
    window: the planned ``Window``; start_params: the window-start parameters (name -> [G, ...], the
    same on every rank); staging: the rank's ``HostStaging`` (its device and host copies).
    """

    def __init__(self, window, start_params: dict, images: ImageInputs, cells: CellInputs, staging: HostStaging):
        super().__init__(window.steps, np.diff(window.member_indptr))
        self.window, self.start_params, self.images, self.cells, self.staging = window, start_params, images, cells, staging
        self.image_losses = {}  # image -> its loss
        self.updated = {}       # cell version -> Gaussians its Adam step moved (for the timeline)

    def fire(self, ctx, vertex: int, inputs: dict):
        if self.steps.is_image(vertex):
            return self._image(vertex, inputs)
        return self._version(self.steps.version_index(vertex), inputs)

    def _index(self, rows: np.ndarray) -> torch.Tensor:
        """Gaussian ids (or positions) [k] int64 as an index tensor on the rank's device."""
        return torch.from_numpy(rows).to(self.staging.device)

    # --- image step
    def _image(self, image: int, inputs: dict) -> dict:
        steps, window, staging, given = self.steps, self.window, self.staging, self.images
        reads = steps.image_reads[steps.image_reads_indptr[image]:steps.image_reads_indptr[image + 1]]
        cells = steps.version_cell[steps.version_index(reads)]
        rows = np.concatenate([window.cell_rows(c) for c in cells])
        blocks = []
        for vertex, cell in zip(reads, cells):
            payload = inputs.get(vertex)  # none from an initial version
            if payload is not None and payload.size:
                blocks.append(staging.to_device(payload, PARAM_COLUMNS))
            else:
                blocks.append(pack_params(self.start_params, self._index(window.cell_rows(cell))))
        order = np.argsort(rows, kind="stable")  # render in global id order, as the single process does
        params = unpack_params(torch.cat(blocks)[self._index(order)])
        cam = int(steps.image_camera[image])
        scene = given.scene
        result = image_gradients(given.render, params, *camera(scene, cam, staging.device), scene.width,
                                 scene.height, given.targets[cam], given.ssim_weight, given.screen_norms)
        self.image_losses[image] = result.loss
        packed = staging.to_host(torch.cat(
            [pack_params(result.grads), result.visible[:, None].to(torch.float32),
             (result.screen_norm if result.screen_norm is not None
              else torch.zeros(len(rows), device=staging.device))[:, None]], dim=1))
        sorted_rows = rows[order]
        writes = steps.image_writes[steps.image_writes_indptr[image]:steps.image_writes_indptr[image + 1]]
        out = {}
        for target, cell in zip(writes, steps.version_cell[steps.version_index(writes)]):  # ascending by cell
            positions = np.searchsorted(sorted_rows, window.cell_rows(cell))
            out[int(target)] = np.ascontiguousarray(packed[positions]).reshape(-1)
        return out

    # --- cell version: the visible-Adam step of one batch on one cell
    def _version(self, version: int, inputs: dict) -> np.ndarray:
        steps, staging, given = self.steps, self.staging, self.cells
        cell, batch = int(steps.version_cell[version]), int(steps.version_batch[version])
        rows = self.window.cell_rows(cell)
        if batch < 0:
            return np.empty(0, np.float32)
        ids = self._index(rows)
        total = torch.zeros(len(rows), PARAM_COLUMNS, device=staging.device)
        seen = torch.zeros(len(rows), dtype=torch.bool, device=staging.device)
        for image in sorted(k for k in inputs if steps.is_image(k)):  # batch order (position in batch)
            block = staging.to_device(inputs[image], GRAD_COLUMNS)
            total += block[:, :PARAM_COLUMNS]
            visible = block[:, PARAM_COLUMNS] > 0
            seen |= visible
            if given.accum is not None:
                given.accum.add_rows(ids, block[:, PARAM_COLUMNS + 1], visible)
        grads = batch_gradient(unpack_params(total), given.batch_size)
        idx = torch.nonzero(seen).squeeze(1)
        self.updated[version] = int(idx.numel())
        given.opt.step_rows(ids[idx], {name: g[idx] for name, g in grads.items()}, lrs=given.lrs[batch])
        return staging.to_host(pack_params(given.opt.params, ids)).reshape(-1)
