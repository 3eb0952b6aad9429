"""Converting other graph representations to and from ``GraphData``.

* whitespace edge lists (``src dst [weight]`` per line, ``#`` comments),
* networkx graphs (nodes numbered in ``G.nodes`` order; edge weights from an edge attribute),
* scipy.sparse matrices (entry ``A[u, v]`` is the edge u → v with weight ``A[u, v]``).
"""

import warnings

import networkx as nx
import numpy as np

from pregel.errors import InputError
from pregel.generate import edges_to_csr
from pregel.graph_io import GraphData


def read_edge_list(path, num_nodes: int | None = None, directed: bool = True) -> GraphData:
    """Parse a whitespace edge list: ``src dst`` or ``src dst weight`` per line, ``#`` comments.

    Vertex ids are non-negative integers; ``num_nodes`` defaults to the largest id + 1. With
    ``directed=False`` every line is one undirected edge and both directions are stored.
    """
    if num_nodes is not None and num_nodes < 1:
        raise InputError(f"--num-nodes must be at least 1, got {num_nodes}")
    try:
        with warnings.catch_warnings():  # a file of comments only is reported below, in one line
            warnings.simplefilter("ignore", UserWarning)
            table = np.loadtxt(path, comments="#", ndmin=2, dtype=np.float64)
    except FileNotFoundError:
        raise InputError.at(path, None, "no such file") from None
    except ValueError as err:
        raise InputError.at(path, None, f"not an edge list: {str(err).split(';')[0]}") from None
    if table.size == 0:
        table = table.reshape(0, 2)
    if table.shape[1] not in (2, 3):
        raise InputError.at(path, None, f"expected 2 or 3 columns (src dst [weight]), found {table.shape[1]}")
    ids = table[:, :2]
    bad = (ids < 0) | (ids != np.floor(ids)) | ~np.isfinite(ids)
    if bad.any():
        line = int(np.argmax(bad.any(axis=1)))
        raise InputError.at(path, None, f"edge {line + 1}: vertex ids must be non-negative integers")
    src, dst = ids[:, 0].astype(np.int64), ids[:, 1].astype(np.int64)
    weights = None
    if table.shape[1] == 3:
        weights = table[:, 2].astype(np.float32)
        if not np.isfinite(weights).all():
            line = int(np.argmax(~np.isfinite(weights)))
            raise InputError.at(path, None, f"edge {line + 1}: weight is NaN or inf")
    largest = int(max(src.max(initial=-1), dst.max(initial=-1)))
    if num_nodes is None:
        if largest < 0:
            raise InputError.at(path, None, "holds no edges: give --num-nodes for a graph without edges")
        num_nodes = largest + 1
    elif largest >= num_nodes:
        raise InputError.at(path, None, f"vertex id {largest} is not below --num-nodes {num_nodes}")
    return _from_edges(num_nodes, src, dst, weights, directed)


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
    return _from_edges(len(order), src, dst, weights, graph.is_directed())


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
    return GraphData(csr.indptr.astype(np.int64), csr.indices.astype(np.int64), weights,
                     directed=directed)


def _from_edges(num_nodes, src, dst, weights, directed) -> GraphData:
    if not directed:
        loops = src == dst
        src, dst = np.concatenate([src, dst[~loops]]), np.concatenate([dst, src[~loops]])
        if weights is not None:
            weights = np.concatenate([weights, weights[~loops]])
    if weights is None:
        indptr, indices = edges_to_csr(num_nodes, src, dst)
    else:
        indptr, indices, weights = edges_to_csr(num_nodes, src, dst, weights)
    return GraphData(indptr, indices, weights, directed=directed)
