"""The simulator's cost model: seconds per image step, per cell update and per message.

* An image step (render, loss, backward) costs ``c0 + c_vis · visible + c_px · pixels + c_pair · pairs
  + c_rows · rows`` seconds, with ``visible`` the Gaussians on screen (radius > 0), ``pixels`` = width x
  height, ``pairs`` the tile-Gaussian pairs of the rasterizer's binning (``image_features``) and
  ``rows`` the Gaussians it renders: all those of the cells it reads, each projected (and most
  culled), so finer cells make images cheaper (``Window.image_rows``). The coefficients
  are fitted (non-negative least squares, ``fit_costs``) to the compute spans of real ``pregel train``
  runs (``benchmarks/odin_calibrate.py`` writes ``profiles/cpu-here.json``). What the features do not
  explain is kept as the fit's relative errors (``image_noise``); the simulator multiplies each image's
  cost by one of them, drawn at random, so that images vary as much as measured (the imbalance a
  barrier waits for), not only as much as the fit predicts. Each rank's first image also loads the
  kernels from numba's cache: that warm-up (``warmup_seconds``) is fitted apart and charged once.
* An image's cost splits at ``forward_share`` (``FORWARD_SHARE``) into its forward and backward pass;
  between them its rank serves its ready cell versions (``simulate``).
* A cell version (visible Adam on one cell) costs ``v0 + v_row · rows``, fitted the same way, when
  its batch's images saw some of its Gaussians, else ``version_unseen`` (the gradients are summed but
  no Gaussian is stepped): conservative visibility makes images report to cells they turn out not to
  see. The simulator tells the two apart with the Gaussians on each camera's screen (``camera_views``).
* ``sharded`` profiles (the GPU ones) charge what the sharded runtime (owned cells, metadata at window
  ends) does: a window ends with an allgather of each cell's metadata and each image's loss and
  violation count (``window_end.METADATA_CELL_BYTES``, ``METADATA_IMAGE_BYTES``) and a barrier, not a
  gather of the model; window w + 1 is planned while w runs, so only what its planning takes beyond
  window w's run is exposed (the first window's planning, before training starts, is not charged). The planning is ``plan_by_gpus``: the host
  processor seconds of the runtime's ``plan_cells`` (planning from cell metadata) per window at P ranks, measured on this machine
  by ``benchmarks/plan_time.py`` for city scenes of several sizes, the one nearest the simulated scene's
  Gaussian count (``profiles/plan-times.json``: each scene, command, wall seconds and load average;
  without the file: 0).
* Planning a window (on the critical path of our runtime, run by the engine on P ranks over MPI)
  costs ``plan_seconds``, measured per window in the calibration runs (a small scene: larger windows
  plan longer, so this underestimates planning at scale). On ranks that outnumber the cores it takes
  ``plan_shared`` times an even share of them (measured here with P = 3 on 2 cores: the engine's
  collectives wait inside MPI, spinning, while one rank waits for a core).
* Ranks that outnumber the processors (``cores``, as P = 3 on this 2-core machine) share them as the
  operating system's fair scheduler does: in time slices of ``time_slice`` seconds (measured here by
  ``time_slice``: busy processes outnumbering the cores run about 4 ms at a time), a free processor
  going to the rank that has had the least processor time (``processors.Processors``). A waiting rank
  then looks for messages every ``poll_seconds + poll_sleep`` seconds, each look taking
  ``poll_seconds`` of a processor (measured by ``polling``), as ``pregel.comm`` waits then. Each
  time a rank gets a shared processor back it loses ``switch_seconds`` of it (its caches refilled:
  measured by ``benchmarks/odin_calibrate.py`` as what a look costs a computation beyond the look's
  own processor time). Work that all ranks do at once (planning, the warm-up) takes longer by
  ranks / cores (``slowdown``).
* A message costs ``latency + bytes / bandwidth`` on the link between the two ranks (within a node or
  between nodes), plus ``overhead`` seconds of the sender's time; the latency and bandwidth of
  ``cpu-here`` come from an MPI ping-pong on this machine (``pingpong``).

* ``host_sends`` (a what-if, off in every profile): the sender's time of a message is paid by a host
  thread beside the GPU instead of by the GPU, as a CUDA program whose kernel launches return before the
  kernels end can post one image's messages while the GPU renders the next. A message still leaves only
  once its own sender's time is paid, after those the host was given before it; a rank's window (and, in
  barrier mode, its phase) ends when its host has posted everything. Not with shared ``cores``.

Profiles: ``cpu-here`` (measured here); ``a100-nvlink`` (Grendel-GS's set-up, the reference rasterizer's
costs fitted to its published times; ``A100_NVLINK``); ``h200-ib`` (the same scaled to H200 GPUs by
their published figures, 8 per node on NVLink, nodes on InfiniBand; ``H200_IB``); ``h200-kernels``
(our CUDA kernels' H200 timings; ``H200_KERNELS``).
"""
import json
import math
import os
from dataclasses import asdict, dataclass, replace

import numpy as np

PROFILE_DIR = os.path.join(os.path.dirname(__file__), "profiles")
#: the share of an image step's cost before its backward pass, where a rank serves its ready cell
#: versions (``odin_sched.odin.program.StepMessages.servable``): gsplat's published profile (ROCm docs,
#: "Profiling the GSplat library", batch 1, RGB) has the backward take 1.7-1.8 times the forward, so the
#: forward is 1 / (1 + 1.75) of the two; the rest of an image's cost (loss, the fixed time per step) is
#: taken to split alike
FORWARD_SHARE = 1.0 / 2.75
FEATURES = ("visible", "pixels", "pairs")


@dataclass(frozen=True)
class CostProfile:
    """Seconds of every simulated action (see the module docstring)."""

    name: str
    image: tuple          # (c0, c_vis, c_px, c_pair) seconds
    version: tuple        # (v0, v_row) seconds of a cell update whose batch saw the cell
    latency: float        # seconds per message between nodes
    bandwidth: float      # bytes / second between nodes
    node_latency: float   # seconds per message within a node
    node_bandwidth: float  # bytes / second within a node
    gpus_per_node: int
    overhead: float       # sender seconds per message
    count_planning: bool  # whether the window planning is on the critical path
    source: str
    plan_seconds: float = 0.0  # seconds per window of the runtime's planning (when count_planning)
    cores: int = 0  # processors shared by all ranks (0: one per rank, as GPUs)
    render_rows: float = 0.0  # c_rows: seconds per Gaussian of the cells an image reads
    image_noise: tuple = ()  # relative errors (measured / fitted - 1) of the image fit, resampled per image
    warmup_seconds: float = 0.0  # once per rank at the start: its first image loads the kernels
    time_slice: float = 0.0  # seconds a shared processor runs one rank before the next waiting one
    poll_seconds: float = 0.0  # processor seconds of one look for messages by a waiting rank (ranks > cores)
    poll_sleep: float = 0.0  # seconds a waiting rank sleeps between looks (ranks > cores)
    version_unseen: float | None = None  # seconds of a cell update whose batch saw none of its Gaussians
    plan_shared: float = 1.0  # planning on ranks that outnumber the cores takes this many even shares
    switch_seconds: float = 0.0  # processor seconds a rank loses each time it gets a shared core back
    step_seconds: float = 0.0  # grendel: fixed seconds per training step on every GPU (its Python loop)
    sharded: bool = False  # odin, barrier: charge the sharded runtime's window ends and planning (below)
    plan_by_gpus: tuple = ()  # ((P, seconds), ...) measured planning per window at P ranks (sharded)
    forward_share: float = FORWARD_SHARE  # of an image's cost, the part before its serving point (below)
    host_sends: bool = False  # a what-if: the sender's time paid by a host thread beside the GPU (below)

    def sharded_planning_seconds(self, gpus: int) -> float:
        """Seconds of one window's planning at ``gpus`` ranks: ``plan_by_gpus`` interpolated linearly in
        log P (held at its ends); 0 without measurements."""
        if not self.plan_by_gpus:
            return 0.0
        ranks, seconds = zip(*sorted(self.plan_by_gpus))
        return float(np.interp(math.log2(gpus), np.log2(ranks), seconds))

    def slowdown(self, ranks: int) -> float:
        """Factor by which work takes longer when ``ranks`` ranks do it at once on the shared ``cores``
        (1 without sharing)."""
        return max(1.0, ranks / self.cores) if self.cores else 1.0

    def planning_seconds(self, ranks: int) -> float:
        """Seconds of one window's planning by ``ranks`` ranks: ``plan_seconds`` times the even share
        of the cores, and times ``plan_shared`` when the ranks outnumber them."""
        shared = self.plan_shared if self.cores and ranks > self.cores else 1.0
        return self.plan_seconds * self.slowdown(ranks) * shared

    def image_seconds(self, features: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """[n] seconds of image steps with ``features`` [n, 3] (visible, pixels, pairs) rendering
        ``rows`` [n] Gaussians."""
        return (self.image[0] + np.asarray(features, np.float64) @ np.asarray(self.image[1:], np.float64)
                + self.render_rows * np.asarray(rows, np.float64))

    def version_seconds(self, rows: np.ndarray, seen: np.ndarray | None = None) -> np.ndarray:
        """[n] seconds of cell updates of ``rows`` [n] Gaussians; ``seen`` [n] bool: whether the batch
        saw any of them (an update of an unseen cell sums the gradients and skips the Adam step)."""
        full = self.version[0] + self.version[1] * np.asarray(rows, np.float64)
        if seen is None or self.version_unseen is None:
            return full
        return np.where(seen, full, self.version_unseen)

    def link(self, src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(latency [m], bandwidth [m]) of the messages from ranks ``src`` [m] to ``dst`` [m]."""
        same = np.asarray(src) // self.gpus_per_node == np.asarray(dst) // self.gpus_per_node
        return (np.where(same, self.node_latency, self.latency),
                np.where(same, self.node_bandwidth, self.bandwidth))

    def barrier_seconds(self, ranks: int) -> float:
        """A barrier: a dissemination of ceil(log2 P) rounds of the slowest latency in use."""
        rounds = math.ceil(math.log2(ranks)) if ranks > 1 else 0
        return rounds * (self.latency if ranks > self.gpus_per_node else self.node_latency)

    def allgather_seconds(self, total_bytes: float, ranks: int) -> float:
        """An allgather of ``total_bytes`` (all ranks' parts together): ring, (P - 1) steps."""
        if ranks == 1:
            return 0.0
        slow = ranks > self.gpus_per_node
        latency, bandwidth = (self.latency, self.bandwidth) if slow else (self.node_latency, self.node_bandwidth)
        return (ranks - 1) * latency + total_bytes * (ranks - 1) / ranks / bandwidth


#: Our CUDA kernels' profile (was ``h200-ib`` before the profiles from published measurements).
#: Compute: the README's H200 timings of our CUDA kernels (forward + backward
#: of one 256 x 256 image: 10,000 Gaussians 8.5 ms, 100,000 Gaussians 9.4 ms), which give
#: c_vis = 0.9 ms / 90,000 = 1.0e-8 s per visible Gaussian and 8.4 ms for the rest; with one image size
#: measured, the rest cannot be split into a constant and a per-pixel part: it is charged per pixel
#: (8.4 ms / 65,536 px). Tile pairs are not separable from these two points (coefficient 0), nor are
#: Gaussians rendered from Gaussians visible (every one was on screen): all is charged as visible. Cell
#: update: Adam reads and writes parameters, gradient and two moments (7 x 14 floats per Gaussian) at
#: the H200's 4.8 TB/s HBM3e (NVIDIA H200 datasheet), plus a 10 us kernel launch. Network: NVLink 4
#: between the 8 GPUs of a node, 450 GB/s per direction (900 GB/s bidirectional, H200 SXM datasheet),
#: 3 us per message; between nodes one 200 Gb/s InfiniBand HDR port per GPU = 25 GB/s (IBTA HDR
#: rate), 5 us per message (MPI small-message latency over HDR with GPU buffers); 5 us of host time
#: per message sent. Planning is assumed to run ahead of the GPUs (as in Odin), off the critical path.
H200_KERNELS = CostProfile(
    name="h200-kernels", image=(0.0, 1.0e-8, 8.4e-3 / 65536, 0.0), version=(1.0e-5, 7 * 14 * 4 / 4.8e12),
    latency=5e-6, bandwidth=25e9, node_latency=3e-6, node_bandwidth=450e9, gpus_per_node=8, overhead=5e-6,
    count_planning=False,
    source="compute: README H200 render timings (256x256 fwd+bwd, 10k: 8.5 ms, 100k: 9.4 ms); cell update: "
           "HBM3e 4.8 TB/s (H200 datasheet) + 10 us; NVLink 4 450 GB/s/direction, 3 us; InfiniBand HDR "
           "200 Gb/s = 25 GB/s per GPU, 5 us; 8 GPUs per node")

#: A100 40 GB: 1,555 GB/s HBM2, 19.5 TFLOPS FP32 (NVIDIA A100 datasheet); H200 SXM: 4.8 TB/s HBM3e,
#: 67 TFLOPS FP32 (NVIDIA H200 datasheet)
A100_HBM, A100_FP32, H200_HBM, H200_FP32 = 1.555e12, 19.5e12, 4.8e12, 67e12

#: Grendel-GS's experimental set-up with the reference 3DGS rasterizer (SH degree 3). Compute: per pixel
#: (c_px), per tile pair (c_pair), the projection per Gaussian a GPU holds per camera (render_rows),
#: Adam per Gaussian a GPU holds (version[1]) and a fixed time per training step (step_seconds) fitted
#: by ``python benchmarks/grendel_table.py --fit`` to the three published 30k-image times (1 GPU batch
#: 1, 4 GPUs batch 1, 4 GPUs batch 4; Grendel-GS README, 4 x A100 40 GB) of bicycle, kitchen and
#: counter with their presets (``sim.presets``), every fitted time within 11 % of the published; the
#: other four scenes are predictions (``benchmarks/grendel_table.py``). The published times include
#: densification and evaluation, spread over the steps. Adam comes out at 2.3 ns per Gaussian, 2.2
#: times what moving parameters, gradient and two moments of 59 float32 (read p, g, m, v; write p, m,
#: v: 7 x 59 x 4 bytes) at the A100's 1,555 GB/s takes (torch's unfused Adam passes over them more often); the projection at nearly 0 (it is not separable from the pixels and pairs
#: in these scenes). c0, c_vis: 0 (not fitted). Network: 25 GB/s NVLink between GPUs of a node
#: ("Fully-connected Bidirectional 25GB/s NVLINK", Grendel-GS README) for up to 8 per node, 3 us a
#: message; InfiniBand HDR between nodes (200 Gb/s = 25 GB/s per GPU, 5 us); 5 us of host time per
#: message sent.
A100_NVLINK = CostProfile(
    name="a100-nvlink", image=(0.0, 0.0, 2.071e-08, 3.345e-09), version=(1.0e-5, 2.322e-09),
    latency=5e-6, bandwidth=25e9, node_latency=3e-6, node_bandwidth=25e9, gpus_per_node=8, overhead=5e-6,
    count_planning=False, render_rows=3.022e-14, step_seconds=6.68e-3, sharded=True,
    source="compute fitted to Grendel-GS README 30k-image times (Mip360 bicycle, kitchen, counter; 1 GPU "
           "b1, 4 GPU b1, 4 GPU b4; A100 40GB) by benchmarks/grendel_table.py --fit: 20.7 ns/pixel, 3.3 "
           "ns/tile pair, Adam 2.3 ns/Gaussian, 6.7 ms/step; NVLink 25 GB/s within 8-GPU nodes (Grendel-GS "
           "README), 3 us; InfiniBand HDR 25 GB/s, 5 us between nodes")


def _scaled_to_h200(profile: CostProfile) -> CostProfile:
    """``profile``'s A100 compute moved to the H200 by the published figures: rasterizing (c0, c_vis,
    c_px, c_pair) by the FP32 rate (67 / 19.5), projection and Adam (memory-bound passes over the
    Gaussians) by the memory bandwidth (4.8 / 1.555); the fixed time per step (host-bound) kept;
    NVLink 4 at 450 GB/s per direction (H200 SXM datasheet) within 8-GPU nodes, InfiniBand HDR between."""
    fp32, hbm = H200_FP32 / A100_FP32, H200_HBM / A100_HBM
    return replace(profile, name="h200-ib", image=tuple(c / fp32 for c in profile.image),
                   render_rows=profile.render_rows / hbm, version=(profile.version[0], profile.version[1] / hbm),
                   node_bandwidth=450e9,
                   source="a100-nvlink's compute scaled by the H200/A100 datasheet figures (FP32 67/19.5 "
                          "TFLOPS for rasterizing, HBM 4.8/1.555 TB/s for projection and Adam); NVLink 4 "
                          "450 GB/s per direction within 8-GPU nodes, 3 us; InfiniBand HDR 25 GB/s, 5 us")


H200_IB = _scaled_to_h200(A100_NVLINK)


def load_profile(name: str, gaussians: int = 1_000_000, host_sends: bool = False) -> CostProfile:
    """The profile ``name``: 'a100-nvlink', 'h200-ib', 'h200-kernels', or 'cpu-here' (measured here,
    ``profiles/cpu-here.json``). The sharded profiles plan as measured for the scene size in
    ``profiles/plan-times.json`` nearest (in log) to ``gaussians``. ``host_sends``: with the what-if of
    that name (the sender's time on a host thread beside each GPU, ``pregel train --send-thread``)."""
    profile = _named_profile(name, gaussians)
    return replace(profile, host_sends=True) if host_sends else profile


def _named_profile(name: str, gaussians: int) -> CostProfile:
    builtin = {p.name: p for p in (A100_NVLINK, H200_IB, H200_KERNELS)}
    if name in builtin:
        profile = builtin[name]
        plans = os.path.join(PROFILE_DIR, "plan-times.json")
        if profile.sharded and os.path.exists(plans):  # measured by benchmarks/plan_time.py
            with open(plans) as f:
                entry = min(json.load(f)["measurements"], key=lambda e: abs(math.log(e["gaussians"] / gaussians)))
            profile = replace(profile, plan_by_gpus=tuple(tuple(x) for x in entry["plan_by_gpus"]))
        return profile
    if name == "cpu-here":
        path = os.path.join(PROFILE_DIR, "cpu-here.json")
        with open(path) as f:
            data = json.load(f)
        data["image"], data["version"] = tuple(data["image"]), tuple(data["version"])
        data["image_noise"] = tuple(data.get("image_noise", ()))
        return CostProfile(**data)
    raise ValueError(f"unknown cost profile {name!r} (a100-nvlink, h200-ib, h200-kernels, cpu-here)")


def save_profile(profile: CostProfile, path) -> None:
    """Write ``profile`` as JSON (what ``load_profile`` reads)."""
    with open(path, "w") as f:
        json.dump(asdict(profile), f, indent=1)


def fit_costs(features: np.ndarray, seconds: np.ndarray) -> np.ndarray:
    """Non-negative least-squares coefficients [1 + f] (intercept first) of ``seconds`` [n] on
    ``features`` [n, f]. Columns are scaled to unit size for the solve."""
    from scipy.optimize import nnls

    x = np.column_stack([np.ones(len(seconds)), np.asarray(features, np.float64)])
    scale = np.maximum(np.abs(x).max(axis=0), 1e-300)
    coef, _ = nnls(x / scale, np.asarray(seconds, np.float64))
    return coef / scale


@dataclass
class CameraViews:
    """What every camera sees of a model: its cost features and the Gaussians on its screen.

    features: [C, 3] float64 (visible Gaussians, pixels, tile-Gaussian pairs); on_screen_indptr [C + 1],
    on_screen [n] int64: CSR of the ids of the (projected sample of) Gaussians on each camera's screen;
    row_lo, row_hi [n] int32: the tile rows [lo, hi) each of them covers, tile_cols [n] float64: how
    many tile columns; weight: Gaussians each projected one stands for (G / sample size); width,
    height: the image size (what Grendel's pixel partitions split, ``sim.grendel``).
    """

    features: np.ndarray
    on_screen_indptr: np.ndarray
    on_screen: np.ndarray
    row_lo: np.ndarray | None = None
    row_hi: np.ndarray | None = None
    tile_cols: np.ndarray | None = None
    weight: float = 1.0
    width: int = 0
    height: int = 0

    def cameras_see_cells(self, cameras: np.ndarray, cells: np.ndarray, cell_of: np.ndarray) -> np.ndarray:
        """[k] bool: whether camera ``cameras[j]`` has a Gaussian of cell ``cells[j]`` on screen
        (cameras, cells [k] int64; cell_of [G] the cell of every Gaussian)."""
        num_cells = int(cell_of.max(initial=0)) + 1
        camera_of = np.repeat(np.arange(len(self.on_screen_indptr) - 1, dtype=np.int64), np.diff(self.on_screen_indptr))
        on_screen = np.unique(camera_of * num_cells + cell_of[self.on_screen])
        return np.isin(np.asarray(cameras, np.int64) * num_cells + np.asarray(cells, np.int64), on_screen)


def camera_views(means: np.ndarray, scales: np.ndarray, quats: np.ndarray, viewmats: np.ndarray,
                 Ks: np.ndarray, width: int, height: int, sample: float = 1.0, seed: int = 0) -> CameraViews:
    """The ``CameraViews`` of every camera.

    means, scales (log), quats: [G, 3], [G, 3], [G, 4]; viewmats [C, 4, 4]; Ks [C, 3, 3]. With
    ``sample`` < 1 a seeded subsample of the Gaussians is projected and the counts are scaled up
    (large metadata-only scenes). Uses the rasterizer's own projection and tile rule.
    """
    from kernels.splat.binning import tile_grid
    from kernels.splat.constants import TILE_SIZE
    from kernels.splat.projection import project

    count = len(means)
    pick = np.arange(count)
    if sample < 1.0:
        pick = np.sort(np.random.default_rng(seed).choice(count, max(1, int(sample * count)), replace=False))
    m, s, q = (np.ascontiguousarray(a[pick], np.float32) for a in (means, scales, quats))
    tiles_x, tiles_y = tile_grid(width, height)
    out, on_screen, lows, highs, cols = np.empty((len(viewmats), 3)), [], [], [], []
    for c in range(len(viewmats)):  # one kernel call per camera, vectorised over Gaussians
        mean2d, _, _, radius = project(m, s, q, np.asarray(viewmats[c]), np.asarray(Ks[c]), width, height)
        seen = radius > 0
        r, mx, my = radius[seen].astype(np.float64), mean2d[seen, 0], mean2d[seen, 1]
        span_x = np.clip(np.ceil((mx + r) / TILE_SIZE), 0, tiles_x) - np.clip(np.floor((mx - r) / TILE_SIZE), 0, tiles_x)
        low, high = (np.clip(f((my + sign * r) / TILE_SIZE), 0, tiles_y) for f, sign in ((np.floor, -1), (np.ceil, 1)))
        out[c] = (seen.sum(), width * height, (span_x * (high - low)).sum())
        on_screen.append(pick[seen])
        lows.append(low.astype(np.int32))
        highs.append(high.astype(np.int32))
        cols.append(span_x)
    out[:, [0, 2]] *= count / len(pick)
    indptr = np.concatenate([[0], np.cumsum([len(x) for x in on_screen])]).astype(np.int64)
    join = lambda parts, dtype: np.concatenate(parts).astype(dtype) if parts else np.empty(0, dtype)  # noqa: E731
    return CameraViews(out, indptr, join(on_screen, np.int64), join(lows, np.int32), join(highs, np.int32),
                       join(cols, np.float64), count / len(pick), width, height)


def pingpong(comm, sizes=(8, 1 << 12, 1 << 16, 1 << 20, 1 << 22), repeats: int = 50) -> tuple[float, float]:
    """(latency s, bandwidth bytes/s) between ranks 0 and 1 of ``comm`` (collective; ranks > 1 idle):
    half the round trip of float32 messages of ``sizes`` bytes, fitted as latency + bytes / bandwidth."""
    import time

    half = []
    for nbytes in sizes:
        buffer = np.zeros(nbytes // 4, np.float32)
        comm.barrier()
        t0 = time.perf_counter()
        for _ in range(repeats):
            if comm.rank == 0:
                comm.mpi.Send(buffer, dest=1)
                comm.mpi.Recv(buffer, source=1)
            elif comm.rank == 1:
                comm.mpi.Recv(buffer, source=0)
                comm.mpi.Send(buffer, dest=0)
        half.append((time.perf_counter() - t0) / (2 * repeats))
    coef = fit_costs(np.array(sizes, np.float64)[:, None], np.array(half))
    return float(comm.bcast(coef[0])), float(comm.bcast(1.0 / max(coef[1], 1e-15)))


def look_for_a_message(keep_looking) -> int:
    """Look for a message that never comes, then sleep, the way ``pregel.comm.Comm.waitsome`` waits when
    ranks share cores, for as long as ``keep_looking(looks so far)`` is true; returns the looks."""
    import time

    from mpi4py import MPI

    from pregel.comm import IDLE_POLL_SECONDS, Comm

    request, looks = MPI.COMM_SELF.Irecv(np.empty(1, np.float32), source=0, tag=0), 0
    while keep_looking(looks):
        Comm.testsome([request])
        time.sleep(IDLE_POLL_SECONDS)
        looks += 1
    request.Cancel()
    request.Wait()
    return looks


def polling(looks: int = 2000) -> tuple[float, float]:
    """(processor seconds of one look, seconds slept after it) of a rank waiting for a message the way
    ``pregel.comm.Comm.waitsome`` waits, timed over ``looks`` looks (``look_for_a_message``)."""
    import time

    look_for_a_message(lambda done: done < 1)  # the first look initialises MPI: not timed
    wall, cpu = time.perf_counter(), time.process_time()
    look_for_a_message(lambda done: done < looks)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return cpu / looks, (wall - cpu) / looks


def _run_lengths(seconds: float, gap: float, out) -> None:
    """Spin for ``seconds``; put on ``out`` the lengths [k] of the stretches run without a pause
    longer than ``gap`` seconds (the first and last, cut by the start and end, left out)."""
    import time

    runs, begin = [], time.perf_counter()
    last = start = begin
    while last - begin < seconds:
        now = time.perf_counter()
        if now - last > gap:
            runs.append(last - start)
            start = now
        last = now
    out.put(runs[1:])


def time_slice(cores: int, seconds: float = 1.0, gap: float = 5e-5) -> float:
    """Seconds the operating system lets a busy process run before it gives the processor to a
    waiting one: the median stretch of uninterrupted running of ``cores + 1`` spinning processes."""
    import multiprocessing

    queue = multiprocessing.Queue()
    workers = [multiprocessing.Process(target=_run_lengths, args=(seconds, gap, queue)) for _ in range(cores + 1)]
    for w in workers:
        w.start()
    runs = np.concatenate([np.asarray(queue.get(), np.float64) for _ in workers])
    for w in workers:
        w.join()
    return float(np.median(runs)) if runs.size else 0.0
