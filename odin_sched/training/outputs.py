"""The trained model's files, written by rank 0 from the rows every rank owns, streamed in bounded pieces.

``write_trained`` is collective: every rank passes the Gaussians it owns (global ids and parameters,
any split of the model over the ranks, any order), and rank 0 writes

* the trained scene file: ``/gaussians/*`` sorted by id (with ``/gaussians/ids``, ``/gaussians/sh``
  and its DC colour ``/gaussians/colors``), ``/metrics/*``, the root attributes, and the source
  scene's cameras, held-out split and images (copied from the source file a few cameras at a time);
* the optional 3DGS PLY, in the same order;
* the PNG of the first held-out view (rendered by the caller) beside its ground truth (read from the
  source file).

The rows reach rank 0 by a k-way merge: each rank sorts its rows by id and sends them in blocks of at
most ``piece_bytes / P`` bytes, one in flight at a time, which rank 0 receives once it has written all of
that rank's previous block (no collective per block: meeting the others at one per block kept rank 0
asleep 4.1 s of its 23 s at 10,000,000 Gaussians; docs/odin-measurements.md, "Rank 0's writing without a
collective per block"). Rank 0 writes every buffered row whose id is at most the smallest "last id of the latest block"
among the ranks still sending (no row with a smaller id can come later), so its buffer never holds
more than ``piece_bytes`` of rows, whatever the size of the model (at most a few copies of a piece are
alive at once: the received blocks, the merged block, its columns, its PLY rows). The files are those that
``odin_sched.scenes.scene_io.write_scene`` and ``odin_sched.scenes.ply.write_ply`` write from the
whole model sorted by id, dataset for dataset. Every file appears atomically; a problem (a NaN, a
repeated id) is one ``InputError`` on every rank, and nothing is written.

``/metrics`` is written last, after every row and the PNG, just before the files close, so that a figure
of the writing itself can be in it: ``late_metrics``, called on every rank once its part is done (rank 0:
everything written but ``/metrics``; the others: every row sent), gives the entries that are known only
then (the distributed trainer's ``/metrics/per_rank`` with each process's peak resident set). The ranks
other than 0 wait for rank 0 without polling a processor (``Comm.waitall``/``barrier`` with ``idle``: they
look, then sleep, longer and longer up to ``pregel.comm.IDLE_POLL_MAX_SECONDS``); an error on rank 0
still ends every rank (an ``InputError`` by the agreement at the end, anything else by the launcher's
abort).
"""
import os
from contextlib import ExitStack
from dataclasses import dataclass

import h5py
import numpy as np

from odin_sched.scenes.ply import ply_header, ply_rows
from odin_sched.scenes.scene_io import FORMAT, VERSION, default_heldout, validate_gaussians, validate_metrics
from odin_sched.scenes.sh import sh0_to_rgb
from pregel.atomic import atomic_h5, atomic_output
from pregel.errors import InputError

#: the most bytes of rows rank 0 buffers at once (and so the largest message), and of images copied at once:
#: rank 0 holds a few copies of a piece while writing it (with 64 MiB, the whole model of 200,000 Gaussians
#: in one piece, its output phase added 148 MiB; docs/odin-measurements.md, "The floor, measured, and the output phase")
PIECE_BYTES = 8 << 20
#: message tag of the rows' blocks
ROWS_TAG = 31_001
#: float32 columns of a packed row before the parameters: the int64 id's two halves
ID_COLUMNS = 2
#: the parameters of a packed row, in its order
PARAM_NAMES = ("means", "scales", "quats", "opacities", "sh0", "shN")


@dataclass(frozen=True)
class OutputPaths:
    """Where the trained model goes: the scene file, the optional PLY, the comparison PNG (optional)."""

    out: str
    ply: str | None = None
    png: str | None = None


def id_order(ids: np.ndarray):
    """The order that sorts ``ids`` [n] int64 (stable), or None when they ascend already (the trainers'
    rows do: then no gather, which would cost more than the packing)."""
    return None if len(ids) < 2 or bool(np.all(ids[1:] > ids[:-1])) else np.argsort(ids, kind="stable")


def row_width(params: dict) -> int:
    """The float32 columns of a packed row of ``params`` (name -> [n, ...]): the id's two, then each
    parameter's values in ``PARAM_NAMES`` order."""
    return ID_COLUMNS + sum(int(np.prod(np.shape(params[name])[1:])) for name in PARAM_NAMES)


def pack_rows(ids: np.ndarray, params: dict) -> np.ndarray:
    """float32 [n, 2 + 11 + 3K], sorted by id: each Gaussian's int64 id (its bits in two float32
    columns), means 3, log scales 3, quaternion 4, opacity logit 1 and SH coefficients K x 3.

    ids: [n] int64; params: name -> NumPy [n, ...] float32 (means, scales, quats, opacities, sh0, shN)."""
    ids = np.ascontiguousarray(ids, dtype="<i8")
    n, order = len(ids), id_order(ids)
    rows = np.empty((n, row_width(params)), np.float32)  # filled a column group at a time: no second copy
    rows[:, :ID_COLUMNS] = (ids if order is None else ids[order]).view("<f4").reshape(n, ID_COLUMNS)
    start = ID_COLUMNS
    for name in PARAM_NAMES:  # a loop over the 6 parameter groups
        width = int(np.prod(np.shape(params[name])[1:]))
        block = np.asarray(params[name]).reshape(n, width)
        rows[:, start:start + width] = block if order is None else block[order]
        start += width
    return rows


class PackedRows:
    """``pack_rows(ids, params)`` made a slice at a time: ``rows[a:b]`` packs only those rows (of the rows in
    ascending id), so the whole model is never copied at once. ``shape``: (n, width); ids and params as
    ``pack_rows`` takes them (kept, not copied)."""

    def __init__(self, ids: np.ndarray, params: dict):
        self.ids = np.ascontiguousarray(ids, dtype="<i8")
        self.params, self.order = params, id_order(self.ids)  # slices of ascending rows are packed as they are
        self.shape = (len(self.ids), row_width(params))

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, rows: slice) -> np.ndarray:
        """float32 [len(rows), width]: the packed rows ``rows`` of all of them sorted by id."""
        index = rows if self.order is None else self.order[rows]
        return pack_rows(self.ids[index], {name: np.asarray(self.params[name])[index] for name in PARAM_NAMES})


def unpack_rows(rows: np.ndarray) -> dict:
    """Inverse of ``pack_rows``: ids [n] int64, means, scales, quats, opacities, sh [n, K, 3] float32."""
    n = len(rows)
    ids = np.ascontiguousarray(rows[:, :ID_COLUMNS]).view("<i8").reshape(n)
    out, col = {"ids": ids}, ID_COLUMNS
    for name, width in (("means", 3), ("scales", 3), ("quats", 4), ("opacities", 1)):
        out[name] = rows[:, col:col + width].reshape(n) if width == 1 else rows[:, col:col + width]
        col += width
    out["sh"] = rows[:, col:].reshape(n, (rows.shape[1] - col) // 3, 3)
    return out


def _ids(rows: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(rows[:, :ID_COLUMNS]).view("<i8").reshape(len(rows))


def merged_rows(comm, rows, piece_bytes: int = PIECE_BYTES):
    """Every rank's ``rows`` (packed, sorted by id, the same width everywhere: an array or ``PackedRows``,
    sliced a block at a time) in ascending id order, as
    blocks [m, width] yielded on rank 0 (nothing on the others, which send theirs); collective: every
    rank must run the generator to its end. Rank 0 buffers at most ``piece_bytes`` of rows.

    No collective per block: each other rank sends its blocks in order, one in flight at a time (the next
    once rank 0 has received the last, waiting idle meanwhile), and rank 0 receives a rank's next block
    when it has written all of that rank's previous one, so the next is usually there already."""
    size, rank = (1, 0) if comm is None else (comm.size, comm.rank)
    block = max(1, piece_bytes // (size * rows.shape[1] * 4))
    if size == 1:
        for start in range(0, len(rows), block):
            yield rows[start:start + block]
        return
    counts = np.array(comm.allgather(len(rows)), np.int64)
    if rank != 0:
        for start in range(0, len(rows), block):
            comm.waitall([comm.isend(np.ascontiguousarray(rows[start:start + block]).reshape(-1), 0, ROWS_TAG)],
                         idle=True)
        return
    sent = np.zeros(size, np.int64)            # the rows each rank has sent so far
    buffers = [rows[:0]] * size                # each rank's received rows not yet written ...
    ids = [np.empty(0, np.int64)] * size       # ... and their ids
    while True:
        want = np.flatnonzero([len(b) == 0 for b in buffers] & (sent < counts))  # the ranks to receive from
        if len(want) == 0 and not any(len(b) for b in buffers):
            return
        requests = []
        for r in want:
            n = int(min(block, counts[r] - sent[r]))
            if r == 0:
                buffers[0] = rows[sent[0]:sent[0] + n]
            else:
                buffers[r] = np.empty((n, rows.shape[1]), np.float32)
                requests.append(comm.irecv(buffers[r].reshape(-1), int(r), ROWS_TAG))
            sent[r] += n
        comm.waitall(requests)
        for r in want:
            ids[r] = _ids(buffers[r])
        # the rows with ids up to the smallest "last id received" of the ranks still sending are final:
        # no smaller id can come later
        bound = min((int(ids[r][-1]) for r in np.flatnonzero(sent < counts)), default=None)
        cut = [len(i) if bound is None else int(np.searchsorted(i, bound, side="right")) for i in ids]
        order = np.argsort(np.concatenate([i[:c] for i, c in zip(ids, cut)]), kind="stable")
        ready = np.concatenate([b[:c] for b, c in zip(buffers, cut)])[order]  # the unsorted copy freed at once
        buffers, ids = [b[c:] for b, c in zip(buffers, cut)], [i[c:] for i, c in zip(ids, cut)]
        yield ready


class _TrainedFiles:
    """Rank 0's open outputs (the scene file, the PLY), filled block by block in id order."""

    def __init__(self, stack: ExitStack, paths: OutputPaths, source, total: int, sh_count: int, metrics: dict,
                 attrs: dict, piece_bytes: int):
        self.paths, self.total, self.done, self.last_id = paths, total, 0, None
        validate_metrics(metrics, paths.out)
        if total == 0:
            raise InputError.at(paths.out, "/gaussians/means", "the scene has no Gaussians")
        self.f = f = stack.enter_context(atomic_h5(paths.out))
        f.attrs["format"], f.attrs["version"] = FORMAT, VERSION
        f.attrs["width"], f.attrs["height"] = int(source.attrs["width"]), int(source.attrs["height"])
        for key, value in attrs.items():
            f.attrs[key] = value
        self.datasets = {name: f.create_dataset(f"gaussians/{name}", shape=(total,) + tail, dtype=dtype)
                         for name, tail, dtype in (("means", (3,), np.float32), ("scales", (3,), np.float32),
                                                   ("quats", (4,), np.float32), ("opacities", (), np.float32),
                                                   ("colors", (3,), np.float32), ("sh", (sh_count, 3), np.float32),
                                                   ("ids", (), np.int64))}
        _copy_cameras(source, f, piece_bytes)
        self.ply = None
        if paths.ply is not None:
            self.ply = open(stack.enter_context(atomic_output(paths.ply, ".ply")), "wb")
            stack.callback(self.ply.close)
            self.ply.write(ply_header(total, sh_count))

    def write_metrics(self, metrics: dict) -> None:
        """``/metrics/*`` (name -> 1D/2D array), written last (see the module docstring)."""
        validate_metrics(metrics, self.paths.out)
        for name, values in metrics.items():
            self.f.create_dataset(f"metrics/{name}", data=np.asarray(values))

    def write(self, rows: np.ndarray) -> None:
        """Write the next block of ``rows`` (float32 [n, 2 + 11 + 3K], ``pack_rows``; ascending ids after
        all earlier blocks')."""
        # each column group copied once, contiguous: h5py, the checks and the PLY rows then read it as it is
        block = {name: np.ascontiguousarray(values) for name, values in unpack_rows(rows).items()}
        block["colors"] = sh0_to_rgb(block["sh"][:, 0]).astype(np.float32)
        validate_gaussians(block, self.paths.out)
        if self.last_id is not None and block["ids"][0] <= self.last_id:
            raise InputError.at(self.paths.out, "/gaussians/ids", f"id {block['ids'][0]} is given by more than "
                                "one Gaussian: ids must be unique")
        self.last_id = int(block["ids"][-1])
        stop = self.done + len(rows)
        for name, dataset in self.datasets.items():
            dataset[self.done:stop] = block[name]
        if self.ply is not None:
            self.ply.write(ply_rows(block["means"], block["scales"], block["quats"], block["opacities"],
                                    block["sh"]))  # its buffer, not a bytes copy
        self.done = stop


def _copy_cameras(source: h5py.File, f: h5py.File, piece_bytes: int) -> None:
    """The source scene's cameras, held-out split (its own, else the default) and images, the images
    copied a few cameras at a time (at most ``piece_bytes`` each, one HDF5 chunk per image)."""
    f.create_dataset("cameras/viewmats", data=source["cameras/viewmats"][()])
    f.create_dataset("cameras/Ks", data=source["cameras/Ks"][()])
    images = source["images"]
    cameras = images.shape[0]
    copied = f.create_dataset("images", shape=images.shape, dtype=images.dtype, chunks=(1,) + images.shape[1:])
    step = max(1, piece_bytes // max(1, int(np.prod(images.shape[1:]))))
    for start in range(0, cameras, step):  # a loop over pieces of at most piece_bytes, not over pixels
        copied[start:start + step] = images[start:start + step]
    heldout = source["cameras/heldout"][()] if "cameras/heldout" in source else default_heldout(cameras)
    f.create_dataset("cameras/heldout", data=heldout)


def heldout_truth(source: h5py.File) -> np.ndarray:
    """float32 [H, W, 3] in [0, 1]: the image of the first held-out camera of an open scene file."""
    images = source["images"]
    heldout = source["cameras/heldout"][()] if "cameras/heldout" in source else default_heldout(images.shape[0])
    return images[int(np.flatnonzero(heldout)[0])].astype(np.float32) / np.float32(255.0)


def save_comparison_png(path, rendered: np.ndarray, truth: np.ndarray) -> None:
    """PNG of a rendered view (left) beside its ground truth (right); images [H, W, 3] float in [0, 1]."""
    from PIL import Image

    both = np.concatenate([np.clip(np.asarray(rendered), 0, 1), np.asarray(truth)], axis=1)
    Image.fromarray(np.round(both * 255).astype(np.uint8)).save(path)


def write_trained(comm, ids: np.ndarray, params: dict, scene_path, paths: OutputPaths, view=None,
                  metrics: dict | None = None, attrs: dict | None = None, piece_bytes: int = PIECE_BYTES,
                  late_metrics=None) -> dict:
    """Write the trained model's files from the Gaussians every rank owns (collective; ``comm`` None: one
    process). See the module docstring.

    ids: [n] int64 this rank's Gaussians' global ids; params: name -> NumPy float32 [n, ...] (means,
    scales, quats, opacities, sh0 [n, 1, 3], shN [n, K - 1, 3]); scene_path: the source scene file;
    view: rank 0's rendered first held-out view [H, W, 3] in [0, 1] (needed when ``paths.png`` is given);
    metrics: name -> 1D/2D array (``/metrics``); attrs: the root attributes besides the format's;
    late_metrics: a function of no argument called on every rank (collective) when its part of the
    writing is done, returning on rank 0 more ``/metrics`` entries (name -> array), or None. Returns
    rank 0's ``/metrics`` entries with the late ones (the other ranks: what ``late_metrics`` returned
    there, or {}). A problem on any rank raises the same InputError on every rank; no file is then left
    behind."""
    rank = 0 if comm is None else comm.rank
    rows = PackedRows(ids, params)  # packed a piece at a time as the merge sends them
    widths = [rows.shape[1]] if comm is None else comm.allgather(rows.shape[1])
    if len(set(widths)) != 1:
        raise ValueError(f"write_trained: the ranks' rows have different widths {widths} (SH degrees differ)")
    sh_count = (rows.shape[1] - ID_COLUMNS - 11) // 3
    total = len(rows) if comm is None else int(sum(comm.allgather(len(rows))))
    merged = merged_rows(comm, rows, piece_bytes)
    problem, late = None, None
    if rank == 0:
        try:
            with ExitStack() as stack, h5py.File(os.fspath(scene_path), "r") as source:
                files = _TrainedFiles(stack, paths, source, total, sh_count, metrics or {}, attrs or {}, piece_bytes)
                for block in merged:
                    files.write(block)
                if paths.png is not None:
                    save_comparison_png(paths.png, view, heldout_truth(source))
                late = _late(comm, late_metrics)
                files.write_metrics({**(metrics or {}), **late})
        except InputError as err:
            problem = err
        except OSError as err:
            problem = InputError.at(paths.out, None, f"cannot write the trained model ({err})")
    for _ in merged:  # the other ranks send; after a problem rank 0 receives the rest, unwritten
        pass
    if late is None:  # the other ranks, and rank 0 after a problem before it called late_metrics
        late = _late(comm, late_metrics)
    if comm is not None:
        comm.agree(problem)
    elif problem is not None:
        raise problem
    return {**(metrics or {}), **late} if rank == 0 else late


def _late(comm, late_metrics) -> dict:
    """``late_metrics()`` (or {}), once every rank has come this far (the others wait idle for rank 0)."""
    if comm is not None:
        comm.barrier(idle=True)
    return (late_metrics() if late_metrics is not None else None) or {}
