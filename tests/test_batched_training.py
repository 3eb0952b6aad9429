"""Batched training on one process against a plain torch implementation of the same batch semantics.

The oracle renders the batch's images from the same parameters, lets autograd sum their gradients in
batch order (one backward per image) and divides by B, then applies a textbook masked Adam with the
Grendel-GS scaling (lr x sqrt(B), eps / sqrt(B), betas ** B) written out here, per-Gaussian step
counts included. The SH degree rises every SH_INTERVAL images (patched down from 1,000 so that a
short run goes through degrees 0 to 3).
"""
import math

import numpy as np
import pytest
import torch

from kernels.splat import render
from odin_sched.training.metrics import ssim
from odin_sched.training.optim import DEFAULT_LR
from odin_sched.scenes.scene_gen import generate_scene
from odin_sched.scenes.scene_io import heldout_mask, read_scene, write_scene
from odin_sched.training.image_order import camera_order, shuffled_batches, spread_batches
from odin_sched.scenes.point_cloud import init_gaussians
from odin_sched.training.train import TrainConfig, scene_extent, train

NAMES = ("means", "scales", "quats", "opacities", "sh0", "shN")
STEPS = 6
SH_INTERVAL = 2


@pytest.fixture(scope="module")
def scene_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("batched") / "scene.h5"
    write_scene(path, generate_scene(300, 12, 24, 20, seed=2))
    return path


def _oracle(scene, batches, ssim_weight, position_lr_init=DEFAULT_LR["means"]):
    b = batches.shape[1]
    params = {k: v.clone().requires_grad_(True) for k, v in init_gaussians(scene.init_means, scene.init_colors).items()}
    m = {k: torch.zeros_like(v) for k, v in params.items()}
    v2 = {k: torch.zeros_like(v) for k, v in params.items()}
    t = torch.zeros(params["means"].shape[0])
    beta1, beta2, eps = 0.9 ** b, 0.999 ** b, 1e-15 / math.sqrt(b)
    extent = scene_extent(scene.viewmats)
    images = torch.from_numpy(scene.images).float() / 255
    for step, cams in enumerate(batches):
        lr = {k: DEFAULT_LR[k] * math.sqrt(b) for k in NAMES}
        # the reference's get_expon_lr_func at iteration = the batch's first image, over 30,000 images
        lr["means"] = position_lr_init * extent * 0.01 ** ((step * b + 1) / 30_000) * math.sqrt(b)
        seen = torch.zeros_like(t, dtype=torch.bool)
        for cam in cams:
            image, visible = render(**{k: params[k] for k in NAMES[:4]},
                                    colors=torch.cat([params["sh0"], params["shN"]], dim=1),
                                    sh_degree=min(3, (step + 1) * b // SH_INTERVAL),
                                    viewmat=torch.from_numpy(scene.viewmats[cam]),
                                    K=torch.from_numpy(scene.Ks[cam]), width=scene.width, height=scene.height)
            target = images[cam]
            loss = (1 - ssim_weight) * (image - target).abs().mean() + ssim_weight * (1 - ssim(image, target))
            loss.backward()  # autograd adds this image's gradient to .grad
            seen |= visible
        with torch.no_grad():
            t[seen] += 1
            for k, p in params.items():
                g = p.grad[seen] / b
                m[k][seen] = beta1 * m[k][seen] + (1 - beta1) * g
                v2[k][seen] = beta2 * v2[k][seen] + (1 - beta2) * g * g
                shape = (-1,) + (1,) * (g.dim() - 1)
                m_hat = m[k][seen] / (1 - beta1 ** t[seen]).view(shape)
                v_hat = v2[k][seen] / (1 - beta2 ** t[seen]).view(shape)
                p[seen] -= lr[k] * m_hat / (v_hat.sqrt() + eps)
                p.grad = None
    return {k: v.detach() for k, v in params.items()}


def _trained(scene) -> dict:
    """The trained parameters of a scene file by trainer name (the SH coefficients split)."""
    out = {name: torch.from_numpy(getattr(scene, name)) for name in NAMES[:4]}
    return {**out, "sh0": torch.from_numpy(scene.sh[:, :1]), "shN": torch.from_numpy(scene.sh[:, 1:])}


@pytest.mark.parametrize("batch_size,position_lr_init", [(1, DEFAULT_LR["means"]), (3, DEFAULT_LR["means"]), (3, 2e-5)])
def test_batched_training_matches_plain_torch(scene_path, tmp_path, batch_size, position_lr_init, monkeypatch):
    monkeypatch.setattr("odin_sched.scenes.sh.SH_DEGREE_INTERVAL", SH_INTERVAL)
    out = tmp_path / "t.h5"
    train(TrainConfig(scene_path, STEPS, out, seed=4, ssim_weight=0.2, eval_every=STEPS, progress=False,
                      batch_size=batch_size, image_order="shuffled", position_lr_init=position_lr_init))
    scene = read_scene(scene_path)
    train_ids = np.flatnonzero(~heldout_mask(scene))
    expected = _oracle(scene, shuffled_batches(train_ids, STEPS, batch_size, 4), 0.2, position_lr_init)
    trained = read_scene(out)
    assert trained.sh.shape[1] == 16 and np.any(trained.sh[:, 9:] != 0)  # degree 3 was trained
    got_params = _trained(trained)
    for name in NAMES:
        # Rounding differs (textbook vs torch's Adam arithmetic), and Adam turns a near-zero gradient's
        # rounding into a full step, so a few elements may differ by up to a couple of learning rates;
        # all others agree to float precision.
        got = got_params[name]
        lr = ((position_lr_init * scene_extent(scene.viewmats)) if name == "means" else DEFAULT_LR[name]) \
            * math.sqrt(batch_size)
        close = torch.isclose(got, expected[name], rtol=1e-5, atol=0.01 * lr)  # 1% of one step
        assert close.float().mean() >= 0.99, name
        assert (got - expected[name]).abs().max() <= 2 * 8 * lr * STEPS, name
    moved = (torch.from_numpy(trained.means) != torch.from_numpy(scene.init_means)).any(dim=1)
    assert moved.float().mean() > 0.3, "training must have moved a good share of the Gaussians"
    assert trained.attrs["batch_size"] == batch_size


def test_shuffled_batches_are_the_camera_order_cut_up():
    ids = np.array([0, 3, 4, 7, 9])
    batches = shuffled_batches(ids, 6, 4, seed=3)
    assert batches.shape == (6, 4)
    assert np.array_equal(batches.ravel(), camera_order(ids, 24, seed=3))
    assert np.array_equal(shuffled_batches(ids, 6, 1, seed=3)[:, 0], camera_order(ids, 6, seed=3))


def test_spread_batches_alternate_between_parts_that_share_no_cells():
    # cameras 0-9 see cells {0, 1}, cameras 10-19 see cells {2, 3}: a spread order must alternate
    sees = np.zeros((20, 4), bool)
    sees[:10, :2] = sees[10:, 2:] = True
    ids = np.arange(20)
    batches = spread_batches(ids, 10, 2, seed=1, sees=sees)
    group = batches >= 10
    assert (group.all(axis=1) | ~group.any(axis=1)).all(), "a batch stays within one part"
    assert (group[1:, 0] != group[:-1, 0]).all(), "consecutive batches come from different parts"
    assert np.array_equal(np.sort(batches.ravel()), ids), "20 images: every camera exactly once"
    assert np.array_equal(batches, spread_batches(ids, 10, 2, seed=1, sees=sees))


def test_spread_batches_visit_every_camera_once_per_pass_when_everything_conflicts():
    sees = np.ones((12, 3), bool)  # every camera sees every cell: nothing to spread
    ids = np.arange(12)
    assert np.array_equal(spread_batches(ids, 9, 4, seed=2, sees=sees), shuffled_batches(ids, 9, 4, seed=2))


def test_spread_batches_visit_every_camera_once_per_pass():
    rng = np.random.default_rng(0)
    sees = rng.random((100, 64)) < 0.2
    ids = np.arange(0, 100, 2)
    for batch_size in (1, 3, 8, 50):
        batches = spread_batches(ids, 40, batch_size, seed=0, sees=sees)
        images = batches.ravel()
        for p in range(len(images) // len(ids)):  # every complete pass holds every camera once
            assert np.array_equal(np.sort(images[p * len(ids):(p + 1) * len(ids)]), ids), (batch_size, p)
