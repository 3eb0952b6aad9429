"""What the simulator knows of a scene (``SimScene``): generated layouts as metadata only, the presets of
``odin_sched.sim.presets`` and stand-ins for models larger than the Gaussians generated, a trainer's own
scene, and odin's k-d cells, cut once per cell count as the sharded runtime's persist.
"""
import math
from dataclasses import dataclass, field, replace

import numpy as np

from odin_sched.odin.options import default_cells
from odin_sched.scenes.cells import cut_cells
from odin_sched.scenes.scene_io import HOLDOUT_EVERY
from odin_sched.sim.costmodel import CameraViews, camera_views
from odin_sched.sim.presets import PRESETS
from pregel.errors import InputError


@dataclass
class SimScene:
    """What the simulator needs of a scene: the model's Gaussians (means, log-scales [G, 3], quats
    [G, 4]), the cameras (viewmats [C, 4, 4], Ks [C, 3, 3], size), the training cameras and what each
    camera sees (``costmodel.camera_views``: cost features [C, 3] and the Gaussians on screen)."""

    means: np.ndarray
    scales: np.ndarray
    quats: np.ndarray
    viewmats: np.ndarray
    Ks: np.ndarray
    width: int
    height: int
    train_ids: np.ndarray
    views: CameraViews
    gaussians: int = 0  # Gaussians the scene stands for (0: len(means)); metadata presets project fewer
    cache: dict = field(default_factory=dict, init=False, repr=False, compare=False)  # cells, orders: made once

    @property
    def total_gaussians(self) -> int:
        return self.gaussians or len(self.means)

    @property
    def stands_for(self) -> int:
        """Gaussians each generated one stands for in odin's cells (``cells``): total / generated, which
        must be a whole number for modes other than grendel."""
        factor, rest = divmod(self.total_gaussians, len(self.means))
        if rest:
            raise ValueError(f"a scene of {len(self.means):,} Gaussians cannot stand for {self.total_gaussians:,} "
                             "in cells (not a whole number each)")
        return factor

    @property
    def features(self) -> np.ndarray:
        """[C, 3] cost features of every camera (visible Gaussians, pixels, tile-Gaussian pairs)."""
        return self.views.features


def metadata_scene(layout: str, gaussians: int, cameras: int, width: int = 256, height: int = 192,
                   seed: int = 0, sample: float | None = None, shrink: float = 1.0) -> SimScene:
    """A generated layout as metadata only (no images): the ground-truth Gaussians are the model, each
    ``shrink`` times its generated size. Features are projected from a subsample of about 20,000
    Gaussians unless ``sample`` is given."""
    from odin_sched.scenes.scene_gen import LAYOUTS, scene_geometry

    if layout not in LAYOUTS:
        raise InputError(f"`layout` must be one of {', '.join(LAYOUTS)}, got {layout!r}")
    if gaussians < 16 or cameras < 2:
        raise InputError(f"`gaussians` must be >= 16 and `cameras` >= 2, got {gaussians} and {cameras}")
    gauss, viewmats, Ks = scene_geometry(gaussians, cameras, width, height, np.random.default_rng(seed), layout)
    if shrink != 1.0:
        gauss["scales"] += np.float32(np.log(shrink))  # log scales
    sample = min(1.0, 20000 / gaussians) if sample is None else sample
    views = camera_views(gauss["means"], gauss["scales"], gauss["quats"], viewmats, Ks, width, height, sample)
    train_ids = np.flatnonzero(np.arange(cameras) % HOLDOUT_EVERY != 0)
    return SimScene(gauss["means"], gauss["scales"], gauss["quats"], viewmats, Ks, width, height, train_ids, views)


def standing_for(scene: SimScene, gaussians: int, visible: float = 0.0) -> SimScene:
    """``scene`` whose Gaussians each stand for gaussians / len(scene.means): the cost features and the
    projected sample's weight scaled up (grendel's costs come from the features; odin's cells count each
    Gaussian that many times, which must then be a whole number: ``cells``). With ``visible`` > 0 the
    share in view per image is scaled to that mean (its spread over cameras stays the scene's)."""
    factor = gaussians / len(scene.means)
    if visible:
        factor *= visible * len(scene.means) / scene.views.features[scene.train_ids, 0].mean()
    features = scene.views.features.copy()
    features[:, [0, 2]] *= factor
    views = replace(scene.views, features=features, weight=scene.views.weight * factor)
    return replace(scene, views=views, gaussians=gaussians)


def preset_scene(name: str, seed: int = 0, generated: int | None = None, factor: int = 0) -> SimScene:
    """The metadata scene of preset ``name`` (``presets.PRESETS``); with ``generated`` < the preset's
    Gaussians, only that many are generated and each stands for several (``standing_for``): the
    preset's count over ``generated`` (grendel's costs need only the features), or with ``factor`` > 0
    that whole number of them (a stand-in of ``generated`` x ``factor`` Gaussians: ``stand_in_size``),
    each Gaussian 1 / sqrt(factor) the size the layout gives it (the size of the layout's Gaussians when
    factor times as many cover its surfaces), before its camera views are projected."""
    if name not in PRESETS:
        raise InputError(f"`layout` must be one of city, objects, {', '.join(PRESETS)}, got {name!r}")
    preset = PRESETS[name]
    made, total = min(preset.gaussians, generated or preset.gaussians), preset.gaussians
    shrink = 1.0
    if factor and made < total:
        total, shrink = made * factor, factor ** -0.5
    scene = metadata_scene(preset.layout, made, preset.cameras, preset.width, preset.height, seed, shrink=shrink)
    return standing_for(scene, total, preset.visible)


def scene_of_setup(setup) -> SimScene:
    """The SimScene of a trainer's ``TrainingSetup`` (its initial Gaussians; for validation runs)."""
    g = {k: v.numpy() for k, v in setup.initial.items()}
    s = setup.scene
    views = camera_views(g["means"], g["scales"], g["quats"], s.viewmats, s.Ks, s.width, s.height)
    return SimScene(g["means"], g["scales"], g["quats"], s.viewmats, s.Ks, s.width, s.height, setup.train_ids, views)


def num_cells(gaussians: int, gpus: int, cells_per_gpu: int | None = None) -> int:
    """Odin's cells for a model of ``gaussians`` (for a stand-in, those it stands for) on ``gpus`` GPUs:
    ``cells_per_gpu`` x ``gpus``, or by default the runtime's ``default_cells`` (one per 8,192 Gaussians,
    16 to 512 per GPU)."""
    return cells_per_gpu * gpus if cells_per_gpu else default_cells(gaussians, gpus)


def cells(scene: SimScene, num_cells: int) -> tuple:
    """The scene's k-d cells, cut once per cell count as the sharded runtime's persist: (cell_of [G] int32
    of every generated Gaussian, their ``CellBounds`` with each count times ``scene.stands_for``). A
    scene of n Gaussians standing for f each, n a multiple of the cells, plans and costs as the scene
    of each Gaussian repeated f times (``kd_cells`` splits at whole multiples of f there)."""
    key = ("cells", num_cells)
    if key not in scene.cache:
        cell_of, bounds = cut_cells(scene.means, scene.scales, num_cells)
        scene.cache[key] = cell_of, replace(bounds, count=bounds.count * scene.stands_for)
    return scene.cache[key]


#: Gaussians generated for a scene simulated in grendel mode alone (each stands for several)
PRESET_GENERATED = 400_000
#: a preset of more Gaussians is simulated with odin's modes as a stand-in of at most STAND_IN_GENERATED
STAND_IN_ABOVE, STAND_IN_GENERATED = 8_000_000, 2_000_000


def stand_in_size(gaussians: int, generated: int, gpus, cells_per_gpu: int | None = None) -> tuple:
    """(n, f): a stand-in for a model of ``gaussians``, n <= ``generated`` Gaussians standing for f each,
    with n a multiple of the image order's ``ORDER_CELLS`` and of odin's ``num_cells`` of n x f at every
    GPU count of ``gpus`` (so that its cells plan exactly as its Gaussians repeated f times: ``cells``)
    and n x f within 1 % below ``gaussians``: the smallest such f, then the largest n. (With the default
    cells, uncapped at some GPU count, a cell holds exactly 8,192 Gaussians: f is a power of two.)"""
    from odin_sched.training.image_order import ORDER_CELLS

    for f in range(-(-gaussians // generated), gaussians // ORDER_CELLS + 1):
        top = gaussians // f // ORDER_CELLS * ORDER_CELLS
        for n in range(top, max(math.ceil(0.99 * gaussians / f), ORDER_CELLS) - 1, -ORDER_CELLS):
            if all(n % num_cells(n * f, p, cells_per_gpu) == 0 for p in gpus):
                return n, f
    raise InputError(f"no stand-in of at most {generated:,} Gaussians for {gaussians:,} whose odin cells at "
                     f"{','.join(map(str, gpus))} GPUs divide it")


def odin_preset(name: str, gpus, cells_per_gpu: int | None = None, seed: int = 0,
                generated: int | None = None) -> SimScene:
    """The scene of preset ``name`` for odin's modes at the GPU counts ``gpus`` (``cells_per_gpu`` as
    ``simulate``'s): all of it, or a stand-in (``stand_in_size``) of at most ``generated`` Gaussians
    (default: STAND_IN_GENERATED for a preset of more than STAND_IN_ABOVE)."""
    if generated is None and PRESETS[name].gaussians > STAND_IN_ABOVE:
        generated = STAND_IN_GENERATED
    if generated is None or generated >= PRESETS[name].gaussians:
        return preset_scene(name, seed)
    made, factor = stand_in_size(PRESETS[name].gaussians, generated, gpus, cells_per_gpu)
    return preset_scene(name, seed, made, factor)
