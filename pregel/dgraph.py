"""The distributed graph: each rank's owned vertices, their in-edges, ghosts and the exchange plan.

Loading (collective, once):

1. every rank reads one contiguous slice of the source, balanced by ``vertices + edges``, and
   validates it; a bad slice on any rank makes every rank raise the same ``InputError``;
2. each edge ``u → v`` moves to the owner of ``v`` (one ``Alltoallv``), and each vertex's out-degree,
   features and label to the owner of ``v`` (skipped for the range partitioner, whose owners are
   the readers);
3. the owner keeps its in-edges as a CSR over its owned vertices whose column ids index the
   *extended* vertex space ``[owned | ghosts]``: a ghost is a remote source, stored once per rank
   however many local edges it has (so a hub's value crosses the network once per rank that needs
   it, never once per edge);
4. ghosts are grouped by owner, and each owner learns which of its vertices each rank needs
   (the exchange plan, reused every superstep).

Within a row, edges are ordered by global source id, so every reduction sums in the same order
whatever the number of ranks or the partitioner.
"""

from dataclasses import dataclass

import numpy as np

from pregel.comm import Comm
from pregel.errors import InputError
from pregel.graph_io import GraphData, GraphFile, check_in_memory
from pregel.partition import RangePartition, balanced_ranges, make_partition

_EDGE = np.dtype([("src", np.int64), ("dst", np.int64), ("weight", np.float32)])
_VERTEX = np.dtype([("id", np.int64), ("out_degree", np.int64), ("label", np.int64)])


class ArraySource:
    """An in-memory graph (the same ``GraphData`` on every rank), e.g. a dependency graph of steps."""

    def __init__(self, graph: GraphData):
        check_in_memory(graph)
        self.graph = graph
        self.path = "<in-memory graph>"
        self.header = _ArrayHeader(graph)

    def indptr_at(self, v: int) -> int:
        return int(self.graph.indptr[v])

    def read(self, start: int, stop: int, features: bool):
        g = self.graph
        lo, hi = int(g.indptr[start]), int(g.indptr[stop])
        rows = slice(start, stop)
        return _ArraySlice(start, stop, np.asarray(g.indptr[start:stop + 1], np.int64) - lo,
                           np.asarray(g.indices[lo:hi], np.int64),
                           None if g.weights is None else np.asarray(g.weights[lo:hi], np.float32),
                           None if g.features is None or not features else np.asarray(g.features[rows]),
                           None if g.labels is None else np.asarray(g.labels[rows], np.int64))

    def close(self) -> None:
        pass


@dataclass(frozen=True)
class _ArrayHeader:
    graph: GraphData

    @property
    def num_nodes(self):
        return self.graph.num_nodes

    @property
    def num_edges(self):
        return self.graph.num_edges

    @property
    def directed(self):
        return self.graph.directed

    @property
    def has_weights(self):
        return self.graph.weights is not None

    @property
    def num_features(self):
        return 0 if self.graph.features is None else self.graph.features.shape[1]


@dataclass
class _ArraySlice:
    start: int
    stop: int
    indptr: np.ndarray
    indices: np.ndarray
    weights: np.ndarray | None
    features: np.ndarray | None
    labels: np.ndarray | None


@dataclass
class DistributedGraph:
    """One rank's part of a graph.

    owned: [n] int64 global ids of the owned vertices, ascending; in_indptr: [n + 1] int64 CSR over
    owned vertices (destinations); in_indices: [E_r] int64 columns in the extended space
    ``[0, n)`` owned, ``[n, n + g)`` ghosts; in_weights: [E_r] float32 or None; ghost_ids: [g] int64
    global ids of the ghosts, grouped by owner rank; ghost_counts: [size] ghosts per owner;
    send_index: [s] int64 local ids of owned vertices to send, grouped by destination rank;
    send_counts: [size]; out_degree: [n] int64 (in the file's graph); features: [n, F] float32
    or None; labels: [n] int64 or None.
    """

    comm: Comm
    partition: object
    num_nodes: int
    num_edges: int
    directed: bool
    owned: np.ndarray
    in_indptr: np.ndarray
    in_indices: np.ndarray
    in_weights: np.ndarray | None
    ghost_ids: np.ndarray
    ghost_counts: np.ndarray
    send_index: np.ndarray
    send_counts: np.ndarray
    out_degree: np.ndarray
    features: np.ndarray | None
    labels: np.ndarray | None

    @property
    def num_local(self) -> int:
        return len(self.owned)

    @property
    def num_ghosts(self) -> int:
        return len(self.ghost_ids)

    @property
    def in_degree(self) -> np.ndarray:
        """[n] int64 in-degree of each owned vertex (in the loaded, possibly symmetrised, graph)."""
        return np.diff(self.in_indptr)

    def local_index(self, ids: np.ndarray) -> np.ndarray:
        """Local positions [k] of global ids [k] owned by this rank."""
        return self.partition.local_index(ids, self.comm.rank)


def load_graph(comm: Comm, source, partitioner: str = "range", symmetric: bool = False,
               features: bool = True) -> DistributedGraph:
    """Collectively load ``source`` (a path, ``GraphData``, ``GraphFile`` or ``ArraySource``).

    ``symmetric`` adds the reverse of every edge (for programs that follow edges both ways, like
    weak components). ``features`` reads ``/nodes/features`` when present.
    """
    error, src = None, None
    try:
        src = _as_source(source)
    except InputError as err:
        error = err
    comm.agree(error)
    try:
        header = src.header
        read_bounds = balanced_ranges(src.indptr_at, header.num_nodes, header.num_edges, comm.size)
        part, error = None, None
        try:
            part = src.read(int(read_bounds[comm.rank]), int(read_bounds[comm.rank + 1]), features)
        except InputError as err:
            error = err
        comm.agree(error)
    finally:
        if src is not None:
            src.close()
    partition = make_partition(partitioner, read_bounds, header.num_nodes, comm.size)
    owned = partition.owned(comm.rank)
    out_degree, feats, labels = _vertex_data(comm, partition, part, owned)
    edges = _edges_to_owners(comm, partition, part, symmetric)
    graph = _build_local(comm, partition, header, owned, edges, out_degree, feats, labels)
    return graph


def _as_source(source):
    if isinstance(source, (GraphFile, ArraySource)):
        return source
    if isinstance(source, GraphData):
        return ArraySource(source)
    return GraphFile(source)


def _vertex_data(comm, partition, part, owned):
    """Out-degree [n], features [n, F] and labels [n] of the owned vertices."""
    out_degree = np.diff(part.indptr)
    if isinstance(partition, RangePartition):
        return out_degree, part.features, part.labels
    ids = np.arange(part.start, part.stop, dtype=np.int64)
    owners = partition.owner(ids)
    order = np.argsort(owners, kind="stable")
    counts = np.bincount(owners, minlength=comm.size)
    records = np.empty(len(ids), dtype=_VERTEX)
    records["id"], records["out_degree"] = ids, out_degree
    records["label"] = -1 if part.labels is None else part.labels
    received, recv_counts = comm.alltoallv(records[order], counts)
    position = np.argsort(received["id"], kind="stable")
    received = received[position]
    feats = None
    if part.features is not None:
        feats = comm.alltoallv_known(part.features[order], counts, recv_counts)[position]
    labels = None if part.labels is None else received["label"]
    return received["out_degree"], feats, labels


def _edges_to_owners(comm, partition, part, symmetric):
    """All edges whose destination this rank owns: records of (src, dst, weight), [E_r]."""
    src = np.repeat(np.arange(part.start, part.stop, dtype=np.int64), np.diff(part.indptr))
    dst = np.asarray(part.indices, dtype=np.int64)
    weights = np.ones(len(dst), np.float32) if part.weights is None else part.weights
    if symmetric:
        src, dst = np.concatenate([src, dst]), np.concatenate([dst, src])
        weights = np.concatenate([weights, weights])
    records = np.empty(len(src), dtype=_EDGE)
    records["src"], records["dst"], records["weight"] = src, dst, weights
    owners = partition.owner(dst)
    if comm.size == 1:
        return records
    order = np.argsort(owners, kind="stable")
    received, _ = comm.alltoallv(records[order], np.bincount(owners, minlength=comm.size))
    return received


def _build_local(comm, partition, header, owned, edges, out_degree, feats, labels):
    n = len(owned)

    def to_local(ids):
        return partition.local_index(ids, comm.rank)

    dst_local = to_local(edges["dst"])
    order = np.argsort(dst_local * header.num_nodes + edges["src"], kind="stable")  # by (dst, src)
    dst_local, src = dst_local[order], edges["src"][order]
    weights = edges["weight"][order] if header.has_weights else None
    in_indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(dst_local, minlength=n), out=in_indptr[1:])

    src_owner = partition.owner(src)
    is_local = src_owner == comm.rank
    remote_ids, remote_pos = np.unique(src[~is_local], return_inverse=True)
    remote_owner = partition.owner(remote_ids)
    ghost_order = np.lexsort((remote_ids, remote_owner))  # grouped by owner, ids ascending
    ghost_ids = remote_ids[ghost_order]
    ghost_rank_of_unique = np.empty(len(remote_ids), dtype=np.int64)
    ghost_rank_of_unique[ghost_order] = np.arange(len(remote_ids))
    in_indices = np.empty(len(src), dtype=np.int64)
    in_indices[is_local] = to_local(src[is_local])
    in_indices[~is_local] = n + ghost_rank_of_unique[remote_pos]
    ghost_counts = np.bincount(remote_owner, minlength=comm.size).astype(np.int64)

    wanted, send_counts = comm.alltoallv(ghost_ids, ghost_counts)
    return DistributedGraph(
        comm=comm, partition=partition, num_nodes=header.num_nodes, num_edges=header.num_edges,
        directed=header.directed, owned=owned, in_indptr=in_indptr, in_indices=in_indices,
        in_weights=weights,
        ghost_ids=ghost_ids, ghost_counts=ghost_counts, send_index=to_local(wanted),
        send_counts=send_counts, out_degree=np.asarray(out_degree, dtype=np.int64),
        features=feats, labels=labels)
