"""The generated layouts' Gaussians equal, bit for bit and with the generator left in the same state, those of
the block-by-block build they replaced (a copy of it below, the oracle): the city's blocks are built all at
once, and the objects share the shape helpers that were split from their draws."""
import math

import numpy as np
import pytest

from odin_sched.scenes import scene_gen
from odin_sched.scenes.scene_gen import _cylinder, _sphere, scene_geometry

# ---- the reference twin: the generator's code before the blocks were vectorised ----


def _random_quats(rng, n):
    q = rng.standard_normal((n, 4))
    return q / np.linalg.norm(q, axis=1, keepdims=True)


def _surfels(points, colors, spacing, rng):
    n = points.shape[0]
    scales = np.log(spacing * rng.uniform(0.45, 0.7, size=(n, 3)))
    opacity = rng.uniform(0.85, 0.98, size=n)
    return {"means": points, "scales": scales, "quats": _random_quats(rng, n),
            "opacities": np.log(opacity / (1.0 - opacity)), "colors": np.clip(colors, 0.0, 1.0)}


def _concat(parts):
    return {k: np.concatenate([p[k] for p in parts]).astype(np.float32) for k in parts[0]}


def _ground(n, center, size, palette, cell, rng):
    xy = center + rng.uniform(-0.5 * size, 0.5 * size, size=(n, 2))
    checker = (np.floor(xy[:, 0] / cell) + np.floor(xy[:, 1] / cell)).astype(int) % 2
    pts = np.column_stack([xy, np.zeros(n)])
    return pts, palette[checker] + rng.normal(0, 0.02, (n, 3)), math.sqrt(size * size / n)


def _box(n, center, half, palette, rng):
    areas = np.array([half[1] * half[2], half[1] * half[2], half[0] * half[2], half[0] * half[2],
                      half[0] * half[1], half[0] * half[1]])
    face = rng.choice(6, size=n, p=areas / areas.sum())
    u = rng.uniform(-1, 1, size=(n, 3)) * half
    axis, sign = face // 2, np.where(face % 2 == 0, -1.0, 1.0)
    u[np.arange(n), axis] = sign * half[axis]
    stripe = (np.floor((u[:, 0] + u[:, 1]) / (0.5 * max(half[0], half[1]))).astype(int)) % len(palette)
    return center + u, palette[stripe], math.sqrt(4 * areas.sum() / n)


def city_gaussians(g, rng):
    blocks_per_side = max(2, int(round(math.sqrt(g / 300))))
    pitch = 10.0
    n_blocks = blocks_per_side ** 2
    counts = np.full(n_blocks, g // n_blocks)
    counts[: g % n_blocks] += 1
    ground_palette = np.array([[0.35, 0.35, 0.38], [0.5, 0.5, 0.48]])
    parts = []
    for b in range(n_blocks):
        center = (np.array([b % blocks_per_side, b // blocks_per_side], float) + 0.5) * pitch
        n_ground = counts[b] // 3
        height = rng.uniform(2.0, 6.0)
        half = np.array([rng.uniform(1.5, 2.8), rng.uniform(1.5, 2.8), height / 2])
        palette = rng.uniform(0.15, 0.95, size=(3, 3))
        for pts, col, s in (_ground(n_ground, center, 6.0, ground_palette, 1.5, rng),
                            _box(counts[b] - n_ground, np.append(center, height / 2), half, palette, rng)):
            parts.append(_surfels(pts, col, s, rng))
    return _concat(parts)


def objects_gaussians(g, rng):  # the sphere and cylinders are the module's own, unchanged
    palettes = [np.array(p, float) for p in (
        [[0.85, 0.2, 0.15], [0.95, 0.8, 0.2], [0.2, 0.3, 0.8]], [[0.2, 0.7, 0.3], [0.9, 0.9, 0.85]],
        [[0.6, 0.3, 0.7], [0.95, 0.55, 0.1], [0.15, 0.6, 0.65]], [[0.9, 0.45, 0.55], [0.3, 0.25, 0.2]])]
    n_ground = int(0.4 * g)
    n_obj = np.full(4, (g - n_ground) // 4)
    n_obj[: (g - n_ground) % 4] += 1
    shapes = [
        _sphere(n_obj[0], np.array([0.9, 0.6, 0.8]), 0.8, palettes[0], rng),
        _box(n_obj[1], np.array([-1.0, 0.7, 0.6]), np.array([0.6, 0.5, 0.6]), palettes[1], rng),
        _cylinder(n_obj[2], np.array([-0.6, -1.1, 0.0]), 0.5, 1.6, palettes[2], rng),
        _cylinder(n_obj[3], np.array([1.0, -1.0, 0.0]), 0.6, 1.4, palettes[3], rng, cone=True),
        _ground(n_ground, np.zeros(2), 6.0, np.array([[0.45, 0.45, 0.4], [0.7, 0.68, 0.6]]), 1.0, rng),
    ]
    return _concat([_surfels(p, col, s, rng) for p, col, s in shapes])


# ---- the tests ----


@pytest.mark.parametrize("layout, gaussians, chunk", [
    ("city", 12000, 2048),  # 36 blocks, the first 12 one Gaussian larger
    ("city", 10800, 2048),  # 36 blocks of 300, all one size
    ("city", 30001, 7),  # 100 blocks, built 7 at a time (and split where the block size changes)
    ("city", 16, 2048),  # the smallest: 4 blocks of 4
    ("objects", 3001, 2048),
])
def test_layout_equals_the_block_by_block_build(monkeypatch, layout, gaussians, chunk):
    monkeypatch.setattr(scene_gen, "CITY_CHUNK", chunk)
    rng, twin_rng = np.random.default_rng(7), np.random.default_rng(7)
    got, _, _ = scene_geometry(gaussians, 16, 32, 24, rng, layout, 8 if layout == "city" else 1)
    expected = (city_gaussians if layout == "city" else objects_gaussians)(gaussians, twin_rng)
    assert sorted(got) == sorted(expected)
    for name in expected:
        assert got[name].dtype == np.float32 and got[name].tobytes() == expected[name].tobytes(), name
    assert rng.bit_generator.state == twin_rng.bit_generator.state  # the draws after it are the same too
