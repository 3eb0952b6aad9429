"""Grendel-GS's training step on virtual GPUs (``pregel simulate --modes grendel``), as its code does it.

Read from nyu-systems/Grendel-GS (file, function):

* **Gaussians sharded** over the GPUs, "random_redistribute" (``arguments/__init__.py``,
  ``DistributionParams.redistribute_gaussians_mode``): every Gaussian has one owner, drawn at random
  (``owners``); each GPU projects its own Gaussians for every camera of the batch
  (``gaussian_renderer/__init__.py``, ``distributed_preprocess3dgs_and_all2all_final``: one
  ``preprocess_gaussians`` per camera over all local Gaussians) and backpropagates through them.
* **Pixel partitions** (``train.py``, ``start_strategy_final``): the batch's images are laid one after
  another as rows of 16-pixel tiles, and the rows are cut into P contiguous pieces of equal predicted
  cost (``division_pos_heuristic``: a prefix sum searched at k x total / P, ``right=True``); a cut
  within ``border_divpos_coeff`` = 1 row of an image's edge moves to the edge. The prediction of a
  camera's rows is the time each GPU took on them at the camera's last visit spread evenly over its
  rows (``finish_strategy_final``, ``heuristic_decay`` = 0), all ones before the first
  (``DivisionStrategyHistoryFinal``). ``division`` and ``update_heuristic`` are these two rules.
* **Counts allgathered** (``all_to_all_communication_final``: ``all_gather_into_tensor`` of a
  [P, B] int32 table per GPU), then **two all-to-alls forward**: means2D (2), rgb (3) and
  conic_opacity (4) float32 (36 bytes per Gaussian and destination), radii and depths (2 float32,
  8 bytes); and **one backward**, the gradients of the first (36 bytes; the second is sent with
  ``use_function_version=False``, without a gradient). A Gaussian goes to every partition its
  footprint's tile rows touch (``get_local2j_ids``), none to its own GPU over the network.
* **Render and loss** on each partition; the **SSIM border**: the rows of tiles on either side of a cut
  within an image go to the neighbour, 3 x 16 x 16 float32 a tile, and their gradients come back
  (``utils/loss_distribution.py``-era ``distributed_loss_computation`` / ``get_remote_tiles``).
* **Adam** on each shard, dense over all its Gaussians (``torch.optim.Adam`` as in the reference 3DGS),
  no parameter broadcast; **one barrier per step**: the allgather of each GPU's timings that the next
  visit's partition uses (``finish_strategy_final``).

Costs (``CostProfile``): a partition's render costs ``c0 + c_vis x Gaussians it receives + c_px x its
pixels + c_pair x its tile pairs``; the projection ``render_rows`` per Gaussian owned, per camera;
Adam ``version`` over the shard, and ``step_seconds`` per step. On one GPU a step is therefore the sum of its images'
``image_seconds`` (rows = all Gaussians), one Adam step and ``step_seconds``. Collectives start when the last GPU
reaches them, so a step is the sum of its phases' slowest GPU plus the collectives; what a GPU does
not compute is its wait (behind the slowest) and its communication. Not simulated: densification,
evaluation, loading the ground-truth images, the per-image spread of the cost model's fit.
"""
import numpy as np

from odin_sched.sim.costmodel import CameraViews, CostProfile

TILE = 16
FORWARD_BYTES = 4 * (2 + 3 + 4) + 4 * 2  # means2D, rgb, conic_opacity; radii, depths (float32)
BACKWARD_BYTES = 4 * (2 + 3 + 4)  # gradients of means2D, rgb, conic_opacity
BORDER_TILE_BYTES = 3 * TILE * TILE * 4  # one tile of RGB float32 pixels
BORDER_COEFF = 1  # border_divpos_coeff


def division(heuristic: np.ndarray, parts: int, rows_per_image: int, border: int = BORDER_COEFF) -> np.ndarray:
    """[parts + 1] tile-row cuts of the batch's rows (images one after another, ``rows_per_image``
    each) into ``parts`` pieces of equal ``heuristic`` [R] cost, as ``start_strategy_final``: the
    prefix sum searched (right side) at k x total / parts, a cut within ``border`` rows of an image
    edge moved to it; cuts are kept at least one row apart."""
    total = len(heuristic)
    prefix = np.cumsum(np.asarray(heuristic, np.float64))
    cuts = np.searchsorted(prefix, np.arange(1, parts) * prefix[-1] / parts, side="right")
    within = cuts % rows_per_image
    cuts = np.where(within + border >= rows_per_image, cuts - within + rows_per_image,
                    np.where(within - border <= 0, cuts - within, cuts))
    pos = np.concatenate([[0], cuts, [total]]).astype(np.int64)
    for k in range(1, parts):  # at least one row each (Grendel asserts it)
        pos[k] = min(max(pos[k], pos[k - 1] + 1), total - (parts - k))
    return pos


def update_heuristic(pos: np.ndarray, part_seconds: np.ndarray, total_rows: int) -> np.ndarray:
    """[R] the next visit's prediction: each part's seconds ``part_seconds`` [parts] spread evenly over
    its rows ``pos[k]:pos[k + 1]`` (``finish_strategy_final`` with ``heuristic_decay`` = 0)."""
    rows = np.diff(pos)
    return np.repeat(np.asarray(part_seconds, np.float64) / rows, rows)[:total_rows]


def owners(count: int, gpus: int, seed: int) -> np.ndarray:
    """[count] the GPU that owns each Gaussian: a seeded random redistribution, balanced to within one."""
    return (np.random.default_rng(seed).permutation(count) % gpus).astype(np.int32)


class _Camera:
    """What one camera's image costs, per tile row, from its projected sample (``CameraViews``)."""

    def __init__(self, views: CameraViews, camera: int):
        a, b = views.on_screen_indptr[camera], views.on_screen_indptr[camera + 1]
        self.ids = views.on_screen[a:b]
        self.lo, self.hi = views.row_lo[a:b].astype(np.int64), views.row_hi[a:b].astype(np.int64)
        self.weight = views.weight
        self.rows, self.tiles_x = -(-views.height // TILE), -(-views.width // TILE)
        starts_minus_ends = np.zeros(self.rows + 1)  # tile pairs per row: a difference array over the spans
        np.add.at(starts_minus_ends, self.lo, views.tile_cols[a:b])
        np.add.at(starts_minus_ends, self.hi, -views.tile_cols[a:b])
        per_row = np.cumsum(starts_minus_ends)[:-1] * self.weight
        self.pairs_prefix = np.concatenate([[0.0], np.cumsum(per_row)])
        heights = np.minimum(TILE * np.arange(1, self.rows + 1), views.height) - TILE * np.arange(self.rows)
        self.pixels_prefix = np.concatenate([[0], np.cumsum(heights * views.width)]).astype(np.float64)

    def touching(self, lo: np.ndarray, hi: np.ndarray) -> tuple:
        """For parts covering rows [lo[j], hi[j]) (ascending, disjoint): (sample index [m], part [m]) of
        every (projected Gaussian, part it touches) pair."""
        first = np.searchsorted(hi, self.lo, side="right")  # the first part that ends after its top row
        last = np.searchsorted(lo, self.hi, side="left") - 1  # the last part that starts before its end
        n = np.maximum(last - first + 1, 0)
        g = np.repeat(np.arange(len(self.lo)), n)
        part = np.repeat(first, n) + (np.arange(n.sum()) - np.repeat(np.cumsum(n) - n, n))
        return g, part


def _alltoall_seconds(matrix: np.ndarray, profile: CostProfile) -> float:
    """Seconds of an all-to-all of ``matrix`` [P, P] bytes (row: sender): the busiest GPU's bytes in
    or out over each of its links (within the node, between nodes), plus a latency per peer."""
    gpus = len(matrix)
    node = np.arange(gpus) // profile.gpus_per_node
    same = node[:, None] == node[None, :]
    off = np.where(np.eye(gpus, dtype=bool), 0.0, matrix)
    busiest = 0.0
    for link, bandwidth in ((same, profile.node_bandwidth), (~same, profile.bandwidth)):
        part = np.where(link, off, 0.0)
        busiest = max(busiest, float(np.maximum(part.sum(1), part.sum(0)).max()) / bandwidth)
    if not busiest:
        return 0.0
    latency = profile.latency if gpus > profile.gpus_per_node else profile.node_latency
    return busiest + (gpus - 1) * latency


def grendel_step(cameras: list, owner: np.ndarray, owned: np.ndarray, heuristics: list, profile: CostProfile) -> dict:
    """One Grendel step of the batch ``cameras`` ([B] ``_Camera``) on P = len(owned) GPUs.

    owner: [G] GPU of each Gaussian; owned: [P] Gaussians per GPU; heuristics: [B] per-row predictions
    [rows] (replaced by this visit's). Returns {'phases': [P, 3] compute seconds (projection forward,
    render, projection backward + Adam), 'comm': seconds of the collectives, 'forward_bytes',
    'backward_bytes', 'border_bytes': [P, P] bytes from GPU (row) to GPU, 'pos': the cuts}.
    """
    gpus, batch = len(owned), len(cameras)
    rows = cameras[0].rows
    pos = division(np.concatenate(heuristics), gpus, rows)
    c0, c_vis, c_px, c_pair = profile.image
    forward, border = np.zeros((gpus, gpus)), np.zeros((gpus, gpus))
    render = np.zeros(gpus)
    for k, cam in enumerate(cameras):
        start, stop = k * rows, (k + 1) * rows
        gpu = np.flatnonzero((pos[:-1] < stop) & (pos[1:] > start))
        lo, hi = np.maximum(pos[gpu], start) - start, np.minimum(pos[gpu + 1], stop) - start
        g, part = cam.touching(lo, hi)
        received = np.bincount(part, minlength=len(gpu)) * cam.weight
        np.add.at(forward, (owner[cam.ids[g]], gpu[part]), cam.weight * FORWARD_BYTES)
        seconds = (c0 + c_vis * received + c_px * (cam.pixels_prefix[hi] - cam.pixels_prefix[lo])
                   + c_pair * (cam.pairs_prefix[hi] - cam.pairs_prefix[lo]))
        np.add.at(render, gpu, seconds)
        heuristics[k] = update_heuristic(np.concatenate([[0], hi]), seconds, rows)
        for left, right in zip(gpu[:-1], gpu[1:]):  # each cut inside the image: a row of tiles each way
            border[left, right] += cam.tiles_x * BORDER_TILE_BYTES
            border[right, left] += cam.tiles_x * BORDER_TILE_BYTES
    np.fill_diagonal(forward, 0.0)  # a GPU's own Gaussians for its own part are not sent
    project = profile.render_rows * owned * batch
    adam = profile.version[0] + profile.version[1] * owned + profile.step_seconds
    phases = np.column_stack([project / 2, render, project / 2 + adam])
    backward = forward.T * (BACKWARD_BYTES / FORWARD_BYTES)
    comm = 0.0
    if gpus > 1:
        comm = (profile.allgather_seconds(4.0 * gpus * batch * gpus, gpus)  # the [P, B] count tables
                + _alltoall_seconds(forward, profile) + 2 * _alltoall_seconds(border, profile)
                + _alltoall_seconds(backward, profile)
                + profile.allgather_seconds(8.0 * batch * gpus, gpus) + profile.barrier_seconds(gpus))
    return {"phases": phases, "comm": comm, "forward_bytes": forward, "backward_bytes": backward,
            "border_bytes": border, "pos": pos}


def simulate_grendel(views: CameraViews, total_gaussians: int, batches: list, profile: CostProfile, gpus: int,
                     seed: int = 0, warm_visits: int = 2, state_bytes: int = 0) -> dict:
    """Grendel training of ``batches`` ([steps] arrays of camera ids) on ``gpus`` GPUs. Each camera's
    partition prediction is first warmed by ``warm_visits`` earlier visits of the same batch (a long run
    has seen every camera many times). Returns {'seconds', 'compute' [P], 'comm' [P], 'wait' [P],
    'bytes': remote bytes of all all-to-alls, 'memory': the most bytes one GPU holds: ``state_bytes``
    per Gaussian it owns, its screen-space Gaussians and their gradients for every camera of the batch
    (``preprocess_gaussians`` returns them for all its Gaussians) and those the others send it}."""
    owner = owners(total_gaussians, gpus, seed)
    owned = np.bincount(owner, minlength=gpus).astype(np.float64)
    cache, heuristic = {}, {}
    compute, wait = np.zeros(gpus), np.zeros(gpus)
    seconds, comm, sent, memory = 0.0, 0.0, 0.0, 0.0
    screen = FORWARD_BYTES + BACKWARD_BYTES
    for batch in batches:
        cams = [cache.setdefault(int(c), _Camera(views, int(c))) for c in batch]
        for c in batch:
            heuristic.setdefault(int(c), np.ones(cams[0].rows))
        for _ in range(warm_visits + 1):
            guesses = [heuristic[int(c)] for c in batch]
            step = grendel_step(cams, owner, owned, guesses, profile)
            for c, h in zip(batch, guesses):
                heuristic[int(c)] = h
        phases = step["phases"]
        slowest = phases.max(axis=0)
        compute += phases.sum(axis=1)
        wait += (slowest - phases).sum(axis=1)
        comm += step["comm"]
        seconds += slowest.sum() + step["comm"]
        sent += float((step["forward_bytes"] + step["backward_bytes"] + 2 * step["border_bytes"]).sum())
        received = step["forward_bytes"].sum(axis=0) / FORWARD_BYTES
        memory = max(memory, float((owned * (state_bytes + screen * len(batch)) + received * screen).max()))
    return {"seconds": seconds, "compute": compute, "comm": np.full(gpus, comm), "wait": wait, "bytes": sent,
            "memory": memory}


def exposed_seconds(comm: np.ndarray, wait: np.ndarray) -> float:
    """GPU-seconds not computing: communication ``comm`` [P] and waiting ``wait`` [P] summed over GPUs."""
    return float(np.sum(comm) + np.sum(wait))


def hidden_vs_grendel(odin_comm, odin_wait, grendel_comm, grendel_wait) -> float:
    """1 - odin's exposed GPU-seconds / Grendel's (``exposed_seconds``), for the same steps; 0 when
    Grendel exposes none."""
    total = exposed_seconds(grendel_comm, grendel_wait)
    return 1.0 - exposed_seconds(odin_comm, odin_wait) / total if total > 0 else 0.0
