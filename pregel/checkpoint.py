"""Checkpoint and restart of a superstep run (``pregel run`` and ``pregel infer``); the folder,
manifest and refusal logic (``CheckpointFolder``) also serves ``pregel train``
(``odin_sched.training.checkpoint``).

A checkpoint after superstep k is a folder ``DIR/step-{k:09d}`` holding one part per rank,
``part-{r:05d}.npz`` (the rank's owned global ids, vertex state, active flags and statistics so
far, plus the reduced aggregators), and ``manifest.json``, written by rank 0 only once every rank's
part is on disk: it names the graph file (size and the SHA-256 of its first MiB), the program and
its options, the number of ranks, the partitioner, the superstep and each part's size and SHA-256.
Every file is written atomically (temporary file, fsync, rename), so a checkpoint counts only when
its manifest exists; a folder without one (a job killed while writing it) is ignored. Once a
checkpoint is complete the older ones are removed, keeping the last two.

Restart reads the newest complete checkpoint. The saved state is keyed by global vertex id, so
every rank picks the rows it owns from every part: resuming with another number of ranks or
another partitioner is a redistribution. A manifest that does not match the graph or the options,
or a part whose hash does not match, is refused with one ``InputError`` line.
"""

import hashlib
import io
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pregel.atomic import atomic_output
from pregel.errors import InputError

FORMAT = "pregel-checkpoint"
VERSION = 1
MANIFEST = "manifest.json"
KEEP = 2
HEADER_BYTES = 1 << 20


def graph_identity(path) -> dict:
    """What identifies a graph file: its size in bytes and the SHA-256 of its first MiB (its
    HDF5 superblock, attributes and the start of its arrays)."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            head = f.read(HEADER_BYTES)
    except OSError as err:
        raise InputError.at(path, None, f"cannot read ({err.strerror})") from None
    return {"bytes": path.stat().st_size, "header_sha256": hashlib.sha256(head).hexdigest()}


def file_sha256(path) -> str:
    """SHA-256 of a whole file (to identify a user's program or model file)."""
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    except OSError as err:
        raise InputError.at(path, None, f"cannot read ({err.strerror})") from None
    return digest.hexdigest()


@dataclass
class Saved:
    """A checkpoint as restored on one rank: ``state`` (the program's structure: arrays, torch
    tensors, dicts and lists of them, rows [n, ...] in owned order), ``active`` [n] bool,
    ``aggregated`` (the reduced aggregators), ``stats`` [k, fields] float64 (this rank's rows when
    the number of ranks is unchanged, zeros otherwise) and ``superstep`` k."""

    superstep: int
    state: object
    active: np.ndarray
    aggregated: dict
    stats: np.ndarray


class CheckpointFolder:
    """A job's checkpoint folder: where checkpoints are written (every ``every`` steps, into
    ``directory``), which one a resumed job starts from (the newest complete one in ``resume``,
    checked against the job) and how one is completed (``commit``). The folder layout and the
    manifest are those of the module docstring; what a part holds is up to the subclass.

    ``identity``: JSON-serialisable description of the job (input file, program, options) that a
    resumed job must match. Construct it on every rank (collective: a bad folder or a mismatched
    checkpoint on any rank raises the same ``InputError`` everywhere).
    """

    def __init__(self, comm, identity: dict, directory=None, every: int = 1, resume=None):
        self.comm, self.identity = comm, identity
        self.directory = Path(directory) if directory is not None else None
        self.every, self.resume_from, self.manifest = every, None, None
        problem = None
        try:
            if every < 1:
                raise InputError(f"--checkpoint-every must be at least 1, got {every}")
            if resume is not None:
                self.resume_from, self.manifest = self._latest(Path(resume))
            if self.directory is not None:
                self._prepare_directory()
        except InputError as err:
            problem = err
        comm.agree(problem)

    # ------------------------------------------------------------------ writing

    def _prepare_directory(self):
        d = self.directory
        if d.exists() and not d.is_dir():
            raise InputError.at(d, None, "cannot write checkpoints: not a folder")
        if self.resume_from is None and d.is_dir() and _steps(d):
            raise InputError.at(d, None, "already holds checkpoints: resume with --resume "
                                         f"{d}, or choose an empty folder")
        if self.comm.rank == 0:
            try:
                d.mkdir(parents=True, exist_ok=True)
            except OSError as err:
                problem = f"cannot create the checkpoint folder ({err.strerror})"
                raise InputError.at(d, None, problem) from None

    def step_dir(self, step: int) -> Path:
        """The folder of the checkpoint after ``step`` steps."""
        return self.directory / f"step-{step:09d}"

    def commit(self, step: int, parts: list, fields: dict) -> None:
        """Complete the checkpoint after ``step`` once all its ``parts`` (``write_part``'s answers)
        are on disk: write its manifest (the identity, ``fields`` and the parts), then remove all
        but the last two complete checkpoints and any incomplete one. Called by one rank."""
        step_dir = self.step_dir(step)
        manifest = {"format": FORMAT, "version": VERSION, **self.identity, **fields, "every": self.every,
                    "parts": parts}
        _write_bytes(step_dir / MANIFEST, json.dumps(manifest, indent=1).encode())
        for old in _steps(self.directory)[:-KEEP]:
            shutil.rmtree(old, ignore_errors=True)
        for incomplete in self.directory.glob("step-*"):
            if incomplete.is_dir() and not (incomplete / MANIFEST).exists() and incomplete != step_dir:
                shutil.rmtree(incomplete, ignore_errors=True)

    # ------------------------------------------------------------------ restoring

    def _latest(self, directory: Path):
        """(step folder, manifest) of the newest complete checkpoint, checked against the job."""
        if directory.exists() and not directory.is_dir():
            raise InputError.at(directory, None, "is a file: give the checkpoint folder (the --checkpoint-dir "
                                                 "of the job), not a file in it")
        if not directory.is_dir():
            raise InputError.at(directory, None, "no such checkpoint folder")
        steps = _steps(directory)
        if not steps:
            raise InputError.at(directory, None, "holds no complete checkpoint")
        step_dir = steps[-1]
        try:
            manifest = json.loads((step_dir / MANIFEST).read_text())
        except (OSError, ValueError) as err:
            problem = f"unreadable checkpoint manifest ({err})"
            raise InputError.at(step_dir / MANIFEST, None, problem) from None
        if not isinstance(manifest, dict) or manifest.get("format") != FORMAT or \
                manifest.get("version") != VERSION:
            raise InputError.at(step_dir / MANIFEST, None, f"not a {FORMAT} version {VERSION} manifest")
        missing = [key for key in self.identity if key not in manifest]
        if missing:
            problem = (f"checkpoint was written by another kind of job: it records no {', '.join(missing)} "
                       f"(it has {', '.join(sorted(k for k in manifest if k not in ('format', 'version', 'parts')))})")
            raise InputError.at(step_dir / MANIFEST, None, problem)
        for key, want in self.identity.items():
            difference = _difference(key, manifest[key], want)
            if difference is not None:
                name, have, wanted = difference
                problem = f"checkpoint does not match this job: {name} was {_short(have)}, now {_short(wanted)}"
                raise InputError.at(step_dir / MANIFEST, None, problem)
        if self.directory is None:  # keep checkpointing where the job left off
            self.directory, self.every = directory, int(manifest.get("every", 1))
        return step_dir, manifest

    def read_part(self, index: int = 0) -> bytes:
        """The bytes of part ``index`` of the checkpoint resumed from, checked against the manifest."""
        return _read_part(self.resume_from, self.manifest["parts"][index])


class Checkpointer(CheckpointFolder):
    """Checkpoints of a superstep run: every ``every`` supersteps each rank writes its vertices'
    state; ``partitioner`` is recorded (a resume may use another one, as it may use another number
    of ranks). ``identity`` names the graph, the program and its options."""

    def __init__(self, comm, identity: dict, partitioner: str, directory=None, every: int = 1,
                 resume=None):
        self.partitioner = partitioner
        super().__init__(comm, identity, directory, every, resume)

    def due(self, superstep: int) -> bool:
        """Whether a checkpoint is written after ``superstep`` supersteps."""
        return self.directory is not None and superstep % self.every == 0

    def save(self, graph, superstep: int, state, active: np.ndarray, aggregated: dict,
             stats: np.ndarray) -> None:
        """Write this rank's part of the checkpoint after ``superstep`` (collective); rank 0 writes
        the manifest once every part is complete, then removes all but the last two.

        active: [n] bool; stats: [superstep, fields] this rank's statistics so far."""
        comm = self.comm
        step_dir = self.step_dir(superstep)
        if comm.rank == 0:
            step_dir.mkdir(parents=True, exist_ok=True)
        comm.barrier()
        spec, arrays = _flatten(state)
        payload = {"ids": graph.owned, "active": active, "stats": stats,
                   "spec": np.array(json.dumps(spec))}
        payload.update({f"leaf{i}": a for i, a in enumerate(arrays)})
        payload.update({f"agg/{name}": np.asarray(v) for name, v in aggregated.items()})
        buffer = io.BytesIO()
        np.savez(buffer, **payload)
        part = write_part(step_dir, f"part-{comm.rank:05d}.npz", buffer.getvalue())
        parts = comm.allgather(part)
        if comm.rank == 0:
            self.commit(superstep, parts, {"ranks": comm.size, "partitioner": self.partitioner,
                                           "num_vertices": graph.num_nodes, "superstep": superstep})
        comm.barrier()

    def load(self, graph) -> Saved | None:
        """This rank's rows of the newest checkpoint (None when not resuming); collective."""
        if self.resume_from is None:
            return None
        problem, saved = None, None
        try:
            saved = self._load(graph)
        except InputError as err:
            problem = err
        self.comm.agree(problem)
        return saved

    def _load(self, graph) -> Saved:
        m, n = self.manifest, graph.num_local
        if m.get("num_vertices") != graph.num_nodes:
            raise InputError.at(self.resume_from / MANIFEST, None, f"checkpoint has {m.get('num_vertices')} "
                                f"vertices, the graph {graph.num_nodes}")
        same_layout = m["ranks"] == self.comm.size
        leaves, active, aggregated, spec, stats = None, np.zeros(n, bool), {}, None, None
        for index, part in enumerate(m["parts"]):
            with np.load(io.BytesIO(_read_part(self.resume_from, part)), allow_pickle=False) as z:
                ids = z["ids"]
                if spec is None:
                    spec = json.loads(str(z["spec"]))
                    count = sum(1 for key in z.files if key.startswith("leaf"))
                    leaves = [np.empty((n,) + z[f"leaf{i}"].shape[1:], z[f"leaf{i}"].dtype)
                              for i in range(count)]
                    aggregated = {key[4:]: _python(z[key]) for key in z.files if key.startswith("agg/")}
                if same_layout and index == self.comm.rank:
                    stats = z["stats"]
                mine = graph.partition.owner(ids) == self.comm.rank
                rows = graph.local_index(ids[mine])
                active[rows] = z["active"][mine]
                for i, leaf in enumerate(leaves):
                    leaf[rows] = z[f"leaf{i}"][mine]
        superstep = int(m["superstep"])
        if stats is None:
            from pregel.stats import FIELDS

            stats = np.zeros((superstep, len(FIELDS)))
        return Saved(superstep, _unflatten(spec, leaves), active, aggregated, stats)


# ---------------------------------------------------------------- helpers

def _steps(directory: Path) -> list:
    """Complete checkpoint folders of ``directory``, oldest first."""
    return sorted(p for p in directory.glob("step-*") if (p / MANIFEST).is_file())


def write_part(step_dir: Path, name: str, data: bytes) -> dict:
    """Write one part of a checkpoint atomically; returns its manifest entry (file, bytes, sha256)."""
    _write_bytes(step_dir / name, data)
    return {"file": name, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def pack_state(state) -> bytes:
    """An npz file's bytes holding ``state`` (arrays, torch tensors, dicts and lists of them)."""
    spec, arrays = _flatten(state)
    buffer = io.BytesIO()
    np.savez(buffer, spec=np.array(json.dumps(spec)), **{f"leaf{i}": a for i, a in enumerate(arrays)})
    return buffer.getvalue()


def unpack_state(data: bytes):
    """The state that ``pack_state`` packed into ``data`` (torch leaves come back as tensors)."""
    with np.load(io.BytesIO(data), allow_pickle=False) as z:
        spec = json.loads(str(z["spec"]))
        leaves = [z[f"leaf{i}"] for i in range(sum(1 for key in z.files if key.startswith("leaf")))]
    return _unflatten(spec, leaves)


def _write_bytes(path: Path, data: bytes) -> None:
    with atomic_output(path, ".part") as temp:
        with open(temp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())


def _read_part(step_dir: Path, part: dict) -> bytes:
    path = step_dir / part["file"]
    try:
        data = path.read_bytes()
    except OSError:
        raise InputError.at(path, None, "checkpoint part is missing") from None
    if len(data) != part["bytes"] or hashlib.sha256(data).hexdigest() != part["sha256"]:
        raise InputError.at(path, None, "checkpoint part is corrupted (its size or SHA-256 does not "
                                        "match the manifest)")
    return data


def _difference(name: str, have, want):
    """(dotted name, checkpoint's value, job's value) of the first field where ``have`` and ``want``
    differ (looking inside dicts, so a changed option is named, not two whole dicts), or None."""
    if have == want:
        return None
    if isinstance(have, dict) and isinstance(want, dict):
        for key in sorted(set(have) | set(want)):
            inner = _difference(f"{name}.{key}", have.get(key), want.get(key))
            if inner is not None:
                return inner
    return name, have, want


def _short(value) -> str:
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= 120 else text[:117] + "..."


def _python(value: np.ndarray):
    return value.item() if value.ndim == 0 else value


def _flatten(state):
    """(spec, leaves) of a state made of arrays, torch tensors, dicts and lists; leaves [n, ...]."""
    arrays = []

    def walk(node):
        if isinstance(node, dict):
            return {"dict": {key: walk(value) for key, value in node.items()}}
        if isinstance(node, (list, tuple)):
            return {"list": [walk(value) for value in node]}
        torch_leaf = hasattr(node, "detach")
        arrays.append(node.detach().cpu().numpy() if torch_leaf else np.asarray(node))
        return {"leaf": len(arrays) - 1, "torch": torch_leaf}

    return walk(state), arrays


def _unflatten(spec, leaves):
    """Inverse of ``_flatten``."""
    if "dict" in spec:
        return {key: _unflatten(value, leaves) for key, value in spec["dict"].items()}
    if "list" in spec:
        return [_unflatten(value, leaves) for value in spec["list"]]
    leaf = leaves[spec["leaf"]]
    if spec["torch"]:
        import torch

        return torch.from_numpy(leaf)
    return leaf
