"""Converting other graph representations to and from ``GraphData``.

* whitespace edge lists (``src dst [weight]`` per line, ``#`` comments),
* networkx graphs (nodes numbered in ``G.nodes`` order; edge weights from an edge attribute),
* scipy.sparse matrices (entry ``A[u, v]`` is the edge u → v with weight ``A[u, v]``) and Matrix
  Market files,
* PyTorch Geometric ``Data`` objects (``edge_index``, ``x``, ``y``, ``edge_weight``).
"""

import os

import networkx as nx
import numpy as np

from pregel.edge_list import stream_edge_list
from pregel.edge_order import both_directions
from pregel.errors import InputError, not_a_file
from pregel.generate import edges_to_csr
from pregel.graph_io import GraphData
from pregel.memory import require_memory


def read_edge_list(path, num_nodes: int | None = None, directed: bool = True) -> GraphData:
    """Parse a whitespace edge list: ``src dst`` or ``src dst weight`` per line, ``#`` comments.

    Vertex ids are non-negative integers; ``num_nodes`` defaults to the largest id + 1. With
    ``directed=False`` every line is one undirected edge and both directions are stored. The text
    is streamed in chunks (``pregel.edge_list``), so memory holds the edges, not the text.
    """
    if num_nodes is not None and num_nodes < 1:
        raise InputError(f"`num_nodes` must be at least 1, got {num_nodes}")
    src, dst, weights = stream_edge_list(path)
    largest = int(max(src.max(initial=-1), dst.max(initial=-1)))
    if num_nodes is None:
        if largest < 0:
            raise InputError.at(path, None, "holds no edges: give `num_nodes` for a graph without edges")
        num_nodes = largest + 1
    elif largest >= num_nodes:
        raise InputError.at(path, None, f"vertex id {largest} is not below `num_nodes` {num_nodes}")
    # ids are 0..N-1, so one large id makes a huge graph: refuse at once rather than let the CSR's
    # per-vertex arrays (indptr and a count, 8 bytes each) fill the machine and the kernel kill us
    require_memory(16 * (num_nodes + 1) + (3 * src.itemsize + 8) * len(src) * (1 if directed else 2),
                   f"{path}: a graph of {num_nodes:,} vertices (ids are numbered 0..N-1 and the largest is "
                   f"{largest}; converted as a table, with --src and --dst, sparse ids are renumbered)")
    edges = [src, dst, weights]
    del src, dst, weights  # the list alone holds them: edges_to_graph frees them once it has doubled them
    return edges_to_graph(num_nodes, edges, directed)


def read_matrix_market(path) -> GraphData:
    """A Matrix Market file (``scipy.io.mmread``): entry (u, v) is the edge u -> v.

    A symmetric matrix becomes an undirected graph (both directions stored; scipy expands it), a
    ``pattern`` matrix an unweighted one. The matrix must be square with finite entries.
    """
    import scipy.io
    import scipy.sparse

    path = os.fspath(path)
    if not os.path.isfile(path):
        raise InputError.at(path, None, not_a_file(path))
    try:
        rows, cols, _, fmt, field, symmetry = scipy.io.mminfo(path)
        matrix = scipy.io.mmread(path)
    except (ValueError, OSError, IndexError) as err:
        raise InputError.at(path, None, f"not a Matrix Market file ({str(err).splitlines()[0]})") from None
    if rows != cols:
        raise InputError.at(path, None, f"matrix is {rows} x {cols}; an adjacency matrix must be square")
    if field == "complex":
        raise InputError.at(path, None, "complex entries cannot be edge weights")
    matrix = scipy.sparse.coo_matrix(matrix)
    if field != "pattern" and not np.isfinite(matrix.data).all():
        raise InputError.at(path, None, "entries contain NaN or inf")
    directed, weighted = symmetry == "general", field != "pattern"
    # the CSR of the entries as they are read (int32 ids stay int32): scipy's ``tocsr`` made a second copy
    # of them with float64 values, and int64 indices a third (3.7–4.1 GB at 100M entries)
    src, dst, weights = matrix.row, matrix.col, matrix.data.astype(np.float32) if weighted else None
    del matrix
    csr = edges_to_csr(rows, src, dst, weights)
    del src, dst, weights
    if has_repeats(csr[0], csr[1]):  # repeated entries add up to one, as scipy adds them (in float64): the
        del csr  # file is read again for that, rather than keeping the float64 values of every file
        return from_scipy(scipy.sparse.coo_matrix(scipy.io.mmread(path)), directed, weighted)
    return GraphData(*csr, directed=directed)


def from_pyg(data, directed: bool | None = None) -> GraphData:
    """A PyG ``Data`` (``edge_index`` [2, E], optional ``x`` [N, F], ``y`` [N], ``edge_weight`` [E]
    or ``edge_attr`` [E] / [E, 1]) as ``GraphData``. Column ``edge_index[:, e] = (u, v)`` is the
    edge u -> v. ``directed`` defaults to ``not data.is_undirected()``; PyG stores both directions
    of an undirected graph, and so does the result (no edge is added).
    """
    num_nodes = int(data.num_nodes)
    src, dst = (t.numpy().astype(np.int64) for t in data.edge_index.cpu())
    weights = None
    for name in ("edge_weight", "edge_attr"):
        value = getattr(data, name, None)
        if value is not None:
            value = value.detach().cpu().numpy()
            if value.ndim == 2 and value.shape[1] == 1:
                value = value[:, 0]
            if value.shape != (len(src),):
                raise InputError(f"PyG data: {name} has shape {list(value.shape)}; only one value per edge "
                                 "([E] or [E, 1]) can be an edge weight")
            weights = value.astype(np.float32)
            break
    if directed is None:
        directed = not data.is_undirected()
    csr = edges_to_csr(num_nodes, src, dst, weights)
    features = None if getattr(data, "x", None) is None else data.x.detach().cpu().numpy().astype(np.float32)
    labels = None if getattr(data, "y", None) is None else data.y.detach().cpu().numpy().astype(np.int64)
    return GraphData(csr[0], csr[1], csr[2] if weights is not None else None, features, labels, directed)


def to_pyg(graph: GraphData):
    """A PyG ``Data`` with ``edge_index`` [2, E] (edges in CSR order), ``num_nodes``, and ``x``,
    ``y``, ``edge_weight`` where the graph has features, labels and weights."""
    import torch
    from torch_geometric.data import Data

    src = np.repeat(np.arange(graph.num_nodes, dtype=np.int64), np.diff(graph.indptr))
    edge_index = torch.from_numpy(np.stack([src, np.asarray(graph.indices, dtype=np.int64)]))
    data = Data(edge_index=edge_index, num_nodes=graph.num_nodes)
    for name, values in (("x", graph.features), ("y", graph.labels), ("edge_weight", graph.weights)):
        if values is not None:
            data[name] = torch.from_numpy(np.asarray(values))
    return data


def from_networkx(graph: nx.Graph, weight: str | None = "weight") -> GraphData:
    """Convert a networkx graph; nodes are numbered in ``graph.nodes`` order.

    Edge weights come from the attribute ``weight`` when every edge has it (else no weights). An
    undirected graph stores both directions of every edge (a self-loop once). Multigraph edges
    are kept as parallel edges.
    """
    order = {node: i for i, node in enumerate(graph.nodes)}
    edges = list(graph.edges(data=True))
    src = np.fromiter((order[u] for u, _, _ in edges), dtype=np.int64, count=len(edges))
    dst = np.fromiter((order[v] for _, v, _ in edges), dtype=np.int64, count=len(edges))
    weights = None
    if weight is not None and edges and all(weight in data for _, _, data in edges):
        weights = np.fromiter((data[weight] for _, _, data in edges), dtype=np.float32, count=len(edges))
    return edges_to_graph(len(order), [src, dst, weights], graph.is_directed())


def to_networkx(graph: GraphData) -> nx.DiGraph | nx.Graph:
    """A networkx graph with nodes 0..N-1 (``DiGraph``, or ``Graph`` if undirected), weights as
    ``weight``, and features/labels as node attributes ``x``/``y``. For small graphs."""
    result = nx.DiGraph() if graph.directed else nx.Graph()
    result.add_nodes_from(range(graph.num_nodes))
    src = np.repeat(np.arange(graph.num_nodes), np.diff(graph.indptr))
    if graph.weights is None:
        result.add_edges_from(zip(src.tolist(), np.asarray(graph.indices).tolist()))
    else:
        result.add_weighted_edges_from(zip(src.tolist(), np.asarray(graph.indices).tolist(),
                                           graph.weights.tolist()))
    for name, values in (("x", graph.features), ("y", graph.labels)):
        if values is not None:
            nx.set_node_attributes(result, dict(enumerate(values)), name)
    return result


def from_scipy(matrix, directed: bool = True, weighted: bool = True) -> GraphData:
    """Convert a square scipy.sparse matrix [N, N]: entry (u, v) is the edge u → v.

    Explicitly stored zeros are kept as edges. With ``weighted`` the entries become float32
    weights. ``directed=False`` records that the matrix is symmetric (it is not symmetrised).
    """
    if matrix.ndim != 2 or matrix.shape[0] != matrix.shape[1]:
        raise ValueError(f"adjacency matrix must be square, got shape {matrix.shape}")
    csr = matrix.tocsr()
    csr.sort_indices()
    weights = csr.data.astype(np.float32) if weighted else None
    indices = csr.indices if csr.indices.dtype in (np.int32, np.int64) else csr.indices.astype(np.int64)
    return GraphData(csr.indptr.astype(np.int64), indices, weights, directed=directed)


def has_repeats(indptr: np.ndarray, indices: np.ndarray) -> bool:
    """Whether a CSR (indptr [N + 1], indices [E], each row ascending) has a repeated edge in some row."""
    same = indices[1:] == indices[:-1]  # same[e] pairs edges e and e + 1
    inner = indptr[1:-1]
    same[inner[(inner > 0) & (inner < len(indices))] - 1] = False  # pairs across a row boundary
    return bool(same.any())


def edges_to_graph(num_nodes, edges: list, directed) -> GraphData:
    """``GraphData`` of N vertices from ``edges`` = [src [E], dst [E] (ids in [0, N)), weights [E] or None];
    ``directed=False`` stores both directions of each edge (a self-loop once). The list is emptied: the
    arrays are this function's from then on, so the given ones go as soon as the doubled ones are made
    (the caller's names for them held 0.8 GB of a 100M-edge list to the end)."""
    src, dst, weights = edges
    edges.clear()
    if not directed:
        src, dst, weights = both_directions(src, dst, weights)
    if weights is None:
        indptr, indices = edges_to_csr(num_nodes, src, dst)
    else:
        indptr, indices, weights = edges_to_csr(num_nodes, src, dst, weights)
    return GraphData(indptr, indices, weights, directed=directed)
