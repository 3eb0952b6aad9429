"""Scene presets of ``pregel simulate --layout``: real captures described by what their cost depends on.

A preset gives a generated layout (where the Gaussians and cameras are: ``objects`` for a 360-degree
capture around a subject, ``city`` for an aerial capture) at a real capture's image size, camera count
and final Gaussian count. The Gaussians in view per image and their spread are those the layout's
cameras see (``costmodel.camera_views``), printed by ``pregel simulate``.

Sources:

* Mip-NeRF 360, as Grendel-GS trains it (``examples/mip360/*.sh`` in nyu-systems/Grendel-GS: ``images_4``
  for bicycle, stump and garden, ``images_2`` for the indoor scenes; ``--llffhold 8``, so 7 of 8 images
  train): full-resolution sizes of bicycle (4946 x 3286) and garden (5187 x 3361) from Grendel-GS's
  README, the others (stump 4978 x 3300, room 3114 x 2075, counter 3115 x 2076, kitchen 3115 x 2078,
  bonsai 3118 x 2078) and the image counts from the dataset's files; final Gaussian counts of the
  reference 3DGS after 30k steps (6.1, 5.0, 5.8, 1.6, 1.2, 1.9, 1.2 million) as tabulated with
  "Gaussian#" in Table 2 of HiGS (NVIDIA, 2026).
* Gaussians in view: the layouts' cameras see nearly all of an ``objects`` scene (about 95 %), a real
  capture a third: 32 % (bicycle), 43 % (garden), 27 % (room) of the Gaussians on screen, measured on an
  A100 with gsplat and published in the profiling report ``reports/backward_candidate_analysis``-era
  notes of a public repository (found with the search tools; not a paper); the other four Mip360
  scenes take their mean (``VISIBLE``). The per-camera spread stays the layout's.
* ``rubble``: the Mill 19 Rubble capture as Grendel-GS trains it on 16 GPUs: 40.4 million Gaussians
  (Grendel-GS README abstract), 1,657 training images (Mega-NeRF's split) at a quarter of 4608 x 3456.
"""
from dataclasses import dataclass


#: the mean of the three measured shares, for the Mip360 scenes without a measurement
VISIBLE = round((0.32 + 0.43 + 0.27) / 3, 2)


@dataclass(frozen=True)
class ScenePreset:
    """A capture: its layout, image size, images and final Gaussians."""

    layout: str
    width: int
    height: int
    cameras: int
    gaussians: int
    visible: float = 0.0  # mean share of the Gaussians in view per image (0: as the layout's cameras see)


PRESETS = {
    "bicycle": ScenePreset("objects", 4946 // 4, 3286 // 4, 194, 6_100_000, 0.32),
    "stump": ScenePreset("objects", 4978 // 4, 3300 // 4, 125, 5_000_000, VISIBLE),
    "garden": ScenePreset("objects", 5187 // 4, 3361 // 4, 185, 5_800_000, 0.43),
    "room": ScenePreset("objects", 3114 // 2, 2075 // 2, 311, 1_600_000, 0.27),
    "counter": ScenePreset("objects", 3115 // 2, 2076 // 2, 240, 1_200_000, VISIBLE),
    "kitchen": ScenePreset("objects", 3115 // 2, 2078 // 2, 279, 1_900_000, VISIBLE),
    "bonsai": ScenePreset("objects", 3118 // 2, 2078 // 2, 292, 1_200_000, VISIBLE),
    "rubble": ScenePreset("city", 4608 // 4, 3456 // 4, 1657, 40_400_000),
}

MIP360 = ("stump", "bicycle", "kitchen", "room", "counter", "garden", "bonsai")

#: Grendel-GS README, "30k Train Time(min)" on 4 x A100 40 GB: 1 GPU + batch 1, 4 GPU + batch 1,
#: 4 GPU + batch 4 (30,000 images each)
GRENDEL_MINUTES = {"stump": (24.03, 9.07, 5.22), "bicycle": (30.18, 11.67, 6.47), "kitchen": (25.58, 9.53, 6.98),
                   "room": (22.45, 8.93, 6.18), "counter": (21.6, 8.82, 5.98), "garden": (30.15, 10.85, 6.48),
                   "bonsai": (19.18, 8.03, 5.28)}
GRENDEL_IMAGES = 30_000
GRENDEL_SETUPS = ((1, 1), (4, 1), (4, 4))  # (GPUs, batch size) of the columns


def published_grendel_steps(name: str) -> tuple:
    """(GPUs [k], steps/s [k]) of Grendel-GS's published runs of preset ``name`` with batch = GPUs
    (1 GPU batch 1, 4 GPUs batch 4), for plotting next to a simulation; empty without any."""
    if name not in GRENDEL_MINUTES:
        return (), ()
    runs = [(gpus, GRENDEL_IMAGES / batch / (minutes * 60))
            for (gpus, batch), minutes in zip(GRENDEL_SETUPS, GRENDEL_MINUTES[name]) if gpus == batch]
    return tuple(g for g, _ in runs), tuple(s for _, s in runs)
