"""The distributed graph: each rank's owned vertices, their in-edges, ghosts and the exchange plan.

Loading (collective, once):

1. every rank reads one contiguous slice of the source, balanced by ``vertices + edges``, and
   validates it; a bad slice on any rank makes every rank raise the same ``InputError``;
2. every vertex's in-degree over the whole graph is counted by its owner (each rank sends its
   slice's destination ids to their owners: one ``Alltoallv``), and the in-hubs are known to every
   rank before any edge moves;
3. each edge moves once, straight to the rank that processes it (one ``Alltoallv``): the owner of
   its destination, or of its source for an edge to an in-hub (below); when every edge goes to its
   destination's owner, the ids sent in step 2 are its destinations there and are not sent again;
   each vertex's out-degree,
   features and label go to its owner (skipped for the range partitioner, whose owners are the
   readers);
4. the owner keeps its in-edges as a CSR over its owned vertices whose column ids index the
   *extended* vertex space ``[owned | ghosts]``: a ghost is a remote source, stored once per rank
   however many local edges it has (so a hub's value crosses the network once per rank that needs
   it, never once per edge);
5. ghosts are grouped by owner, and each owner learns which of its vertices each rank needs
   (the exchange plan, reused every superstep).

Hubs (see ``HubOptions``). The in-edges of a vertex whose in-degree exceeds the hub threshold
are not sent to its owner: each stays with the owner of its *source*, which pre-reduces the
hub's share every superstep and sends one partial aggregate per hub (*partial gather*), so no
rank carries a hub's whole fan-in. A high out-degree vertex is held as a ghost by every rank that
has its out-neighbours (a *shadow copy*), which scatters to its local part; with shadow nodes
switched off, its out-edges stay with its owner instead, which then carries its whole fan-out
(an ablation for measurements).

Within a row, edges are ordered by global source id (equal ids: the file's edges in file order,
then, for a symmetric program, the reverse edges in file order), so every reduction sums in the
same order whatever the number of ranks or the partitioner. A symmetric program keeps its reverse
edges as the file rows of its own vertices (their out-edges) and merges them into its in-edge rows: on a
range partition those are the rows it read, never sent; on a hash partition each row read goes whole to
its vertex's owner. Only the reverse edges into in-hubs travel as edges (to their sources' owners).
"""

from dataclasses import dataclass, fields

import numpy as np

from kernels.bits import bit_words_of, bits_at
from pregel.comm import Comm
from pregel.edge_order import (ascending_columns, count_rows, drop_rows, group_by_row, indptr_of, is_ascending,
                               merge_rows, renumber_ghosts, row_ids, rows_in_order, sort_rows, split_ids,
                               stable_order)
from pregel.errors import InputError
from pregel.graph_io import GraphData, GraphFile, GraphHeader, GraphSlice, check_in_memory
from pregel.id_table import DistinctIds, unique_inverse
from pregel.memory import returning_freed_memory
from pregel.partition import RangePartition, balanced_ranges, make_partition

_VERTEX = np.dtype([("id", np.int64), ("out_degree", np.int64), ("label", np.int64)])


@dataclass(frozen=True)
class HubOptions:
    """How high-degree vertices are handled (both strategies on by default).

    partial_gather: in-edges of in-hubs stay on their sources' owners, pre-reduced per hub;
    shadow_nodes: out-hubs reach remote neighbours through ghost copies (off: their out-edges stay
    on their owner); threshold: the degree above which a vertex is a hub (None: automatic,
    ``max(100, 20 · E / N, E / (100 · P))`` on P ranks, and no hubs on one rank: a vertex is a hub
    when its edges are both far above the average degree and at least 1 % of a rank's share, so
    that hub handling, which costs a load pass and a partial exchange, is spent only where one
    vertex's fan-in could unbalance the ranks).
    """

    partial_gather: bool = True
    shadow_nodes: bool = True
    threshold: int | None = None

    def resolved_threshold(self, num_nodes: int, num_edges: int, size: int) -> float:
        """The degree above which a vertex is a hub on ``size`` ranks: ``threshold`` when set, else the
        automatic one of the class docstring (inf, no hubs, on one rank)."""
        if self.threshold is not None:
            return self.threshold
        if size == 1:
            return np.inf
        return max(100.0, 20.0 * num_edges / max(num_nodes, 1), num_edges / (100.0 * size))


class ArraySource:
    """An in-memory graph (the same ``GraphData`` on every rank), e.g. a dependency graph of steps,
    read through the same ``header`` / ``indptr_at`` / ``read`` interface as a ``GraphFile``."""

    def __init__(self, graph: GraphData):
        check_in_memory(graph)
        self.graph = graph
        self.path = "<in-memory graph>"
        self.header = GraphHeader(
            self.path, graph.num_nodes, graph.num_edges, graph.directed, np.asarray(graph.indices).dtype,
            graph.weights is not None, 0 if graph.features is None else graph.features.shape[1],
            graph.labels is not None)

    def indptr_at(self, v: int) -> int:
        """``indptr[v]`` of the graph (``GraphFile.indptr_at``)."""
        return int(self.graph.indptr[v])

    def read(self, start: int, stop: int, features: bool) -> GraphSlice:
        """Vertices ``[start, stop)`` with their out-edges (and feature rows when ``features``), as
        ``GraphFile.read`` gives them."""
        g = self.graph
        lo, hi = int(g.indptr[start]), int(g.indptr[stop])
        rows = slice(start, stop)
        return GraphSlice(self.header, start, stop, lo, np.asarray(g.indptr[start:stop + 1], np.int64) - lo,
                          np.asarray(g.indices[lo:hi], np.int64),
                          None if g.weights is None else np.asarray(g.weights[lo:hi], np.float32),
                          None if g.features is None or not features else np.asarray(g.features[rows]),
                          None if g.labels is None else np.asarray(g.labels[rows], np.int64))

    def close(self) -> None:
        pass


@dataclass
class DistributedGraph:
    """One rank's part of a graph.

    owned: [n] int64 global ids of the owned vertices, ascending.
    Destination-side edges (gathered by their destination's owner): in_indptr [n + 1] int64 CSR
    over owned vertices; in_indices [E_d] int32 (int64 beyond 2**31 columns) columns in the
    extended space ``[0, n)`` owned, ``[n, n + g)`` ghosts; in_weights [E_d] float32 or None.
    Source-side edges (partial gather; pre-reduced here, sent to the destination's owner):
    part_indptr [h + 1] int64 CSR over part_dst [h] int64 global destination ids; part_src [E_s]
    int64 local ids of the owned sources; part_weights [E_s] float32 or None.
    ghost_ids [g] int64 global ids grouped by owner rank; ghost_counts [size]; send_index [s] int64
    local ids of owned vertices to send, grouped by destination rank; send_counts [size].
    The plan that brings destination terms to the source side (for programs with
    ``destination_values``): dst_send_index [t] local ids to send, grouped by rank;
    dst_send_counts [size]; dst_recv_counts [size]; dst_recv_rows [h] the ``part_dst`` row each
    received row fills; any_source_side: whether any rank has source-side edges.
    out_degree, in_degree, self_loops: [n] int64 over the whole graph (as loaded, so symmetric
    graphs count both directions); features [n, F] float32 or None; labels [n] int64 or None;
    in_hubs: [k] int64 global ids of the vertices whose in-edges are gathered partially.
    hubs: the hub strategies of the load; hub_threshold: the degree above which a vertex was a hub in it
    (``HubOptions.resolved_threshold``, counting a symmetric program's edges both ways; inf for none).
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
    part_indptr: np.ndarray
    part_dst: np.ndarray
    part_src: np.ndarray
    part_weights: np.ndarray | None
    ghost_ids: np.ndarray
    ghost_counts: np.ndarray
    send_index: np.ndarray
    send_counts: np.ndarray
    dst_send_index: np.ndarray
    dst_send_counts: np.ndarray
    dst_recv_counts: np.ndarray
    dst_recv_rows: np.ndarray
    any_source_side: bool
    out_degree: np.ndarray
    in_degree: np.ndarray
    self_loops: np.ndarray
    features: np.ndarray | None
    labels: np.ndarray | None
    in_hubs: np.ndarray
    hubs: HubOptions
    hub_threshold: float

    def hub_attributes(self) -> dict:
        """The hub settings of the load and how many in-hubs it found, as a result file records them."""
        return {"hub_partial_gather": self.hubs.partial_gather, "hub_shadow_nodes": self.hubs.shadow_nodes,
                "hub_threshold": float(self.hub_threshold), "hub_in_hubs": len(self.in_hubs)}

    @property
    def num_local(self) -> int:
        return len(self.owned)

    @property
    def num_ghosts(self) -> int:
        return len(self.ghost_ids)

    @property
    def num_local_edges(self) -> int:
        """Edges this rank processes each superstep (destination-side and source-side)."""
        return len(self.in_indices) + len(self.part_src)

    def local_index(self, ids: np.ndarray) -> np.ndarray:
        """Local positions [k] of global ids [k] owned by this rank."""
        return self.partition.local_index(ids, self.comm.rank)


def load_graph(comm: Comm, source, partitioner: str = "range", symmetric: bool = False,
               features: bool = True, hubs: HubOptions | None = None) -> DistributedGraph:
    """Collectively load ``source`` (a path, ``GraphData``, ``GraphFile`` or ``ArraySource``).

    ``symmetric`` adds the reverse of every edge (for programs that follow edges both ways, like
    weak components). ``features`` reads ``/nodes/features`` when present. ``hubs`` chooses the
    hub strategies (default: both on, automatic threshold). The load's temporaries go back to the
    kernel as they are freed (``pregel.memory.returning_freed_memory``).
    """
    with returning_freed_memory():
        return _load_graph(comm, source, partitioner, symmetric, features, hubs or HubOptions())


def _load_graph(comm: Comm, source, partitioner: str, symmetric: bool, features: bool,
                hubs: HubOptions) -> DistributedGraph:
    error, src = None, None
    try:
        src = _as_source(source)
        if src.header.num_nodes == 0:
            raise InputError.at(src.path, None, "the graph has no vertices: nothing to compute")
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
    out_degree, feats, labels = _vertex_data(comm, partition, part)
    threshold = hubs.resolved_threshold(header.num_nodes, header.num_edges * (1 + symmetric), comm.size)
    own_rows = None
    if symmetric and hubs.shadow_nodes:
        own_rows = _OwnRows.read(part)  # the reverse edges (but those into in-hubs, below)
    edges = _slice_edges(part, header.has_weights)
    if not hubs.shadow_nodes:  # an out-hub keeps its (file) out-edges on its owner
        row_degree = np.repeat(np.diff(part.indptr), np.diff(part.indptr))
        edges.out_hub[:] = row_degree > threshold
        del row_degree
    del part  # its edge arrays are held by ``edges`` alone, which ``_place_edges`` frees as it sends them
    in_degree, by_destination = _global_in_degree(comm, partition, len(owned), edges.dst)
    placed_degree = in_degree  # over the edges that will be placed
    if symmetric:
        in_degree = in_degree + out_degree  # each out-edge of a vertex is also one of its in-edges, reversed
    in_hubs = np.zeros(0, np.int64)
    if hubs.partial_gather:
        in_hubs = np.sort(np.concatenate(comm.allgather(owned[in_degree > threshold])))
    to_destinations = not len(in_hubs) and hubs.shadow_nodes  # every edge, on every rank, goes to its dst's owner
    reverse_travels = symmetric and own_rows is None
    if reverse_travels or not to_destinations:
        by_destination = None  # not reusable: freed before the edges are doubled or placed by their own exchange
    if reverse_travels:
        edges, placed_degree = _with_reverse(edges), in_degree
    elif own_rows is not None and len(in_hubs):  # the reverse edges into in-hubs go to their sources' owners
        edges = _joined(edges, own_rows.leave(_is_hub(in_hubs, own_rows.row_ids())))
    edges = _place_edges(comm, partition, edges, in_hubs, send_out_hub=not hubs.shadow_nodes,
                         by_destination=by_destination)
    del by_destination
    local = _LocalEdges(comm, partition, len(owned), edges, in_hubs, in_degree,
                        row_counts=placed_degree if to_destinations else None)
    del edges, placed_degree
    if symmetric:
        local.self_loops *= 2  # a self-loop is its own reverse, on the same row
    if own_rows is not None and comm.size > 1 and not isinstance(partition, RangePartition):
        # the rows read are not the rows owned; an owned row's length is its out-degree, but an in-hub's row
        # arrives empty (its reverse edges left it to travel with the other edges into in-hubs)
        owned_lengths = np.where(_is_hub(in_hubs, owned), 0, out_degree)
        own_rows = own_rows.to_owners(comm, partition, owned_lengths)
    return _build_local(comm, partition, header, owned, local, out_degree, feats, labels, in_hubs, own_rows,
                        hubs, threshold)


def _as_source(source):
    if isinstance(source, (GraphFile, ArraySource)):
        return source
    if isinstance(source, GraphData):
        return ArraySource(source)
    return GraphFile(source)


def _vertex_data(comm, partition, part):
    """Out-degree [n], features [n, F] and labels [n] of the owned vertices."""
    out_degree = np.diff(part.indptr)
    if isinstance(partition, RangePartition):
        return out_degree, part.features, part.labels
    ids = np.arange(part.start, part.stop, dtype=np.int64)
    owners = partition.owner(ids)
    order, counts = stable_order(owners, comm.size)
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


@dataclass
class _Edges:
    """Edges as parallel arrays: src, dst [k] int32 or int64 global ids (int32 while the graph has
    fewer than 2**31 vertices, dst in the file's index dtype); weight [k] float32 or None;
    out_hub [k] bool: a file out-edge of an out-hub kept on its source's owner (shadow nodes off);
    reverse [k] bool, or None when no edge is: the reverse of a file edge (a symmetric program's)."""

    src: np.ndarray
    dst: np.ndarray
    weight: np.ndarray | None
    out_hub: np.ndarray
    reverse: np.ndarray | None = None

    def take(self, index) -> "_Edges":
        """The edges at ``index`` (any NumPy index), each array indexed (None stays None)."""
        return _Edges(**{f.name: None if getattr(self, f.name) is None else getattr(self, f.name)[index]
                         for f in fields(self)})

    def split(self, chosen: np.ndarray) -> tuple["_Edges", "_Edges"]:
        """(the edges where ``chosen`` [k] bool is False, those where it is True), each in order. Consumes
        these edges: each array is dropped once split, so only one array is held twice at a time (two
        ``take`` calls would hold every array twice, 460 MB more at 50M edges a rank)."""
        rest, kept, chosen_edges = ~chosen, {}, {}
        for f in fields(self):
            values = getattr(self, f.name)
            setattr(self, f.name, None)
            kept[f.name], chosen_edges[f.name] = (None, None) if values is None else (values[rest], values[chosen])
            del values
        return _Edges(**kept), _Edges(**chosen_edges)


def _slice_edges(part, weighted: bool) -> _Edges:
    """The edges read by this rank, in file order."""
    src = row_ids(part.indptr, part.start, np.int32 if part.header.num_nodes < 2**31 else np.int64)
    return _Edges(src, part.indices, part.weights if weighted else None, np.zeros(len(src), dtype=bool))


def _reverses(src: np.ndarray, dst: np.ndarray, weight: np.ndarray | None) -> _Edges:
    """The reverses of the edges src -> dst [k] (same weights), flagged ``reverse``, none an out-hub's."""
    return _Edges(dst, src, weight, np.zeros(len(src), dtype=bool), np.ones(len(src), dtype=bool))


def _with_reverse(edges: _Edges) -> _Edges:
    """``edges`` [k] followed by their reverses [k] (``_reverses``)."""
    return _joined(edges, _reverses(edges.src, edges.dst, edges.weight))


def _joined(edges: _Edges, more: _Edges) -> _Edges:
    """``edges`` [k] followed by ``more`` [t] (the same arrays but ``reverse``, each cast to ``edges``'
    dtype), ``reverse`` all False where either has None. Consumes ``edges``: each of its arrays is dropped
    once joined."""
    if edges.reverse is None:
        edges.reverse = np.zeros(len(edges.src), dtype=bool)
    if more.reverse is None:
        more.reverse = np.zeros(len(more.src), dtype=bool)
    joined = {}
    for f in fields(edges):
        first, then = getattr(edges, f.name), getattr(more, f.name)
        setattr(edges, f.name, None)
        joined[f.name] = None if first is None else np.concatenate([first, then.astype(first.dtype, copy=False)])
        del first
    return _Edges(**joined)


class _OwnRows:
    """The reverse edges of a symmetric program, kept as file rows: row v's out-edges v -> d are v's
    in-edges d -> v of the reverse direction, already grouped by row. On a range partition the rows a
    rank read are the vertices it owns, so they are never sent; on a hash partition they go to their
    vertices' owners as rows (``to_owners``). Each row is sorted by target: indptr [n + 1] int64 from 0,
    indices [k] global ids, weights [k] float32 or None; first: the global id of row 0 of the rows read
    (rows ``first, first + 1, ...``), None once they are the owner's rows."""

    def __init__(self, indptr: np.ndarray, indices: np.ndarray, weights: np.ndarray | None, first: int | None):
        self.indptr, self.indices, self.weights, self.first = indptr, indices, weights, first
        self.left = None  # [n] bool: the rows whose reverse edges travel (``leave``)

    @classmethod
    def read(cls, part) -> "_OwnRows":
        """The rows of the slice ``part``, each sorted by target in place (``part.indices``, weights
        moving along: the slice's file edges share these arrays)."""
        indices, weights = part.indices, part.weights if part.header.has_weights else None
        if indices.base is not None:  # a view of an in-memory graph's arrays: sort a copy
            indices, weights = indices.copy(), None if weights is None else weights.copy()
            part.indices, part.weights = indices, weights
        sort_rows(part.indptr, indices, weights)
        return cls(part.indptr, indices, weights, part.start)

    def row_ids(self) -> np.ndarray:
        """[n] int64 the global ids of the rows read."""
        return np.arange(self.first, self.first + len(self.indptr) - 1, dtype=np.int64)

    def leave(self, rows: np.ndarray) -> _Edges:
        """The reverse edges of the rows where ``rows`` [n] bool is set, which travel instead (those into
        in-hubs): row v's out-edge v -> d as the edge d -> v (``_reverses``), in row order. ``drop_left``
        (or ``to_owners``) then empties those rows, once the file edges, which share these arrays until
        they are placed and grouped, no longer need them."""
        counts, taken = np.diff(self.indptr), np.flatnonzero(rows)
        self.left = rows
        targets, weights = rows_in_order(self.indptr, self.indices, self.weights, taken, counts)
        return _reverses(np.repeat(taken + self.first, counts[taken]), targets, weights)

    def drop_left(self) -> None:
        """Empty the rows whose reverse edges travel (``leave``), in place."""
        if self.left is not None:
            self.indptr, self.indices, self.weights = drop_rows(self.indptr, self.indices, self.weights, self.left)
            self.left = None

    def to_owners(self, comm, partition, owned_lengths: np.ndarray) -> "_OwnRows":
        """These rows as read, sent to their vertices' owners (one exchange of targets, one of weights),
        without the edges of the rows that left: each rank receives the rows of the vertices it owns, in its
        own order (the readers' slices ascend, and so do a rank's owned ids), whose lengths it already has
        (``owned_lengths`` [n]: its vertices' out-degrees, 0 for the rows that left)."""
        owners = partition.owner(self.row_ids())
        order, _ = stable_order(owners, comm.size)
        lengths = np.diff(self.indptr)
        if self.left is not None:
            lengths[self.left] = 0
        edge_counts = np.bincount(owners, weights=lengths, minlength=comm.size).astype(np.int64)
        targets, weights = rows_in_order(self.indptr, self.indices, self.weights, order, lengths)
        self.indptr = self.indices = self.weights = None
        indices, received_counts = comm.alltoallv(targets, edge_counts)
        del targets
        if weights is not None:
            weights = comm.alltoallv_known(weights, edge_counts, received_counts)
        return _OwnRows(indptr_of(owned_lengths), indices, weights, None)


@dataclass
class _ByDestination:
    """The exchange that sent each edge's destination id to that vertex's owner: order [k] of the
    slice's edges by owner, counts [size] sent to each rank, dst [k_r] the ids received. When every
    edge goes to its destination's owner, the edges' placement is this same exchange."""

    order: np.ndarray
    counts: np.ndarray
    dst: np.ndarray


def _global_in_degree(comm, partition, n: int, dst: np.ndarray) -> tuple[np.ndarray, _ByDestination | None]:
    """In-degree [n] int64 of the owned vertices over every rank's edges, before any edge moves:
    each rank sends the destinations ``dst`` [k] of its slice to their owners (one ``Alltoallv`` of
    k ids, so traffic and memory per rank shrink as ranks are added) and each owner counts those it
    receives. Also returns that exchange (None on one rank), which ``_place_edges`` reuses."""
    if comm.size == 1:
        return count_rows(dst, n), None
    order, send_counts = stable_order(partition.owner(dst), comm.size)
    received, _ = comm.alltoallv(dst[order], send_counts)
    return count_rows(partition.local_index(received, comm.rank), n), _ByDestination(order, send_counts, received)


def _is_hub(in_hubs: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """[k] bool: whether each of ``ids`` [k] is one of the in-hubs ``in_hubs`` [h] (sorted), from a bit
    per vertex up to the last in-hub (a search would make two int64 arrays of the ids' length: 800 MB at
    50M edges a rank, the load's peak)."""
    if not len(in_hubs):
        return np.zeros(len(ids), dtype=bool)
    return bits_at(bit_words_of(in_hubs, int(in_hubs[-1]) + 1), ids)


def _source_side(edges: _Edges, in_hubs: np.ndarray) -> np.ndarray:
    """[k] bool: the edges processed on their source's owner (to one of the in-hubs [h], sorted, or
    an out-hub's)."""
    return edges.out_hub | _is_hub(in_hubs, edges.dst) if len(in_hubs) else edges.out_hub


def _place_edges(comm, partition, edges: _Edges, in_hubs: np.ndarray, send_out_hub: bool,
                 by_destination: _ByDestination | None = None) -> _Edges:
    """Send each edge straight to the rank that processes it (one exchange): its source's owner
    when it is source-side (``_source_side``), else its destination's; returns the edges received,
    ordered by sending rank, each rank's in its own order. ``send_out_hub``: whether the
    ``out_hub`` flags travel (else all are False). ``by_destination``: the in-degree's exchange of
    these edges' destinations, to reuse (its order, and its ids as the received destinations); pass it
    on every rank or on none, and only when no edge of any rank is source-side (no in-hubs, no out-hub
    flags). On several ranks ``edges`` is consumed: each of its arrays is dropped once sent, so the
    slice's edges and the received ones are not all held at once (the load's peak)."""
    if comm.size == 1:
        return edges
    dst = None
    if by_destination is not None:  # the destinations have already travelled
        order, counts, dst, edges.dst = by_destination.order, by_destination.counts, by_destination.dst, None
    else:
        ranks = partition.owner(edges.dst)
        side = _source_side(edges, in_hubs)
        if side.any():
            ranks[side] = partition.owner(edges.src[side])
        del side
        order, counts = stable_order(ranks, comm.size)
        del ranks
    del by_destination
    outgoing, edges.src = edges.src[order], None
    src, received = comm.alltoallv(outgoing, counts)
    del outgoing

    def send(name):
        outgoing = getattr(edges, name)[order]
        setattr(edges, name, None)
        return comm.alltoallv_known(outgoing, counts, received)

    out_hub = send("out_hub") if send_out_hub else np.zeros(len(src), dtype=bool)
    reverse = None if edges.reverse is None else send("reverse")
    if dst is None:
        dst = send("dst")
    return _Edges(src, dst, None if edges.weight is None else send("weight"), out_hub, reverse)


def _file_loops(edges: _Edges) -> np.ndarray:
    """The destinations of the self-loops among ``edges`` that are file edges (not ``reverse``)."""
    loop = edges.src == edges.dst
    if edges.reverse is not None:
        loop &= ~edges.reverse
    return edges.dst[loop]


class _LocalEdges:
    """The edges a rank holds after placement, with the in-degree and self-loops of its vertices.

    dest: destination-side edges (destination owned here; their ``dst`` dropped), dst_local [E_d] their
    local rows;
    source: source-side edges (source owned here); in_degree, self_loops: [n] int64 over the
    whole graph; dest_counts: [n] int64 the destination-side edges of each row, when known
    (``row_counts``: the in-degrees over the edges placed, when every edge went to its
    destination's owner), else None. ``edges`` is consumed when some are source-side (``_Edges.split``).
    """

    def __init__(self, comm, partition, n: int, edges: _Edges, in_hubs: np.ndarray, in_degree: np.ndarray,
                 row_counts: np.ndarray | None = None):
        self.comm, self.partition, self.n = comm, partition, n
        side = _source_side(edges, in_hubs)
        if side.any():
            self.dest, self.source = edges.split(side)
        else:
            # an empty copy: empty views (a slice) would keep the placed edges' arrays alive
            self.dest, self.source = edges, edges.take(np.zeros(0, np.int64))
        self.dest_counts = row_counts
        self.in_degree = in_degree
        loops = np.concatenate([_file_loops(self.dest), _file_loops(self.source)])
        self.self_loops = np.bincount(partition.local_index(loops, comm.rank), minlength=n).astype(np.int64)
        # the global ids go once they are rows: a rank that does not own from 0 would hold both
        self.dst_local, self.dest.dst = partition.local_index(self.dest.dst, comm.rank), None

    def source_order(self) -> np.ndarray:
        """[E_s] the order of the source-side edges by (destination, source), ties: out-hubs'
        edges first, then file edges before reverse ones, then as received (the order in which they
        were read)."""
        s = self.source
        keys = (s.src, s.dst)
        if s.reverse is not None:
            keys = (s.reverse,) + keys
        if s.out_hub.any() and not s.out_hub.all():
            keys = (~s.out_hub,) + keys
        return np.lexsort(keys)


def _extended_columns(comm, partition, n: int, src: np.ndarray):
    """Columns [E] of in-edges with global sources ``src`` [E] in the extended space ``[owned |
    ghosts]`` (int32 when it fits), the ghosts' global ids [g] grouped by owner rank (ids ascending
    within a rank) and the ghost count of each rank [size]."""
    if comm.size == 1:  # one rank owns every vertex, at its global id
        columns = src.astype(np.int32 if n < 2**31 else np.int64, copy=False)
        return columns, np.zeros(0, np.int64), np.zeros(1, np.int64)
    if isinstance(partition, RangePartition) and is_ascending(src):  # as loaded: no sort needed
        lo, hi = partition.bounds[comm.rank:comm.rank + 2]
        columns, ghost_ids = ascending_columns(src, int(lo), int(hi))  # ascending ids: grouped by owner
        return columns, ghost_ids, np.bincount(partition.owner(ghost_ids), minlength=comm.size).astype(np.int64)
    distinct = DistinctIds(src)  # each distinct source labelled once, then every edge through a table
    owned = partition.owns(distinct.ids, comm.rank)
    remote_ids = distinct.ids[~owned]  # ascending
    ghost_order, ghost_counts = stable_order(partition.owner(remote_ids), comm.size)  # by owner, ids ascending
    column_dtype = np.int32 if n + len(remote_ids) < 2**31 else np.int64
    column_of = np.empty(len(distinct.ids), dtype=column_dtype)
    column_of[owned] = partition.local_index(distinct.ids[owned], comm.rank)
    column_of[np.flatnonzero(~owned)[ghost_order]] = np.arange(n, n + len(remote_ids), dtype=column_dtype)
    columns = distinct.labels_of(column_of).astype(column_dtype, copy=False)
    return columns, remote_ids[ghost_order], ghost_counts.astype(np.int64)


def _own_rows_columns(comm, partition, n: int, columns: np.ndarray, ghost_ids: np.ndarray, reverse: _OwnRows):
    """The reverse edges' columns (``reverse``: the rank's own file rows, on a range partition) in the
    same extended space as the grouped in-edges' ``columns`` [E_i] over ``ghost_ids`` [g]: the
    ghosts of both directions numbered once, ascending by id (``columns`` renumbered in place, or
    widened). Returns (columns [E_i], reverse columns [E_r], ghost_ids [g'])."""
    if comm.size == 1:  # one rank owns every vertex, at its global id
        return columns, reverse.indices.astype(columns.dtype, copy=False), ghost_ids
    lo = int(partition.bounds[comm.rank])
    reverse_columns, outside = split_ids(reverse.indices, lo, lo + n)
    reverse.indices = None  # its ids are columns now
    joint, inverse = unique_inverse(np.concatenate([ghost_ids.astype(outside.dtype), outside]))
    del outside
    dtype = np.int32 if n + len(joint) < 2**31 else np.int64
    columns = columns.astype(dtype, copy=False)
    renumber_ghosts(columns, n, n + inverse[:len(ghost_ids)])
    renumber_ghosts(reverse_columns, n, n + inverse[len(ghost_ids):])  # then narrowed, if it was wider
    return columns, reverse_columns.astype(dtype, copy=False), joint


def _in_edge_rows(comm, partition, n: int, local: _LocalEdges, reverse: _OwnRows | None) -> tuple:
    """The destination-side edges of ``local`` (consumed) grouped into rows of the extended space, merged
    with a symmetric program's reverse rows (``reverse``, or None): an in-edge before a reverse edge from
    the same source. On a range partition the rows are grouped as columns and the reverse rows' columns
    joined to them (``_own_rows_columns``); otherwise both are merged as global ids, then numbered once.
    Returns (indptr [n + 1] int64, columns [E], weights [E] or None, ghost ids [g], ghosts of each rank
    [size])."""
    dest, as_ids = local.dest, reverse is not None and not isinstance(partition, RangePartition)
    if as_ids:
        columns, ghost_ids, ghost_counts = dest.src, None, None
    else:
        columns, ghost_ids, ghost_counts = _extended_columns(comm, partition, n, dest.src)
    indptr, columns, weights = group_by_row(local.dst_local, n, columns, dest.weight, keys=dest.src,
                                            later=dest.reverse, row_counts=local.dest_counts)
    local.dest = local.dst_local = local.dest_counts = dest = None  # the rows hold these edges now
    if reverse is None:
        return indptr, columns, weights, ghost_ids, ghost_counts
    reverse.drop_left()
    if as_ids:
        indptr, ids, weights = merge_rows(indptr, columns, weights, reverse.indptr,
                                          reverse.indices.astype(columns.dtype, copy=False), reverse.weights)
        reverse.indices = columns = None
        columns, ghost_ids, ghost_counts = _extended_columns(comm, partition, n, ids)
        return indptr, columns, weights, ghost_ids, ghost_counts
    columns, reverse_columns, ghost_ids = _own_rows_columns(comm, partition, n, columns, ghost_ids, reverse)
    indptr, columns, weights = merge_rows(indptr, columns, weights, reverse.indptr, reverse_columns,
                                          reverse.weights, int(partition.bounds[comm.rank]), ghost_ids)
    ghost_counts = np.bincount(partition.owner(ghost_ids), minlength=comm.size).astype(np.int64)
    return indptr, columns, weights, ghost_ids, ghost_counts


def _build_local(comm, partition, header, owned, local: _LocalEdges, out_degree, feats, labels,
                 in_hubs, reverse: _OwnRows | None, hubs: HubOptions, threshold: float):
    n = len(owned)

    def to_local(ids):
        return partition.local_index(ids, comm.rank)

    source = local.source
    order = local.source_order()
    part_dst, part_counts = np.unique(source.dst[order].astype(np.int64), return_counts=True)
    part_indptr = indptr_of(part_counts)
    part_weights = None if source.weight is None else np.ascontiguousarray(source.weight[order])

    in_indptr, in_indices, weights, ghost_ids, ghost_counts = _in_edge_rows(comm, partition, n, local, reverse)
    wanted, send_counts = comm.alltoallv(ghost_ids, ghost_counts)
    part_owner = partition.owner(part_dst)
    dst_recv_rows = np.lexsort((part_dst, part_owner))
    dst_recv_counts = np.bincount(part_owner, minlength=comm.size).astype(np.int64)
    dst_wanted, dst_send_counts = comm.alltoallv(part_dst[dst_recv_rows], dst_recv_counts)
    any_source_side = any(comm.allgather(bool(len(part_dst))))
    return DistributedGraph(
        comm=comm, partition=partition, num_nodes=header.num_nodes, num_edges=header.num_edges,
        directed=header.directed, owned=owned, in_indptr=in_indptr, in_indices=in_indices,
        in_weights=weights, part_indptr=part_indptr, part_dst=part_dst,
        part_src=to_local(source.src[order]).astype(np.int64), part_weights=part_weights,
        ghost_ids=ghost_ids, ghost_counts=ghost_counts, send_index=to_local(wanted),
        send_counts=send_counts, dst_send_index=to_local(dst_wanted), dst_send_counts=dst_send_counts,
        dst_recv_counts=dst_recv_counts, dst_recv_rows=dst_recv_rows, any_source_side=any_source_side,
        out_degree=np.asarray(out_degree, dtype=np.int64),
        in_degree=local.in_degree, self_loops=local.self_loops, features=feats, labels=labels,
        in_hubs=in_hubs, hubs=hubs, hub_threshold=float(threshold))
