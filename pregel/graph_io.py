"""The HDF5 graph format, version 1: writing, reading a slice of vertices, validation.

Layout (see the README, "HDF5 graph format")::

    /graph/indptr    int64        [N + 1]  out-edge CSR over source vertices
    /graph/indices   int32|int64  [E]      destination ids
    /graph/weights   float32      [E]      optional
    /nodes/features  float32      [N, F]   optional
    /nodes/labels    int64        [N]      optional
    /nodes/original_ids  int64 | S<k>  [N]  optional: the ids of a converted table (``pregel.tables``)
    root attributes: format = "pregel-graph", version = 1, num_nodes, num_edges, directed

Every reader validates what it reads before returning it and raises ``InputError`` with one line
naming the file, the dataset and the problem; nothing is returned from a file that failed. A slice
``[start, stop)`` of vertices reads only those rows of ``indptr``, their edges and their feature
rows, so each MPI rank reads only its part; the slices of all ranks together check every value
of the file exactly once. Writing is atomic: a temporary file in the same folder is renamed onto
the target only once it is complete.
"""

from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np

from pregel.atomic import atomic_h5
from pregel.errors import InputError, not_a_file

FORMAT = "pregel-graph"
VERSION = 1
INDEX_DTYPES = (np.dtype(np.int32), np.dtype(np.int64))
#: the dataset that keeps a converted table's vertex ids (copied next to results as /original_ids)
ORIGINAL_IDS = "nodes/original_ids"
#: Rows per chunk when a whole file is scanned (bounded memory for billion-edge files).
SCAN_CHUNK_ROWS = 1 << 20


@dataclass
class GraphData:
    """A whole graph in memory, as stored in the file.

    indptr: [N + 1] int64; indices: [E] int32/int64; weights: [E] float32 or None;
    features: [N, F] float32 or None; labels: [N] int64 or None; original_ids: [N] int64 or
    fixed-length bytes (the ids a converted table gave the vertices) or None.
    """

    indptr: np.ndarray
    indices: np.ndarray
    weights: np.ndarray | None = None
    features: np.ndarray | None = None
    labels: np.ndarray | None = None
    directed: bool = True
    original_ids: np.ndarray | None = None

    @property
    def num_nodes(self) -> int:
        return len(self.indptr) - 1

    @property
    def num_edges(self) -> int:
        return len(self.indices)


@dataclass(frozen=True)
class GraphHeader:
    """What a graph file declares, checked against its datasets' shapes and dtypes."""

    path: str
    num_nodes: int
    num_edges: int
    directed: bool
    index_dtype: np.dtype
    has_weights: bool
    num_features: int  # 0 when the file has no features
    has_labels: bool


@dataclass
class GraphSlice:
    """Vertices ``[start, stop)`` of a graph file and their out-edges.

    indptr: [stop - start + 1] int64, rebased to start at 0; indices: [E_s] global destination ids;
    weights: [E_s] float32 or None; features: [stop - start, F] float32 or None;
    labels: [stop - start] int64 or None. ``edge_start`` is the global position of the first edge.
    """

    header: GraphHeader
    start: int
    stop: int
    edge_start: int
    indptr: np.ndarray
    indices: np.ndarray
    weights: np.ndarray | None
    features: np.ndarray | None
    labels: np.ndarray | None


def write_graph(path, graph: GraphData) -> None:
    """Write ``graph`` to ``path`` in format v1, atomically; the arrays are checked first."""
    check_in_memory(graph)
    with atomic_h5(path) as f:
        f.attrs["format"] = FORMAT
        f.attrs["version"] = VERSION
        f.attrs["num_nodes"] = graph.num_nodes
        f.attrs["num_edges"] = graph.num_edges
        f.attrs["directed"] = bool(graph.directed)
        f.create_dataset("graph/indptr", data=np.asarray(graph.indptr, dtype=np.int64))
        index_dtype = np.int32 if graph.num_nodes <= np.iinfo(np.int32).max else np.int64
        f.create_dataset("graph/indices", data=np.asarray(graph.indices, dtype=index_dtype))
        if graph.weights is not None:
            f.create_dataset("graph/weights", data=np.asarray(graph.weights, dtype=np.float32))
        if graph.features is not None:
            f.create_dataset("nodes/features", data=np.asarray(graph.features, dtype=np.float32))
        if graph.labels is not None:
            f.create_dataset("nodes/labels", data=np.asarray(graph.labels, dtype=np.int64))
        if graph.original_ids is not None:
            f.create_dataset(ORIGINAL_IDS, data=graph.original_ids)


class GraphFile:
    """An open graph file: its checked ``header``, ``indptr_at(v)`` and validated slices.

    Opening checks the attributes and every dataset's presence, dtype and shape (not the values:
    those are checked slice by slice as they are read). Use as a context manager or ``close()``.
    """

    def __init__(self, path):
        self.path = str(path)
        self.file = _open(path)
        try:
            self.header = _header(self.file, self.path)
        except InputError:
            self.file.close()
            raise
        self._indptr = self.file["graph/indptr"]

    def indptr_at(self, v: int) -> int:
        """``indptr[v]``, read alone (for balanced partitioning by binary search)."""
        return int(self._indptr[v])

    def read(self, start: int, stop: int, features: bool = True) -> "GraphSlice":
        """Read and validate vertices ``[start, stop)`` with their out-edges (and feature rows)."""
        return _read_slice(self.file, self.header, start, stop, features)

    def close(self) -> None:
        self.file.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def read_header(path) -> GraphHeader:
    """Open ``path`` and check its attributes and its datasets' presence, dtypes and shapes."""
    with GraphFile(path) as f:
        return f.header


def read_slice(path, start: int, stop: int, features: bool = True) -> GraphSlice:
    """Read and validate vertices ``[start, stop)`` with their out-edges (and feature rows)."""
    with GraphFile(path) as f:
        return f.read(start, stop, features)


def read_graph(path) -> GraphData:
    """Read and validate a whole graph file."""
    with GraphFile(path) as f:
        part = f.read(0, f.header.num_nodes)
        return GraphData(part.indptr, part.indices, part.weights, part.features, part.labels,
                         f.header.directed)


def scan_graph(path, on_chunk=None, chunk_rows: int = SCAN_CHUNK_ROWS) -> GraphHeader:
    """Validate a whole file chunk by chunk, in bounded memory; return its header.

    ``on_chunk(part: GraphSlice)``, if given, sees every validated chunk in vertex order (for
    statistics). Raises ``InputError`` at the first problem.
    """
    with GraphFile(path) as f:
        n = f.header.num_nodes
        for start in range(0, max(n, 1), chunk_rows):
            part = f.read(start, min(start + chunk_rows, n))
            if on_chunk is not None:
                on_chunk(part)
        return f.header


def _open(path) -> h5py.File:
    path = Path(path)
    if not path.is_file():
        raise InputError.at(path, None, not_a_file(path))
    try:
        return h5py.File(path, "r")
    except OSError as err:
        raise InputError.at(path, None, f"not a readable HDF5 file ({err})") from None


def _header(f: h5py.File, path: str) -> GraphHeader:
    attrs = f.attrs
    fmt = attrs.get("format")
    if isinstance(fmt, bytes):
        fmt = fmt.decode()
    if fmt != FORMAT:
        raise InputError.at(path, "attribute format", f"expected {FORMAT!r}, found {fmt!r}")
    version = attrs.get("version")
    version = version.item() if isinstance(version, np.generic) else version  # 2, not np.int64(2)
    if version != VERSION:
        raise InputError.at(path, "attribute version", f"expected {VERSION}, found {version!r}")
    num_nodes = _int_attr(attrs, "num_nodes", path)
    num_edges = _int_attr(attrs, "num_edges", path)
    directed = attrs.get("directed")
    if not isinstance(directed, (bool, np.bool_)):
        raise InputError.at(path, "attribute directed", f"expected a boolean, found {directed!r}")
    _dataset(f, path, "graph/indptr", (np.dtype(np.int64),), (num_nodes + 1,))
    indices = _dataset(f, path, "graph/indices", INDEX_DTYPES, (num_edges,))
    has_weights = _dataset(f, path, "graph/weights", (np.dtype(np.float32),), (num_edges,),
                           optional=True) is not None
    feats = _dataset(f, path, "nodes/features", (np.dtype(np.float32),), (num_nodes, None), optional=True)
    has_labels = _dataset(f, path, "nodes/labels", (np.dtype(np.int64),), (num_nodes,),
                          optional=True) is not None
    return GraphHeader(path, num_nodes, num_edges, bool(directed), indices.dtype, has_weights,
                       0 if feats is None else feats.shape[1], has_labels)


def _int_attr(attrs, name: str, path: str) -> int:
    value = attrs.get(name)
    if not isinstance(value, (int, np.integer)) or isinstance(value, (bool, np.bool_)) or value < 0:
        raise InputError.at(path, f"attribute {name}", f"expected a non-negative integer, found {value!r}")
    return int(value)


def _dataset(f, path, name, dtypes, shape, optional=False):
    """The dataset ``name`` after checking its dtype and shape (None in ``shape`` = any length)."""
    if name not in f:
        if optional:
            return None
        raise InputError.at(path, f"/{name}", "dataset is missing")
    ds = f[name]
    if not isinstance(ds, h5py.Dataset):
        raise InputError.at(path, f"/{name}", "is a group, expected a dataset")
    if ds.dtype not in dtypes:
        allowed = " or ".join(str(d) for d in dtypes)
        raise InputError.at(path, f"/{name}", f"dtype is {ds.dtype}, expected {allowed}")
    if len(ds.shape) != len(shape) or any(want is not None and got != want
                                           for got, want in zip(ds.shape, shape)):
        want = tuple("*" if s is None else s for s in shape)
        raise InputError.at(path, f"/{name}", f"shape is {ds.shape}, expected {want} "
                                              "(from the num_nodes/num_edges attributes)")
    return ds


def _read_slice(f, header: GraphHeader, start: int, stop: int, features: bool) -> GraphSlice:
    path, n, e = header.path, header.num_nodes, header.num_edges
    if not 0 <= start <= stop <= n:
        raise ValueError(f"vertex slice [{start}, {stop}) is outside [0, {n})")
    indptr = f["graph/indptr"][start:stop + 1]
    if start == 0 and indptr[0] != 0:
        raise InputError.at(path, "/graph/indptr", f"must start at 0, starts at {indptr[0]}")
    if np.any(indptr[1:] < indptr[:-1]):
        row = start + int(np.argmax(indptr[1:] < indptr[:-1]))
        raise InputError.at(path, "/graph/indptr", f"decreases at row {row}")
    if indptr[0] < 0 or indptr[-1] > e or (stop == n and indptr[-1] != e):
        raise InputError.at(path, "/graph/indptr", f"ends at {f['graph/indptr'][n]}, "
                                                   f"expected num_edges = {e}")
    lo, hi = int(indptr[0]), int(indptr[-1])
    indices = f["graph/indices"][lo:hi]
    if indices.size and (indices.min() < 0 or indices.max() >= n):
        bad = int(np.argmax((indices < 0) | (indices >= n)))
        raise InputError.at(path, "/graph/indices",
                            f"edge {lo + bad} points to vertex {indices[bad]}, outside [0, {n})")
    weights = f["graph/weights"][lo:hi] if header.has_weights else None
    _check_finite(weights, path, "/graph/weights", lo)
    feats = None
    if features and header.num_features:
        feats = f["nodes/features"][start:stop]
        _check_finite(feats, path, "/nodes/features", start)
    labels = f["nodes/labels"][start:stop] if header.has_labels else None
    return GraphSlice(header, start, stop, lo, indptr - lo, indices, weights, feats, labels)


def _check_finite(values, path, name, offset):
    if values is not None and values.size and not np.isfinite(values).all():
        row = offset + int(np.argmax(~np.isfinite(values.reshape(len(values), -1)).all(axis=1)))
        raise InputError.at(path, name, f"row {row} holds NaN or inf")


def check_in_memory(graph: GraphData) -> None:
    """Reject arrays that would make an invalid file (ValueError: these are programming errors)."""
    indptr, indices = np.asarray(graph.indptr), np.asarray(graph.indices)
    n, e = len(indptr) - 1, len(indices)
    if indptr.ndim != 1 or n < 0 or indptr[0] != 0 or indptr[-1] != e or np.any(np.diff(indptr) < 0):
        raise ValueError("indptr must be a non-decreasing [N + 1] array from 0 to len(indices)")
    if e and (indices.min() < 0 or indices.max() >= n):
        raise ValueError(f"indices must lie in [0, {n})")
    for name, array, rows in (("weights", graph.weights, e), ("features", graph.features, n),
                              ("labels", graph.labels, n), ("original_ids", graph.original_ids, n)):
        if array is not None and len(array) != rows:
            raise ValueError(f"{name} has {len(array)} rows, expected {rows}")
    if graph.features is not None and np.asarray(graph.features).ndim != 2:
        raise ValueError("features must be a 2-D [N, F] array")
