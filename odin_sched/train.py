"""Gaussian-splatting training on one process (the logic behind ``pregel train`` on one rank), and the
setup that the distributed trainer (``odin_sched.odin``) shares with it.

Starts from the scene's initial point cloud (``/init``; scales from the mean distance to the 3 nearest
neighbours, identity rotations, opacity 0.1, as 3DGS initialises from SfM points) or from a 3DGS PLY,
and trains against the images of the training cameras:

* loss (1 - w) L1 + w (1 - SSIM), w = ``ssim_weight`` (3DGS uses 0.2; 0 gives plain L1);
* batches of B images in the order of ``odin_sched.image_order``; the batch semantics (gradients
  summed in batch order then divided by B, Grendel-GS's hyperparameter scaling) are in
  ``odin_sched.step``;
* visible Adam (``odin_sched.optim``): only the Gaussians the batch sees are updated; the means'
  learning rate decays exponentially from 1.6e-4 to 1.6e-6 times the scene extent over 30,000 images,
  as in 3DGS (``odin_sched.step.BatchSettings``);
* densification and opacity resets (``odin_sched.densify``) on the reference's schedule, or none;
* PSNR on the held-out cameras (``/cameras/heldout``, else every 8th) every ``eval_every`` steps;
* on the CPU, or with ``device='cuda'`` on this process's GPU (``training_device``): the Gaussians,
  their Adam state and the images live there, and rendering, the loss, the backward pass, visible Adam
  and densification run there; the metrics and the outputs are copied to the host to be written.

The trained scene is written in the scene format (the input's cameras, images and held-out split with
the trained Gaussians) with ``/metrics/psnr_steps``, ``/metrics/psnr``, ``/metrics/loss`` and root
attributes ``steps``, ``seed``, ``ssim_weight``, ``final_psnr``, ``wall_time_s``, ``num_gaussians``,
``mode``, ``ranks``, ``batch_size``, ``steps_per_second``, ``device``; optionally a 3DGS PLY; and a PNG of the
first held-out view rendered beside its ground truth.
"""
import functools
import math
import os
import time
from dataclasses import dataclass, replace

import numpy as np
import torch

from odin_sched.densify import DensifyConfig, GradAccumulator, densify_round
from odin_sched.image_order import (IMAGE_ORDERS, ORDER_CELLS, ORDER_WINDOW, resolved_order, shuffled_batches,
                                     spread_batches)
from odin_sched.knn import knn_scales
from odin_sched.metrics import psnr
from odin_sched.optim import VisibleAdam, default_lrs
from odin_sched.ply import read_gaussians_ply, write_ply
from odin_sched.scene_io import Scene, read_scene, write_scene
from odin_sched.scene_gen import HOLDOUT_EVERY
from odin_sched.step import POSITION_LR_MAX_STEPS, BatchSettings, batch_gradient, image_gradients
from odin_sched.train_checkpoint import TrainState, train_checkpointer
from pregel.atomic import check_writable
from pregel.errors import InputError
from pregel.progress import Progress

INIT_OPACITY = 0.1
NO_CUDA_CHECKPOINTS = "--device cuda: checkpoints (--checkpoint-dir, --resume) are not supported on the GPU yet"


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


def init_gaussians(means: np.ndarray, colors: np.ndarray) -> dict:
    """Gaussian parameters from a point cloud (3DGS initialisation).

    means: np.ndarray   # [P, 3] float32
    colors: np.ndarray  # [P, 3] float32 RGB
    Returns dict of float32 tensors: means [P, 3], scales [P, 3], quats [P, 4], opacities [P], colors [P, 3].
    """
    pts = torch.from_numpy(np.ascontiguousarray(means, dtype=np.float32))
    p = pts.shape[0]
    quats = torch.zeros(p, 4)
    quats[:, 0] = 1.0
    return {
        "means": pts,
        "scales": knn_scales(pts),
        "quats": quats,
        "opacities": torch.full((p,), math.log(INIT_OPACITY / (1.0 - INIT_OPACITY))),
        "colors": torch.from_numpy(np.ascontiguousarray(colors, dtype=np.float32)),
    }


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


def heldout_mask(scene: Scene) -> np.ndarray:
    """Held-out cameras: the file's ``/cameras/heldout`` or else every 8th camera (bool [C])."""
    if scene.heldout is not None:
        return scene.heldout
    return np.arange(scene.num_cameras) % HOLDOUT_EVERY == 0


def _render_view(render, params, scene, cam):
    viewmat, K = camera(scene, cam, params["means"].device)
    return render(**params, viewmat=viewmat, K=K, width=scene.width, height=scene.height)


@torch.no_grad()
def evaluate(render, params: dict, scene: Scene, cams: np.ndarray, targets: dict) -> float:
    """Mean PSNR (dB) over the cameras ``cams``; targets maps camera -> image tensor [H, W, 3]."""
    values = [psnr(_render_view(render, params, scene, c)[0].clamp(0, 1), targets[c]).item() for c in cams]
    return float(np.mean(values))


def save_comparison_png(path, rendered: torch.Tensor, truth: torch.Tensor) -> None:
    """PNG of a rendered view (left) beside its ground truth (right); images [H, W, 3] in [0, 1]."""
    from PIL import Image

    both = torch.cat([rendered.clamp(0, 1), truth], dim=1).cpu().numpy()
    Image.fromarray(np.round(both * 255).astype(np.uint8)).save(path)


def visible_cells_of_cameras(means: np.ndarray, scales: np.ndarray, viewmats: np.ndarray, Ks: np.ndarray,
                             width: int, height: int, settings: BatchSettings, extent: float) -> np.ndarray:
    """bool [C, ORDER_CELLS]: the k-d cells of the initial Gaussians (means, log scales [G, 3]) each
    camera (viewmats [C, 4, 4], Ks [C, 3, 3]) may see within a window of ``ORDER_WINDOW`` batches (the
    distributed trainer's prediction with its default window; fixed here so that the order depends on
    the scene, the seed and B only)."""
    from odin_sched.cells import cell_bounds, kd_cells
    from odin_sched.visibility import predict_visible_cells, window_margin

    cells = min(ORDER_CELLS, len(means))
    bounds = cell_bounds(means, scales, kd_cells(means, cells), cells)
    lrs = settings.lrs(extent, 1)
    margin = window_margin(lrs["means"], lrs["scales"], settings.betas, ORDER_WINDOW)
    return predict_visible_cells(bounds, viewmats, Ks, width, height, margin)


@dataclass
class TrainingSetup:
    """Everything both trainers derive from the scene file and the options before the first step."""

    scene: Scene
    targets: dict          # camera -> image tensor [H, W, 3] in [0, 1]
    train_ids: np.ndarray  # [C_train] cameras trained on
    test_ids: np.ndarray   # [C_test] held-out cameras
    extent: float
    batches: np.ndarray    # [steps, B] camera of each image of each batch
    settings: BatchSettings
    initial: dict          # name -> float32 tensor [G, ...], the initial Gaussians


def prepare(scene_path, steps: int, batch_size: int, seed: int, ssim_weight: float, eval_every: int,
            outputs, init_ply=None, image_order: str | None = None,
            position_lr_max_steps: int = POSITION_LR_MAX_STEPS) -> TrainingSetup:
    """Check the options and the output paths, read the scene and set up training (every rank does the
    same, deterministically). ``outputs``: the paths that will be written (None entries ignored);
    ``init_ply``: start from the Gaussians of a 3DGS PLY instead of the scene's point cloud;
    ``image_order``: 'shuffled' or 'spread' (see ``odin_sched.image_order``; default: shuffled for
    B = 1, spread otherwise); ``position_lr_max_steps``: images over which the means' learning rate
    decays (``odin_sched.step.BatchSettings``)."""
    if steps < 1:
        raise InputError(f"--steps must be at least 1, got {steps}")
    if batch_size < 1:
        raise InputError(f"--batch-size must be at least 1, got {batch_size}")
    if not 0.0 <= ssim_weight <= 1.0:
        raise InputError(f"--ssim-weight must be in [0, 1], got {ssim_weight}")
    if eval_every < 1:
        raise InputError(f"--eval-every must be at least 1, got {eval_every}")
    if position_lr_max_steps < 1:
        raise InputError(f"--position-lr-max-steps must be at least 1, got {position_lr_max_steps}")
    image_order = resolved_order(image_order, batch_size)
    if image_order not in IMAGE_ORDERS:
        raise InputError(f"--image-order must be one of {', '.join(IMAGE_ORDERS)}, got {image_order!r}")
    outputs = [path for path in outputs if path is not None]
    for i, path in enumerate(outputs):  # no output may overwrite an input or another output
        check_writable(path, inputs=[scene_path, *([init_ply] if init_ply else []), *outputs[:i]])
    scene = read_scene(scene_path)
    if init_ply is not None:
        initial = {name: torch.from_numpy(np.ascontiguousarray(value))
                   for name, value in read_gaussians_ply(init_ply).items()}
    elif scene.init_means is None:
        raise InputError.at(scene_path, "/init", "no initial point cloud to train from "
                            "(make the scene with `pregel generate-scene`, or give --init-ply)")
    else:
        initial = init_gaussians(scene.init_means, scene.init_colors)
    held = heldout_mask(scene)
    train_ids, test_ids = np.flatnonzero(~held), np.flatnonzero(held)
    if len(train_ids) == 0 or len(test_ids) == 0:
        raise InputError.at(scene_path, "/cameras/heldout", "needs at least one training and one held-out camera")
    if batch_size > len(train_ids):
        raise InputError(f"--batch-size {batch_size} is more than the {len(train_ids)} training cameras of {scene_path}")
    images = torch.from_numpy(scene.images).float() / 255.0
    settings, extent = BatchSettings(batch_size, position_lr_max_steps), scene_extent(scene.viewmats)
    if image_order == "spread":
        sees = visible_cells_of_cameras(initial["means"].numpy(), initial["scales"].numpy(), scene.viewmats,
                                        scene.Ks, scene.width, scene.height, settings, extent)
        batches = spread_batches(train_ids, steps, batch_size, seed, sees)
    else:
        batches = shuffled_batches(train_ids, steps, batch_size, seed)
    return TrainingSetup(scene, {int(c): images[c] for c in range(scene.num_cameras)}, train_ids, test_ids,
                         extent, batches, settings, initial)


def camera(scene: Scene, cam: int, device="cpu") -> tuple:
    """(viewmat [4, 4], K [3, 3]) tensors of camera ``cam`` on ``device``."""
    return torch.from_numpy(scene.viewmats[cam]).to(device), torch.from_numpy(scene.Ks[cam]).to(device)


def training_device(device: str, comm=None):
    """(torch device, render) of ``device`` 'cpu' or 'cuda' for the trainers.

    'cuda' selects this rank's GPU (``pregel.device.select_gpu`` on ``comm``, collective; default: the
    whole job; one ``InputError`` line on every rank when one sees none) and its torch device. Under
    Numba's CUDA simulator that torch device is the CPU (``pregel.device_path.torch_device``), and
    ``render`` is told to run its CUDA kernels anyway.
    """
    from kernels.splat import render

    if device not in ("cpu", "cuda"):
        raise InputError(f"--device must be cpu or cuda, got {device!r}")
    if device == "cpu":
        return torch.device("cpu"), render
    from kernels._device import SIMULATED
    from pregel.comm import Comm
    from pregel.device import select_gpu
    from pregel.device_path import torch_device

    index = select_gpu(comm or Comm())
    if not (SIMULATED or torch.cuda.is_available()):
        raise InputError("--device cuda: this torch is a CPU-only build (install a CUDA build of torch)")
    return torch.device(torch_device(index)), functools.partial(render, on_device=True)


def to_device(setup: TrainingSetup, device) -> TrainingSetup:
    """``setup`` with the initial Gaussians and the camera images copied to ``device``."""
    return replace(setup, initial={name: value.to(device) for name, value in setup.initial.items()},
                   targets={cam: image.to(device) for cam, image in setup.targets.items()})


def train(scene_path, steps: int, out_path, ply_path=None, png_path=None, seed: int = 0,
          ssim_weight: float = 0.2, densify: DensifyConfig | None = None, eval_every: int = 100,
          progress: bool = True, batch_size: int = 1, init_ply=None, image_order: str | None = None,
          checkpoint=None, device: str = "cpu", position_lr_max_steps: int = POSITION_LR_MAX_STEPS) -> TrainResult:
    """Train Gaussians on a scene file from its initial point cloud, on one process, and write the results.

    scene_path: input scene (with /init); steps: training steps (one batch of ``batch_size`` images
    each, see ``odin_sched.step`` for the batch semantics); out_path: trained scene file; ply_path:
    optional 3DGS PLY; png_path: comparison PNG (default: out_path with .png); densify: None for no
    densification; init_ply: a 3DGS PLY to start from instead of the scene's /init point cloud;
    image_order, position_lr_max_steps: see ``prepare``; checkpoint: an
    ``odin_sched.train_checkpoint.TrainCheckpointer`` or None (CPU only); device: 'cpu' or 'cuda' (see
    ``training_device``).
    Returns a TrainResult.
    """
    if device == "cuda" and checkpoint is not None:
        raise InputError(NO_CUDA_CHECKPOINTS)
    dev, render = training_device(device)
    png_path = png_path or os.path.splitext(os.fspath(out_path))[0] + ".png"
    setup = prepare(scene_path, steps, batch_size, seed, ssim_weight, eval_every, (out_path, ply_path, png_path),
                    init_ply, image_order, position_lr_max_steps)
    setup = to_device(setup, dev)
    scene = setup.scene
    started = time.perf_counter()
    opt = VisibleAdam(setup.initial, default_lrs(setup.extent), betas=setup.settings.betas, eps=setup.settings.eps)
    accum = GradAccumulator(opt.num_gaussians, dev) if densify else None
    densify_gen = torch.Generator().manual_seed(seed + 1)
    psnr_steps, psnr_values, losses = [], [], np.empty(steps)
    resumed = TrainState(0, opt, accum, densify_gen, losses, psnr_steps, psnr_values)
    if checkpoint is not None:
        checkpoint.restore(resumed)
        accum, started = resumed.accum, started - resumed.wall_time_s

    bar = Progress(steps, enabled=progress, unit="step")
    for step in range(resumed.step + 1, steps + 1):
        opt.lrs = setup.settings.lrs(setup.extent, step)
        params = {name: p.detach() for name, p in opt.params.items()}
        total = {name: torch.zeros_like(p) for name, p in params.items()}
        seen = torch.zeros(opt.num_gaussians, dtype=torch.bool, device=dev)
        image_losses = []
        for cam in setup.batches[step - 1]:
            result = image_gradients(render, params, *camera(scene, int(cam), dev), scene.width, scene.height,
                                     setup.targets[int(cam)], ssim_weight, densify is not None)
            for name in total:
                total[name] += result.grads[name]
            seen |= result.visible
            image_losses.append(result.loss)
            if densify:
                accum.add(result.screen_norm, result.visible, result.radii)
        losses[step - 1] = batch_loss(image_losses)
        idx = torch.nonzero(seen).squeeze(1)
        opt.step_rows(idx, {name: g[idx] for name, g in batch_gradient(total, batch_size).items()})
        if densify:
            accum = densify_round(opt, accum, step, steps, batch_size, setup.extent, densify, densify_gen)
        if step % eval_every == 0 or step == steps:
            psnr_steps.append(step)
            psnr_values.append(evaluate(render, opt.params, scene, setup.test_ids, setup.targets))
            bar.write(f"step {step}: held-out PSNR {psnr_values[-1]:.2f} dB, {opt.num_gaussians} Gaussians")
        bar.update(step, f"loss {losses[step - 1]:.4f}")
        if checkpoint is not None:
            checkpoint.save(step - 1, TrainState(step, opt, accum, densify_gen, losses, psnr_steps, psnr_values,
                                                 time.perf_counter() - started))
    bar.close()
    wall = time.perf_counter() - started
    result = TrainResult(steps, opt.num_gaussians, wall, np.array(psnr_steps, np.int64), np.array(psnr_values), losses)
    attrs = {"mode": "single", "ranks": 1, "batch_size": batch_size, "steps_per_second": steps / wall,
             "device": device}
    write_outputs(render, setup, params_of(opt), result, out_path, ply_path, png_path,
                  dict(seed=seed, ssim_weight=ssim_weight, densify=densify is not None,
                       source_scene=os.path.abspath(scene_path), **attrs))
    return result


def batch_loss(image_losses) -> float:
    """A batch's training loss: the mean of its images' losses, summed in batch order."""
    return float(sum(image_losses) / len(image_losses))


def params_of(opt: VisibleAdam) -> dict:
    """The optimizer's parameters as detached tensors (name -> [G, ...])."""
    return {name: p.detach() for name, p in opt.params.items()}


def write_outputs(render, setup: TrainingSetup, params: dict, result: TrainResult, out_path, ply_path, png_path,
                  attrs: dict, metrics: dict | None = None) -> None:
    """Write the trained scene file (with ``/metrics`` and root ``attrs``), the optional PLY and the PNG of
    the first held-out view beside its ground truth."""
    scene = setup.scene
    arrays = {k: v.cpu().numpy().astype(np.float32) for k, v in params.items()}
    trained = Scene(**arrays, viewmats=scene.viewmats, Ks=scene.Ks, images=scene.images, width=scene.width,
                    height=scene.height, heldout=heldout_mask(scene),
                    metrics={"psnr_steps": result.psnr_steps, "psnr": result.psnr, "loss": result.losses,
                             **(metrics or {})},
                    attrs={"steps": result.steps, "final_psnr": result.final_psnr, "wall_time_s": result.wall_time_s,
                           "num_gaussians": result.num_gaussians, **attrs})
    write_scene(out_path, trained)
    if ply_path is not None:
        write_ply(ply_path, **arrays)
    with torch.no_grad():
        view, _ = _render_view(render, params, scene, int(setup.test_ids[0]))
    save_comparison_png(png_path, view, setup.targets[int(setup.test_ids[0])])


def main(args) -> TrainResult:
    """Entry for ``pregel train`` (see ``pregel train --help`` for ``args``): the single-process trainer on
    one rank, the distributed trainer (``odin_sched.odin``) on several ranks or when ``--mode`` is given."""
    from pregel.comm import Comm

    config = None
    if args.densify:
        try:
            config = DensifyConfig(interval=args.densify_interval, start=args.densify_from, stop=args.densify_until,
                                   grad_threshold=args.densify_grad_threshold,
                                   opacity_reset_interval=args.opacity_reset_interval)
        except ValueError as err:
            raise InputError(f"--densify options: {err}") from None
    common = dict(ply_path=args.ply, png_path=args.png, seed=args.seed, ssim_weight=args.ssim_weight,
                  densify=config, eval_every=args.eval_every, batch_size=args.batch_size, init_ply=args.init_ply,
                  image_order=args.image_order, position_lr_max_steps=args.position_lr_max_steps)
    comm = Comm()
    single = comm.size == 1 and args.mode is None and args.timeline is None and args.schedule_out is None
    comm.agree(_device_problem(args))
    common["checkpoint"] = train_checkpointer(comm, args, config)
    if single:
        for flag, value in (("--window", args.window), ("--cells", args.cells)):
            if value is not None and value < 1:
                raise InputError(f"{flag} must be at least 1, got {value}")
        result = train(args.scene, args.steps, args.out, device=args.device, **common)
    else:
        from odin_sched.odin import OdinOptions, train_distributed

        window = OdinOptions.window if args.window is None else args.window
        options = OdinOptions(mode=args.mode or "odin", cells=args.cells, window=window, timeline=args.timeline,
                              schedule_out=args.schedule_out, max_staleness=args.max_staleness,
                              stale_impact=args.stale_impact)
        result = train_distributed(comm, args.scene, args.steps, args.out, options, device=args.device,
                                   **common)
        if comm.rank != 0:
            return result
    print(f"wrote {args.out}: {result.steps} steps, {result.num_gaussians} Gaussians, "
          f"held-out PSNR {result.final_psnr:.2f} dB, {result.wall_time_s:.1f} s")
    if result.per_rank is not None and args.stats:
        print(format_per_rank(result))
    return result


def _device_problem(args) -> InputError | None:
    """Why ``pregel train --device cuda`` cannot run with these options (checkpoints), or None."""
    if args.device == "cuda" and (args.checkpoint_dir is not None or args.resume is not None):
        return InputError(NO_CUDA_CHECKPOINTS)
    return None


def format_per_rank(result: TrainResult) -> str:
    """The per-rank time and traffic table of a distributed run, and its speed."""
    from odin_sched.odin import RANK_FIELDS

    header = "rank " + " ".join(f"{name:>15}" for name in RANK_FIELDS)
    rows = [f"{r:>4} " + " ".join(f"{v:>15.3f}" if "seconds" in name else f"{int(v):>15,}"
                                  for name, v in zip(RANK_FIELDS, row))
            for r, row in enumerate(result.per_rank)]
    return "\n".join([header, *rows, f"{result.steps / result.wall_time_s:.2f} steps/s, "
                                      f"{result.visibility_violations} visibility violations"])
