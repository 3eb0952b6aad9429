"""Checkpoints of row-sharded state: every rank writes the rows it owns, any number of ranks restores.

The state is a table of rows (named columns, each an array [n, ...] with the same n on a rank: ids,
cells, parameters, optimizer state, counters, whatever the job keeps per row) spread over the ranks,
plus a few global values. A checkpoint after step k is a folder of ``pregel.checkpoint``'s layout
(``DIR/step-{k:09d}``, atomic files, a manifest written last by rank 0, the last two kept, a
mismatched job refused):

* ``global.npz``: the global values (``pregel.checkpoint.pack_state``: arrays, tensors, dicts and
  lists of them), written by rank 0;
* ``part-{r:05d}.npz``: rank r's rows, one uncompressed ``.npy`` member per column (``col{i}``),
  written straight to disk (no copy in memory);
* ``manifest.json``: the job's identity, the step, the number of ranks and rows, the columns (name,
  dtype, trailing shape) and every file's size and SHA-256.

Restoring works at any number of ranks: every rank checks every part's size and hash (reading it in
1 MiB blocks), then reads the parts ``chunk_bytes`` of rows at a time and keeps the rows that its
``select`` function picks from the chunk's small columns (for example the cell column, against the
cells this rank owns). A missing or damaged part is one ``InputError`` on every rank.
"""
import os
import zipfile
from pathlib import Path

import numpy as np

from pregel.atomic import atomic_output
from pregel.checkpoint import MANIFEST, CheckpointFolder, file_sha256, pack_state, unpack_state, write_part
from pregel.errors import InputError

GLOBAL = "global.npz"
#: bytes of rows a restoring rank reads at once
CHUNK_BYTES = 64 << 20


def part_name(rank: int) -> str:
    """The file name of rank ``rank``'s part of a step (``part-00003.npz``)."""
    return f"part-{rank:05d}.npz"


class ShardedCheckpointer(CheckpointFolder):
    """Writes checkpoints of row-sharded state into ``directory`` and restores the newest in ``resume``
    (see the module docstring); construct it on every rank (collective), as ``CheckpointFolder``."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.checked_parts = set()  # SHA-256 of the parts resumed from whose files were checked

    def save_rows(self, step: int, rows: dict, scalars, fields: dict | None = None) -> None:
        """Write the checkpoint after ``step`` (collective): this rank's ``rows`` (name -> array [n, ...],
        NumPy or torch, the same names, dtypes and trailing shapes on every rank), rank 0's ``scalars``
        (anything ``pack_state`` takes; the other ranks' are not used) and, in the manifest, ``fields``."""
        comm = self.comm
        step_dir = self.step_dir(step)
        if comm.rank == 0:
            step_dir.mkdir(parents=True, exist_ok=True)
        comm.barrier()
        columns = {name: np.ascontiguousarray(value.detach().cpu().numpy() if hasattr(value, "detach") else value)
                   for name, value in rows.items()}
        counts = {len(value) for value in columns.values()}
        if len(counts) > 1:
            raise ValueError(f"save_rows: columns have different lengths {sorted(counts)}")
        layout = [[name, value.dtype.str, list(value.shape[1:])] for name, value in columns.items()]
        layouts = comm.allgather(layout)
        if any(other != layout for other in layouts):
            raise ValueError(f"save_rows: the ranks' columns differ: {layouts}")
        part = _write_columns(step_dir, part_name(comm.rank), list(columns.values()))
        entries = comm.allgather((part, next(iter(counts), 0)))
        if comm.rank == 0:
            glob = write_part(step_dir, GLOBAL, pack_state(scalars))
            self.commit(step, [glob] + [entry for entry, _ in entries],
                        {"step": step, "ranks": comm.size, "rows": int(sum(n for _, n in entries)),
                         "columns": layout, **(fields or {})})
        comm.barrier()

    def load_rows(self, select, keys=("ids",), chunk_bytes: int = CHUNK_BYTES, columns=None) -> tuple:
        """This rank's rows of the checkpoint resumed from and its global values (collective): returns
        (rows: name -> NumPy array [m, ...], in the saved parts' order, scalars). ``select(small)``, with
        ``small`` the chunk's columns ``keys`` (name -> [c, ...]), gives the bool mask [c] of the rows to
        keep; rows are read ``chunk_bytes`` at a time. ``columns``: the names returned (default all); only
        they and ``keys`` are read from the parts. Each part's hash is checked once per checkpointer. A bad
        part raises one InputError on every rank."""
        problem, result = None, None
        try:
            result = self._load_rows(select, keys, chunk_bytes, columns)
        except InputError as err:
            problem = err
        self.comm.agree(problem)
        return result

    def _load_rows(self, select, keys, chunk_bytes: int, columns) -> tuple:
        step_dir, manifest = self.resume_from, self.manifest
        parts = manifest["parts"]
        if not parts or parts[0]["file"] != GLOBAL or "columns" not in manifest:
            raise InputError.at(step_dir / MANIFEST, None, "not a sharded checkpoint (no global part or columns)")
        for part in parts[1:]:
            if part["sha256"] not in self.checked_parts:
                check_part(step_dir, part)
                self.checked_parts.add(part["sha256"])
        scalars = unpack_state(self.read_part(0))
        layout = [(name, np.dtype(dtype), tuple(tail)) for name, dtype, tail in manifest["columns"]]
        names = [name for name, _, _ in layout]
        missing = [key for key in (*keys, *(columns or ())) if key not in names]
        if missing:
            raise InputError.at(step_dir / MANIFEST, None, f"checkpoint has no column {', '.join(missing)}")
        returned = names if columns is None else list(columns)
        read = [i for i, name in enumerate(names) if name in returned or name in keys]
        kept = {name: [] for name in returned}
        row_bytes = sum(layout[i][1].itemsize * int(np.prod(layout[i][2], dtype=np.int64)) for i in read)
        chunk = max(1, chunk_bytes // max(1, row_bytes))
        for part in parts[1:]:
            for chunk_columns in _read_columns(step_dir / part["file"], layout, chunk, read):
                mask = np.asarray(select({key: chunk_columns[key] for key in keys}), dtype=bool)
                for name in kept:
                    kept[name].append(chunk_columns[name][mask])
        rows = {}
        for name, dtype, tail in layout:
            if name in kept:
                rows[name] = np.concatenate(kept[name]) if kept[name] else np.empty((0,) + tail, dtype)
        return rows, scalars


def check_part(step_dir: Path, part: dict) -> None:
    """Raise InputError when a checkpoint part is missing or its size or SHA-256 differs from the
    manifest's (reading it in blocks, so checking a part does not hold it in memory)."""
    path = step_dir / part["file"]
    if not path.is_file():
        raise InputError.at(path, None, "checkpoint part is missing")
    if path.stat().st_size != part["bytes"] or file_sha256(path) != part["sha256"]:
        raise InputError.at(path, None, "checkpoint part is corrupted (its size or SHA-256 does not "
                                        "match the manifest)")


def _write_columns(step_dir: Path, name: str, columns: list) -> dict:
    """Write ``columns`` (arrays [n, ...]) as the npz ``name`` (members col0, col1, ...) atomically and
    durably; returns its manifest entry (file, bytes, sha256)."""
    path = step_dir / name
    with atomic_output(path, ".part") as temp:
        with open(temp, "wb") as f:
            np.savez(f, **{f"col{i}": value for i, value in enumerate(columns)})
            f.flush()
            os.fsync(f.fileno())
    return {"file": name, "bytes": path.stat().st_size, "sha256": file_sha256(path)}


def _read_columns(path: Path, layout: list, chunk: int, read: list):
    """Yield the columns ``read`` (indices into ``layout``) of a part ``chunk`` rows at a time (dict
    name -> array [c, ...]), each column read sequentially from its own member of the npz (the others
    are not read)."""
    try:
        with zipfile.ZipFile(path) as zf:
            handles, count = [], None
            for i in read:
                name, dtype, tail = layout[i]
                handle = zf.open(f"col{i}.npy")
                version = np.lib.format.read_magic(handle)
                shape, fortran, stored = (np.lib.format.read_array_header_1_0(handle) if version == (1, 0)
                                          else np.lib.format.read_array_header_2_0(handle))
                if fortran or stored != dtype or tuple(shape[1:]) != tail or (count is not None and shape[0] != count):
                    raise InputError.at(path, f"col{i}", f"column {name!r} is {stored} {list(shape)}, the manifest "
                                                         f"says {dtype} [n{''.join(f', {d}' for d in tail)}]")
                count = shape[0]
                handles.append(handle)
            for start in range(0, count or 0, chunk):  # a loop over chunks of rows, not over rows
                rows = min(chunk, count - start)
                columns = {}
                for i, handle in zip(read, handles):
                    name, dtype, tail = layout[i]
                    size = rows * int(np.prod(tail, dtype=np.int64))
                    data = handle.read(size * dtype.itemsize)
                    columns[name] = np.frombuffer(data, dtype, size).reshape((rows,) + tail)
                yield columns
    except (zipfile.BadZipFile, KeyError, ValueError, OSError) as err:
        raise InputError.at(path, None, f"checkpoint part cannot be read ({err})") from None

