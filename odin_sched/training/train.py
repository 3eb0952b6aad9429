"""Gaussian-splatting training on one process (the logic behind ``pregel train`` on one rank), and the
setup that the distributed trainer (``odin_sched.odin.trainer``) shares with it.

Starts from the scene's initial point cloud (``/init``; scales from the mean distance to the 3 nearest
neighbours, identity rotations, opacity 0.1, the colour as the DC SH coefficient, as 3DGS initialises
from SfM points) or from a 3DGS PLY, and trains against the images of the training cameras:

* loss (1 - w) L1 + w (1 - SSIM), w = ``ssim_weight`` (3DGS uses 0.2; 0 gives plain L1);
* batches of B images in the order of ``odin_sched.training.image_order``; the batch semantics (gradients
  summed in batch order then divided by B, Grendel-GS's hyperparameter scaling) are in
  ``odin_sched.training.step``;
* visible Adam (``odin_sched.training.optim``): only the Gaussians the batch sees are updated; the means'
  learning rate decays exponentially from 1.6e-4 to 1.6e-6 times the scene extent over
  ``position_lr_max_steps`` images (30,000), as in 3DGS (``odin_sched.training.step.BatchSettings``);
* view-dependent colour by spherical harmonics up to degree ``sh_degree`` (``odin_sched.scenes.sh``), the
  active degree raised by one every 1,000 images as in 3DGS;
* densification and opacity resets (``odin_sched.training.densify``) on the reference's schedule, or none;
* culling (``odin_sched.training.culling``; ``TrainConfig.cull``, default on): an image renders only the
  Gaussians that can touch it, with the same pixels and gradients as rendering all of them;
* PSNR on the held-out cameras (``/cameras/heldout``, else every 8th) every ``eval_every`` steps;
* on the CPU, or with ``device='cuda'`` on this process's GPU (``render_device``): the Gaussians,
  their Adam state and the images live there, and rendering, the loss, the backward pass, visible Adam
  and densification run there; the metrics and the outputs are copied to the host to be written.

The trained scene is written in the scene format (the input's cameras, images and held-out split with
the trained Gaussians, sorted by their global ids, which go to ``/gaussians/ids``; written by
``odin_sched.training.outputs.write_trained``, as the distributed trainer writes it) with ``/metrics/psnr_steps``, ``/metrics/psnr``, ``/metrics/loss`` and root
attributes ``steps``, ``seed``, ``ssim_weight``, ``final_psnr``, ``wall_time_s``, ``num_gaussians``,
``mode``, ``ranks``, ``batch_size``, ``steps_per_second``, ``device``, ``sh_degree`` (the SH coefficients in
``/gaussians/sh``, their DC colour in ``/gaussians/colors``); optionally a 3DGS PLY; and a PNG of the
first held-out view rendered beside its ground truth.
"""
import math
import os
import sys
import time
from dataclasses import dataclass, replace

import numpy as np
import torch

from odin_sched.training.config import TrainConfig
from odin_sched.training.culling import Culling, restricted
from odin_sched.training.densify import GradAccumulator, densify_round
from odin_sched.training.image_order import IMAGE_ORDERS, ORDER_CELLS, ORDER_WINDOW, BatchOrder, resolved_order
from odin_sched.training.metrics import psnr
from odin_sched.training.outputs import OutputPaths, save_comparison_png, write_trained
from odin_sched.training.optim import VisibleAdam, default_lrs
from odin_sched.scenes.ply import GaussianPly
from odin_sched.scenes.point_cloud import init_gaussians
from odin_sched.scenes.render_device import render_device
from odin_sched.scenes.scene_io import Scene, heldout_mask, read_scene
from odin_sched.scenes.sh import active_sh_degree, check_sh_degree, fitted_sh, render_args
from odin_sched.training.step import BatchSettings, batch_gradient, image_gradients
from odin_sched.training.checkpoint import TrainState
from odin_sched.training.targets import Targets
from odin_sched.training.status import TrainStatus
from pregel.errors import InputError
from pregel.memory import require_memory
from pregel.outputs import check_outputs
from pregel.progress import Progress

#: step counts are int64 in checkpoints and results
MAX_STEPS = 2 ** 63 - 1
#: seeds are 64-bit for torch (the image order) and key densification's counter-based draws
MAX_SEED = 2 ** 63 - 2
NO_CUDA_CHECKPOINTS = "TrainConfig.device is 'cuda': checkpoints are not supported on the GPU yet"


@dataclass
class TrainResult:
    """What a training run measured."""

    steps: int
    num_gaussians: int
    wall_time_s: float
    psnr_steps: np.ndarray  # [E] int64, steps at which held-out PSNR was measured
    psnr: np.ndarray        # [E] float64, mean held-out PSNR (dB)
    losses: np.ndarray      # [steps] float64, training loss per step
    per_rank: np.ndarray | None = None  # [ranks, fields] time and traffic per rank (distributed runs)
    visibility_violations: int = 0

    @property
    def final_psnr(self) -> float:
        return float(self.psnr[-1])


def camera_centres(viewmats: np.ndarray) -> np.ndarray:
    """World positions [C, 3] (float64) of cameras with world-to-camera matrices ``viewmats`` [C, 4, 4]."""
    rot, trans = viewmats[:, :3, :3].astype(np.float64), viewmats[:, :3, 3].astype(np.float64)
    return -np.einsum("cji,cj->ci", rot, trans)  # -R^T t


def scene_extent(viewmats: np.ndarray) -> float:
    """3DGS's camera extent: 1.1 x the largest distance of a camera centre from their mean.

    viewmats: np.ndarray  # [C, 4, 4] world-to-camera
    """
    centres = camera_centres(viewmats)
    radius = float(np.linalg.norm(centres - centres.mean(axis=0), axis=1).max())
    return 1.1 * radius if radius > 0 else 1.0


def _render_view(render, params, scene, cam, sh_degree: int):
    viewmat, K = camera(scene, cam, params["means"].device)
    return render(**render_args(params, sh_degree), viewmat=viewmat, K=K, width=scene.width, height=scene.height)


@torch.no_grad()
def evaluate(render, params: dict, scene: Scene, cams: np.ndarray, targets: dict, sh_degree: int,
             kept: list | None = None) -> tuple:
    """(Mean PSNR (dB) over the cameras ``cams`` at SH degree ``sh_degree``, the first camera's view
    [H, W, 3] clamped to [0, 1]); targets maps camera -> image tensor [H, W, 3]; kept: the rows [g] each
    camera renders (``Culling.kept_rows``), or None for all of them."""
    values, first = [], None
    for c, rows in zip(cams, kept or [None] * len(cams)):
        view = _render_view(render, restricted(params, rows), scene, c, sh_degree)[0].clamp(0, 1)
        values.append(psnr(view, targets[c]).item())
        first = view if first is None else first
    return float(np.mean(values)), first


def visible_cells_of_cameras(means: np.ndarray, scales: np.ndarray, viewmats: np.ndarray, Ks: np.ndarray,
                             width: int, height: int, settings: BatchSettings, extent: float) -> np.ndarray:
    """bool [C, ORDER_CELLS]: the k-d cells of the initial Gaussians (means, log scales [G, 3]) each
    camera (viewmats [C, 4, 4], Ks [C, 3, 3]) may see within a window of ``ORDER_WINDOW`` batches (the
    distributed trainer's prediction with its default window; fixed here so that the order depends on
    the scene, the seed and B only)."""
    from odin_sched.scenes.cells import cut_cells
    from odin_sched.scenes.visibility import predict_visible_cells, window_margin

    _, bounds = cut_cells(means, scales, ORDER_CELLS)
    lrs = settings.lrs(extent, 1)
    margin = window_margin(lrs["means"], lrs["scales"], settings.betas, ORDER_WINDOW)
    return predict_visible_cells(bounds, viewmats, Ks, width, height, margin)


@dataclass
class TrainingSetup:
    """Everything both trainers derive from the scene file and the options before the first step."""

    scene: Scene
    targets: Targets       # camera -> image tensor [H, W, 3] in [0, 1]
    train_ids: np.ndarray  # [C_train] cameras trained on
    test_ids: np.ndarray   # [C_test] held-out cameras
    extent: float
    batches: BatchOrder    # [steps, B] camera of each image of each batch, made as read
    settings: BatchSettings
    initial: dict          # name -> float32 tensor [G, ...], the initial Gaussians
    sh_degree: int = 3     # the largest SH degree trained
    # with ``prepare(owned_rows=True)`` and an initial PLY: ``initial`` holds only means and scales, and
    # initial_rows(index [g] int64 ascending) reads every parameter of those rows (name -> CPU tensor [g, ...])
    initial_rows: object = None

    def active_sh_degree(self, step: int) -> int:
        """The SH degree rendered in batch ``step`` (1-based)."""
        return active_sh_degree(step, self.settings.batch_size, self.sh_degree)


def prepare(config: TrainConfig, outputs=(), lazy_images: bool = False, owned_rows: bool = False) -> TrainingSetup:
    """Check the options and the output paths, read the scene and set up training (every rank does the
    same, deterministically). ``outputs``: the paths that will be written (None entries ignored);
    ``config``: see ``TrainConfig``; lazy_images: leave the images in the scene file until a camera's
    is asked for (``Targets``); owned_rows: of a ``TrainConfig.init_ply`` keep only the means and scales
    of all Gaussians in ``initial`` and read the rest by rows (``TrainingSetup.initial_rows``)."""
    scene_path, steps, batch_size, seed = config.scene, config.steps, config.batch_size, config.seed
    ssim_weight, eval_every, init_ply, image_order = config.ssim_weight, config.eval_every, config.init_ply, \
        config.image_order
    sh_degree = check_sh_degree(config.sh_degree)
    if steps < 1:
        raise InputError(f"TrainConfig.steps must be at least 1, got {steps}")
    if steps > MAX_STEPS:
        raise InputError(f"TrainConfig.steps {steps} does not fit the checkpoint and result formats (at most "
                         f"{MAX_STEPS})")
    require_memory(8 * steps, f"TrainConfig.steps {steps}: the loss of every step (/metrics/loss)")
    if not 0 <= seed <= MAX_SEED:
        raise InputError(f"TrainConfig.seed must be in [0, {MAX_SEED}], got {seed}")
    if batch_size < 1:
        raise InputError(f"TrainConfig.batch_size must be at least 1, got {batch_size}")
    if not 0.0 <= ssim_weight <= 1.0:
        raise InputError(f"TrainConfig.ssim_weight must be in [0, 1], got {ssim_weight}")
    if eval_every < 1:
        raise InputError(f"TrainConfig.eval_every must be at least 1, got {eval_every}")
    if config.position_lr_max_steps < 1:
        raise InputError(f"TrainConfig.position_lr_max_steps must be at least 1, got {config.position_lr_max_steps}")
    if not (math.isfinite(config.position_lr_init) and config.position_lr_init > 0.0):
        raise InputError(f"TrainConfig.position_lr_init must be a positive number, got {config.position_lr_init}")
    image_order = resolved_order(image_order, batch_size)
    if image_order not in IMAGE_ORDERS:
        raise InputError(f"TrainConfig.image_order must be one of {', '.join(IMAGE_ORDERS)}, got {image_order!r}")
    check_outputs(list(outputs), inputs=[scene_path, init_ply])
    scene = read_scene(scene_path, lazy_images, gaussians=False, init=init_ply is None)  # its Gaussians unused
    initial_rows = None
    if init_ply is not None:  # its SH coefficients kept, padded with zeros up to sh_degree
        ply = GaussianPly(init_ply, keep_rows=not owned_rows)

        def read_rows(index=None):
            gaussians = ply.rows(index)
            gaussians.update(fitted_sh(gaussians.pop("sh"), sh_degree, init_ply))
            return {name: torch.from_numpy(np.ascontiguousarray(value)) for name, value in gaussians.items()}

        if owned_rows:  # the cut needs the means, the image order the means and scales; rows are read later
            initial = {"means": torch.from_numpy(ply.means), "scales": torch.from_numpy(ply.scales)}
            initial_rows = read_rows
        else:
            initial = read_rows()
    elif scene.init_means is None:
        raise InputError.at(scene_path, "/init", "no initial point cloud to train from "
                            "(make the scene with `pregel generate-scene`, or give TrainConfig.init_ply)")
    else:
        initial = init_gaussians(scene.init_means, scene.init_colors, sh_degree)
    held = heldout_mask(scene)
    train_ids, test_ids = np.flatnonzero(~held), np.flatnonzero(held)
    if len(train_ids) == 0 or len(test_ids) == 0:
        raise InputError.at(scene_path, "/cameras/heldout", "needs at least one training and one held-out camera")
    if batch_size > len(train_ids):
        raise InputError(f"TrainConfig.batch_size {batch_size} is more than the {len(train_ids)} training cameras "
                         f"of {scene_path}")
    settings = BatchSettings(batch_size, config.position_lr_max_steps, config.position_lr_init)
    extent = scene_extent(scene.viewmats)
    if image_order == "spread":
        sees = visible_cells_of_cameras(initial["means"].numpy(), initial["scales"].numpy(), scene.viewmats,
                                        scene.Ks, scene.width, scene.height, settings, extent)
        batches = BatchOrder(train_ids, steps, batch_size, seed, sees)
    else:
        batches = BatchOrder(train_ids, steps, batch_size, seed)
    return TrainingSetup(scene, Targets(scene.images), train_ids, test_ids,
                         extent, batches, settings, initial, sh_degree, initial_rows)


def camera(scene: Scene, cam: int, device="cpu") -> tuple:
    """(viewmat [4, 4], K [3, 3]) tensors of camera ``cam`` on ``device``."""
    return torch.from_numpy(scene.viewmats[cam]).to(device), torch.from_numpy(scene.Ks[cam]).to(device)


def to_device(setup: TrainingSetup, device) -> TrainingSetup:
    """``setup`` with the initial Gaussians copied to ``device`` and the camera images converted there."""
    return replace(setup, initial={name: value.to(device) for name, value in setup.initial.items()},
                   targets=setup.targets.on(device))


def set_up(config: TrainConfig, checkpoint=None, comm=None, extra_outputs=(), check=None) -> tuple:
    """The set-up both trainers share before the first step: refuse checkpoints on the GPU, pick the
    device and the rasterizer (``render_device``; collective on ``comm`` for 'cuda'), check the settings
    and every output (``config.outputs()`` and ``extra_outputs``, (field, path) pairs), read the scene
    (leaving its images on disk until asked for: ``Targets``) and copy the training data to the device.
    ``check(setup)``: a further problem (a string) or None. With ``comm``, a problem
    on any rank is raised on every rank. Returns (TrainingSetup on the device, render)."""
    if config.out is None:
        raise InputError("TrainConfig.out must be given: the trained scene file")
    if config.device not in ("cpu", "cuda"):
        raise InputError(f"TrainConfig.device must be cpu or cuda, got {config.device!r}")
    if config.device == "cuda" and checkpoint is not None:
        raise InputError(NO_CUDA_CHECKPOINTS)
    started = time.perf_counter()
    dev, render = render_device(config.device, comm)
    setup, problem = None, None
    try:
        setup = prepare(config, (*config.outputs(), *extra_outputs), lazy_images=True, owned_rows=comm is not None)
        problem = check(setup) if check is not None else None
    except InputError as err:
        if comm is None:
            raise
        problem = str(err)
    problem = None if problem is None else InputError(problem)
    if comm is not None:
        comm.agree(problem)
    elif problem is not None:
        raise problem
    setup = to_device(setup, dev)
    seconds = time.perf_counter() - started
    if config.progress and (comm is None or comm.rank == 0) and seconds >= Progress.LINE_SECONDS:
        # no step ends before this: a line, so a long set-up (millions of Gaussians) is not silence
        print(f"set up in {seconds:.1f} s: {setup.initial['means'].shape[0]:,} Gaussians, "
              f"{len(setup.train_ids)} training cameras at {setup.scene.width} x {setup.scene.height}",
              file=sys.stderr, flush=True)
    return setup, render


def new_optimizer(setup: TrainingSetup) -> VisibleAdam:
    """Visible Adam over the initial Gaussians, with 3DGS's learning rates for the scene's extent and the
    batch size's betas and eps. It trains the set-up's ``initial`` tensors themselves (no second copy of the
    model is held): a set-up trains once."""
    return VisibleAdam(setup.initial, default_lrs(setup.extent), betas=setup.settings.betas, eps=setup.settings.eps,
                       copy=False)


def train(config: TrainConfig, checkpoint=None) -> TrainResult:
    """Train Gaussians on a scene file from its initial point cloud, on one process, and write the results.

    config: see ``TrainConfig``; checkpoint: an ``odin_sched.training.checkpoint.TrainCheckpointer`` or None
    (CPU only).
    Returns a TrainResult.
    """
    setup, render = set_up(config, checkpoint)
    with setup.scene.images:  # the scene file closes however training ends
        return train_from_setup(setup, render, config, checkpoint)


def train_from_setup(setup: TrainingSetup, render, config: TrainConfig, checkpoint=None) -> TrainResult:
    """``train`` after its set-up: ``set_up``'s (setup, render) for ``config``."""
    dev = setup.initial["means"].device
    steps, batch_size, densify, ssim_weight = config.steps, config.batch_size, config.densify, config.ssim_weight
    seed, eval_every, progress = config.seed, config.eval_every, config.progress
    scene = setup.scene
    started = time.perf_counter()
    opt = new_optimizer(setup)
    accum = GradAccumulator(opt.num_gaussians, dev) if densify else None
    psnr_steps, psnr_values, losses = [], [], np.empty(steps)
    resumed = TrainState(0, opt, accum, losses, psnr_steps, psnr_values)
    if checkpoint is not None:
        checkpoint.restore(resumed)
        accum, started = resumed.accum, started - resumed.wall_time_s

    status = TrainStatus(config.out, "single", 1, steps, batch_size, config.scene) if config.status else None
    bar = Progress(steps, enabled=progress, unit="step")
    view = None  # the first held-out view at the last evaluation [H, W, 3]
    culling = Culling() if config.cull else None
    for step in range(resumed.step + 1, steps + 1):
        opt.lrs = setup.settings.lrs(setup.extent, step)
        batch = setup.batches[step - 1]
        setup.targets.keep(batch)  # hold only this batch's images
        params = {name: p.detach() for name, p in opt.params.items()}
        kept = culling.kept_rows(params, opt.ids, scene, batch) if culling else [None] * len(batch)
        union = None if culling is None else batch_rows(kept, opt.num_gaussians)  # [u] ascending, None: all
        params = restricted(params, union)  # the batch's sums and Adam step run on these rows alone
        total = {}  # name -> the batch's gradient sum [n, ...], made by its first image
        seen = torch.zeros(len(params["means"]), dtype=torch.bool, device=dev)
        image_losses = []
        degree = setup.active_sh_degree(step)
        for cam, rows in zip(batch, kept):
            local = image_rows(rows, union, len(seen))
            result = image_gradients(render, restricted(params, local), *camera(scene, int(cam), dev), scene.width,
                                     scene.height, setup.targets[int(cam)], ssim_weight, densify is not None, degree)
            add_image(total, seen, result, local)
            if densify and rows is None:
                accum.add(result.screen_norm, result.visible, result.radii)
            elif densify:
                accum.add_rows(rows, result.screen_norm, result.visible, result.radii)
            image_losses.append(result.loss)
        losses[step - 1] = batch_loss(image_losses)
        idx = torch.nonzero(seen).squeeze(1)
        opt.step_rows(idx if union is None else union[idx], batch_gradient(total, batch_size), grad_rows=idx)
        del total
        if densify:
            accum = densify_round(opt, accum, step, steps, batch_size, setup.extent, densify, seed)
        evaluated = step % eval_every == 0 or step == steps
        if evaluated:
            psnr_steps.append(step)
            value, view = evaluate(render, opt.params, scene, setup.test_ids, setup.targets, degree,
                                   culling.kept_rows(opt.params, opt.ids, scene, setup.test_ids) if culling else None)
            psnr_values.append(value)
            bar.write(f"step {step}: held-out PSNR {psnr_values[-1]:.2f} dB, {opt.num_gaussians} Gaussians")
        if status is not None:
            status.update(step, losses, psnr_steps, psnr_values, opt.num_gaussians, time.perf_counter() - started,
                          force=evaluated, view=comparison_writer(view, setup) if evaluated else None)
        bar.update(step, f"loss {losses[step - 1]:.4f}")
        if checkpoint is not None:
            checkpoint.save(step - 1, TrainState(step, opt, accum, losses, psnr_steps, psnr_values,
                                                 time.perf_counter() - started))
    bar.close()
    wall = time.perf_counter() - started
    if status is not None:
        status.close()
    result = TrainResult(steps, opt.num_gaussians, wall, np.array(psnr_steps, np.int64), np.array(psnr_values), losses)
    if view is None:  # resumed at the last step: nothing was evaluated in this run
        view = heldout_view(render, params_of(opt), setup, steps)
    write_outputs(None, setup, params_of(opt), opt.ids, result, config, "single", 1, view)
    return result


def batch_rows(kept: list, count: int) -> torch.Tensor | None:
    """The rows [u] int64, ascending, that a batch's images render, from each image's ascending rows
    ``kept`` (a list of [g] int64) of a model of ``count`` rows; None when they are all of them (the batch
    then renders the model's tensors as they lie, with no copy of its rows)."""
    union = kept[0] if len(kept) == 1 else torch.unique(torch.cat(kept))
    return None if len(union) == count else union


def image_rows(rows, union, count: int):
    """Where an image's rows ``rows`` [g] (ascending model rows, or None: all) lie among the batch's
    ``count`` rows ``union`` ([count] ascending model rows, or None: the whole model); None when the
    image renders all of them."""
    if rows is None or len(rows) == count:
        return None
    return rows if union is None else torch.searchsorted(union, rows)


def add_image(total: dict, seen: torch.Tensor, result, rows) -> None:
    """Add one image's ``result`` (``image_gradients`` of the rows ``rows`` [g] of ``total``, distinct,
    or of all of them when None) to the batch's gradient sums ``total`` (name -> [n, ...]) and visibility
    ``seen`` [n] bool. A name not yet in ``total`` starts at zero, or, when the image renders all rows, as
    its gradient itself (0 + g = g, up to the sign of a zero, which Adam's update does not see)."""
    for name, grad in result.grads.items():
        if name not in total:
            if rows is None:
                total[name] = grad
                continue
            total[name] = grad.new_zeros((len(seen),) + grad.shape[1:])
        if rows is None:
            total[name] += grad
        else:
            total[name].index_add_(0, rows, grad)
    if rows is None:
        seen |= result.visible
    else:
        seen[rows] |= result.visible


def batch_loss(image_losses) -> float:
    """A batch's training loss: the mean of its images' losses, summed in batch order."""
    return float(sum(image_losses) / len(image_losses))


def params_of(opt: VisibleAdam) -> dict:
    """The optimizer's parameters as detached tensors (name -> [G, ...])."""
    return {name: p.detach() for name, p in opt.params.items()}


def write_outputs(comm, setup: TrainingSetup, params: dict, ids: torch.Tensor, result: TrainResult,
                  config: TrainConfig, mode: str, ranks: int, view=None, attrs: dict | None = None,
                  metrics: dict | None = None, late_metrics=None) -> dict:
    """Write the trained scene file, the optional PLY and the PNG of the first held-out view beside its
    ground truth (``odin_sched.training.outputs.write_trained``; collective on ``comm``, None for one
    process): every rank passes its Gaussians ``params`` (name -> [n, ...]) and their ``ids`` [n], rank 0
    the rendered view [H, W, 3] (``heldout_view``) and, besides the run's settings, ``mode`` and
    ``ranks``, the root attributes ``attrs`` and ``/metrics`` entries ``metrics`` (the other ranks'
    are not used); ``late_metrics``: more entries known only when the outputs are all but written
    (see ``write_trained``, which gives the return value: rank 0's ``/metrics`` entries)."""
    attrs = {"steps": result.steps, "final_psnr": result.final_psnr, "wall_time_s": result.wall_time_s,
             "num_gaussians": result.num_gaussians, "mode": mode, "ranks": ranks, "batch_size": config.batch_size,
             "steps_per_second": result.steps / result.wall_time_s, "seed": config.seed,
             "ssim_weight": config.ssim_weight, "densify": config.densify is not None,
             "source_scene": os.path.abspath(config.scene), "device": config.device,
             "sh_degree": setup.sh_degree, **(attrs or {})}
    metrics = {"psnr_steps": result.psnr_steps, "psnr": result.psnr, "loss": result.losses, **(metrics or {})}
    arrays = {k: v.detach().cpu().numpy().astype(np.float32, copy=False) for k, v in params.items()}
    paths = OutputPaths(config.out, config.ply, config.png_path)
    return write_trained(comm, ids.cpu().numpy(), arrays, config.scene, paths,
                         None if view is None else view.cpu().numpy(), metrics, attrs, late_metrics=late_metrics)


@torch.no_grad()
def heldout_view(render, params: dict, setup: TrainingSetup, step: int) -> torch.Tensor:
    """The first held-out view [H, W, 3] rendered with ``params`` at the SH degree of batch ``step``."""
    view, _ = _render_view(render, params, setup.scene, int(setup.test_ids[0]), setup.active_sh_degree(step))
    return view


def comparison_writer(view: torch.Tensor, setup: TrainingSetup):
    """A function writing the PNG of ``view`` [H, W, 3], the first held-out camera's rendering (as
    ``evaluate`` returns it), beside its ground truth to the path it is given."""
    truth = setup.targets[int(setup.test_ids[0])]
    return lambda path: save_comparison_png(path, view.cpu().numpy(), truth.cpu().numpy())
