"""Single-process Gaussian-splatting training (the logic behind ``pregel train``).

Starts from the scene's initial point cloud (``/init``; scales from the mean distance to the 3 nearest
neighbours, identity rotations, opacity 0.1, as 3DGS initialises from SfM points), and trains against
the images of the training cameras:

* loss (1 - w) L1 + w (1 - SSIM), w = ``ssim_weight`` (3DGS uses 0.2; 0 gives plain L1);
* cameras visited in a fixed order drawn from ``seed`` (a fresh permutation every pass);
* visible Adam (``odin_sched.optim``): only the Gaussians the step's camera sees are updated; the
  means' learning rate decays exponentially from 1.6e-4 to 1.6e-6 times the scene extent, as in 3DGS;
* optional densification (``odin_sched.densify``) on its schedule;
* PSNR on the held-out cameras (``/cameras/heldout``, else every 8th) every ``eval_every`` steps, shown
  on the progress bar and saved.

The trained scene is written in the scene format (the input's cameras, images and held-out split with
the trained Gaussians) with ``/metrics/psnr_steps``, ``/metrics/psnr``, ``/metrics/loss`` and root
attributes ``steps``, ``seed``, ``ssim_weight``, ``final_psnr``, ``wall_time_s``, ``num_gaussians``;
optionally a 3DGS PLY; and a PNG of the first held-out view rendered beside its ground truth.
"""
import math
import os
import time
from dataclasses import dataclass

import numpy as np
import torch

from odin_sched.densify import DensifyConfig, GradAccumulator, densify_and_prune, screen_grad_norm
from odin_sched.metrics import psnr, ssim
from odin_sched.optim import DEFAULT_LR, VisibleAdam, default_lrs
from odin_sched.ply import write_ply
from odin_sched.scene_io import Scene, read_scene, write_scene
from odin_sched.scene_gen import HOLDOUT_EVERY
from pregel.atomic import check_writable
from pregel.errors import InputError

INIT_OPACITY = 0.1
MEANS_LR_FINAL_FACTOR = 0.01  # 1.6e-4 -> 1.6e-6
KNN_CHUNK = 2048


@dataclass
class TrainResult:
    """What a training run measured."""

    steps: int
    num_gaussians: int
    wall_time_s: float
    psnr_steps: np.ndarray  # [E] int64, steps at which held-out PSNR was measured
    psnr: np.ndarray        # [E] float64, mean held-out PSNR (dB)
    losses: np.ndarray      # [steps] float64, training loss per step

    @property
    def final_psnr(self) -> float:
        return float(self.psnr[-1])


def knn_scales(points: torch.Tensor, k: int = 3) -> torch.Tensor:
    """Initial log scales: log sqrt(mean squared distance to the k nearest other points), per point.

    points: torch.Tensor  # [P, 3]
    Returns torch.Tensor  # [P, 3] (the same value on the three axes)
    """
    p = points.shape[0]
    k = min(k, p - 1)
    if k < 1:
        return torch.zeros(p, 3)
    mean_sq = torch.empty(p)
    for start in range(0, p, KNN_CHUNK):  # chunks of points, each against all points at once
        d2 = torch.cdist(points[start:start + KNN_CHUNK], points) ** 2
        nearest = torch.topk(d2, k + 1, dim=1, largest=False).values[:, 1:]  # drop the point itself
        mean_sq[start:start + KNN_CHUNK] = nearest.mean(dim=1)
    return (0.5 * torch.log(mean_sq.clamp(min=1e-7)))[:, None].repeat(1, 3)


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


def scene_extent(viewmats: np.ndarray) -> float:
    """3DGS's camera extent: 1.1 x the largest distance of a camera centre from their mean.

    viewmats: np.ndarray  # [C, 4, 4] world-to-camera
    """
    rot, trans = viewmats[:, :3, :3].astype(np.float64), viewmats[:, :3, 3].astype(np.float64)
    centres = -np.einsum("cji,cj->ci", rot, trans)  # -R^T t
    radius = float(np.linalg.norm(centres - centres.mean(axis=0), axis=1).max())
    return 1.1 * radius if radius > 0 else 1.0


def camera_order(train_ids: np.ndarray, steps: int, seed: int) -> np.ndarray:
    """The training cameras for ``steps`` steps: consecutive seeded permutations of ``train_ids``."""
    gen = torch.Generator().manual_seed(seed)
    passes = -(-steps // len(train_ids))
    perms = [torch.randperm(len(train_ids), generator=gen) for _ in range(passes)]
    return train_ids[torch.cat(perms).numpy()[:steps]]


def heldout_mask(scene: Scene) -> np.ndarray:
    """Held-out cameras: the file's ``/cameras/heldout`` or else every 8th camera (bool [C])."""
    if scene.heldout is not None:
        return scene.heldout
    return np.arange(scene.num_cameras) % HOLDOUT_EVERY == 0


def _render_view(render, params, scene, cam):
    return render(**params, viewmat=torch.from_numpy(scene.viewmats[cam]), K=torch.from_numpy(scene.Ks[cam]),
                  width=scene.width, height=scene.height)


@torch.no_grad()
def evaluate(render, params: dict, scene: Scene, cams: np.ndarray, targets: dict) -> float:
    """Mean PSNR (dB) over the cameras ``cams``; targets maps camera -> image tensor [H, W, 3]."""
    values = [psnr(_render_view(render, params, scene, c)[0].clamp(0, 1), targets[c]).item() for c in cams]
    return float(np.mean(values))


def save_comparison_png(path, rendered: torch.Tensor, truth: torch.Tensor) -> None:
    """PNG of a rendered view (left) beside its ground truth (right); images [H, W, 3] in [0, 1]."""
    from PIL import Image

    both = torch.cat([rendered.clamp(0, 1), truth], dim=1).numpy()
    Image.fromarray(np.round(both * 255).astype(np.uint8)).save(path)


def train(scene_path, steps: int, out_path, ply_path=None, png_path=None, seed: int = 0,
          ssim_weight: float = 0.2, densify: DensifyConfig | None = None, eval_every: int = 100,
          progress: bool = True) -> TrainResult:
    """Train Gaussians on a scene file from its initial point cloud and write the results.

    scene_path: input scene (with /init); steps: training steps (one image each);
    out_path: trained scene file; ply_path: optional 3DGS PLY; png_path: comparison PNG
    (default: out_path with .png); densify: None for no densification.
    Returns a TrainResult.
    """
    from kernels.splat import render
    from tqdm import tqdm

    if steps < 1:
        raise InputError(f"--steps must be at least 1, got {steps}")
    if not 0.0 <= ssim_weight <= 1.0:
        raise InputError(f"--ssim-weight must be in [0, 1], got {ssim_weight}")
    if eval_every < 1:
        raise InputError(f"eval_every must be at least 1, got {eval_every}")
    png_path = png_path or os.path.splitext(os.fspath(out_path))[0] + ".png"
    for path in (out_path, ply_path, png_path):
        if path is not None:
            check_writable(path)
    scene = read_scene(scene_path)
    if scene.init_means is None:
        raise InputError.at(scene_path, "/init", "no initial point cloud to train from "
                            "(make the scene with `pregel generate-scene`)")
    held = heldout_mask(scene)
    train_ids, test_ids = np.flatnonzero(~held), np.flatnonzero(held)
    if len(train_ids) == 0 or len(test_ids) == 0:
        raise InputError.at(scene_path, "/cameras/heldout", "needs at least one training and one held-out camera")

    started = time.perf_counter()
    images = torch.from_numpy(scene.images).float() / 255.0
    targets = {int(c): images[c] for c in range(scene.num_cameras)}
    extent = scene_extent(scene.viewmats)
    lrs = default_lrs(extent)
    opt = VisibleAdam(init_gaussians(scene.init_means, scene.init_colors), lrs)
    accum = GradAccumulator(opt.num_gaussians) if densify else None
    densify_gen = torch.Generator().manual_seed(seed + 1)
    order = camera_order(train_ids, steps, seed)
    psnr_steps, psnr_values, losses = [], [], np.empty(steps)

    bar = tqdm(total=steps, disable=not progress, desc="train", unit="step")
    for step in range(1, steps + 1):
        cam = int(order[step - 1])
        progress_frac = (step - 1) / max(1, steps - 1)
        opt.lrs["means"] = DEFAULT_LR["means"] * extent * MEANS_LR_FINAL_FACTOR ** progress_frac
        image, visible = _render_view(render, opt.params, scene, cam)
        l1 = torch.abs(image - targets[cam]).mean()
        loss = (1.0 - ssim_weight) * l1 + ssim_weight * (1.0 - ssim(image, targets[cam])) if ssim_weight else l1
        loss.backward()
        losses[step - 1] = loss.item()
        if densify:
            accum.add(screen_grad_norm(opt.params["means"].detach(), opt.params["means"].grad,
                                       torch.from_numpy(scene.viewmats[cam]), torch.from_numpy(scene.Ks[cam]),
                                       scene.width, scene.height), visible)
        opt.step(visible)
        opt.zero_grad()
        if densify and densify.due(step):
            new, source = densify_and_prune({k: v.detach() for k, v in opt.params.items()}, accum.average(),
                                            extent, densify, densify_gen)
            opt.replace(new, source)
            accum = GradAccumulator(opt.num_gaussians)
        if step % eval_every == 0 or step == steps:
            psnr_steps.append(step)
            psnr_values.append(evaluate(render, opt.params, scene, test_ids, targets))
            bar.write(f"step {step}: held-out PSNR {psnr_values[-1]:.2f} dB, {opt.num_gaussians} Gaussians")
            bar.set_postfix(psnr=f"{psnr_values[-1]:.2f}", loss=f"{losses[step - 1]:.4f}")
        bar.update(1)
    bar.close()
    wall = time.perf_counter() - started

    params = {k: v.detach().numpy().astype(np.float32) for k, v in opt.params.items()}
    result = TrainResult(steps, opt.num_gaussians, wall, np.array(psnr_steps, np.int64),
                         np.array(psnr_values), losses)
    trained = Scene(**params, viewmats=scene.viewmats, Ks=scene.Ks, images=scene.images, width=scene.width,
                    height=scene.height, heldout=held,
                    metrics={"psnr_steps": result.psnr_steps, "psnr": result.psnr, "loss": losses},
                    attrs={"steps": steps, "seed": seed, "ssim_weight": ssim_weight, "final_psnr": result.final_psnr,
                           "wall_time_s": wall, "num_gaussians": opt.num_gaussians,
                           "densify": densify is not None, "source_scene": os.path.abspath(scene_path)})
    write_scene(out_path, trained)
    if ply_path is not None:
        write_ply(ply_path, **params)
    with torch.no_grad():
        view, _ = _render_view(render, opt.params, scene, int(test_ids[0]))
    save_comparison_png(png_path, view, targets[int(test_ids[0])])
    return result


def main(args) -> TrainResult:
    """Entry for ``pregel train``: ``args`` has scene, steps, out, ply, png, seed, ssim_weight, eval_every,
    densify (bool) and densify_from, densify_until, densify_interval, densify_grad_threshold."""
    config = None
    if args.densify:
        try:
            config = DensifyConfig(interval=args.densify_interval, start=args.densify_from,
                                   stop=args.densify_until, grad_threshold=args.densify_grad_threshold)
        except ValueError as err:
            raise InputError(f"--densify options: {err}") from None
    result = train(args.scene, args.steps, args.out, ply_path=args.ply, png_path=args.png, seed=args.seed,
                   ssim_weight=args.ssim_weight, densify=config, eval_every=args.eval_every)
    print(f"wrote {args.out}: {result.steps} steps, {result.num_gaussians} Gaussians, "
          f"held-out PSNR {result.final_psnr:.2f} dB, {result.wall_time_s:.1f} s")
    return result
