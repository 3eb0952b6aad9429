"""Synthetic graphs for demos, tests and benchmarks.

Three kinds, all returned as an out-edge CSR ``(indptr, indices)`` without duplicate edges or
self-loops:

* ``powerlaw`` — Chung-Lu: the vertex of rank ``r`` gets weight ``w_r ∝ r ** (-1 / (exponent - 1))``
  and both endpoints of every edge are drawn with probability proportional to the weights, so in- and
  out-degrees follow a power law with the given exponent and the heaviest vertices are real hubs
  (on 1M vertices with 10 edges each, the largest hubs have degrees in the tens of thousands at the
  default exponent 2.5). Vertex ids are shuffled so hubs are spread over the id range.
* ``er`` — Erdős–Rényi G(n, m): uniformly random directed edges.
* ``grid`` — a square 2-D grid with 4-neighbour edges in both directions (undirected).

For ``powerlaw`` and ``er``, ``avg_degree`` is the mean out-degree, so ``E = N · avg_degree`` rounded
to the nearest whole number; with ``undirected=True`` both directions of ``N · avg_degree / 2``
undirected edges are stored, so E is the even number nearest ``N · avg_degree``. Halves round up
(``edge_count``).
"""

import math
from decimal import ROUND_HALF_UP, Decimal, localcontext

import numpy as np
from numba import njit

from kernels._numba_start import start as start_numba
from pregel.edge_order import count_rows, group_by_row, indptr_of, pairs_ascending
from pregel.errors import InputError

KINDS = ("powerlaw", "er", "grid")
DEFAULT_EXPONENT = 2.5
DEFAULT_AVG_DEGREE = 10.0  # ``pregel generate``'s mean out-degree
#: random numbers drawn at a time (power-law ids, weights, features): bounds their float64 temporaries
SAMPLE_CHUNK = 1 << 22

start_numba()


def generate_graph(kind: str, num_nodes: int, avg_degree: float, seed: int = 0,
                   exponent: float = DEFAULT_EXPONENT, undirected: bool = False):
    """Generate a graph of ``kind`` and return its out-edge CSR.

    Returns ``(indptr, indices)``: ``indptr`` int64 [N + 1], ``indices`` [E] (destinations, sorted within
    each row; int32 while N < 2**31, as the file stores them, else int64). ``grid`` ignores ``avg_degree``,
    ``exponent`` and ``undirected`` (it is always undirected) and rounds ``num_nodes`` down to a square.
    """
    if kind not in KINDS:
        raise ValueError(f"unknown graph kind {kind!r}; choose one of {', '.join(KINDS)}")
    if num_nodes < 1:
        raise ValueError(f"num_nodes must be at least 1, got {num_nodes}")
    rng = np.random.default_rng(seed)
    if kind == "grid":
        src, dst, num_nodes = _grid_edges(num_nodes)
        return edges_to_csr(num_nodes, src, dst)
    if not (0 <= avg_degree < np.inf):  # NaN fails too
        raise InputError(f"`avg_degree` must be a non-negative number, got {avg_degree}")
    if kind == "powerlaw" and exponent <= 1.0:
        raise ValueError(f"the power-law exponent must be greater than 1, got {exponent}")
    sampler = _PowerLawSampler(num_nodes, exponent, rng) if kind == "powerlaw" else None
    keys = _sample_simple_edges(num_nodes, edge_count(num_nodes, avg_degree, undirected), sampler, rng, undirected)
    if not undirected:  # the keys ascend by (source, destination), the CSR's order
        return _csr_of_keys(keys, num_nodes)
    src = np.empty(2 * len(keys), dtype=_id_dtype(num_nodes))
    dst = np.empty_like(src)
    _keys_both_ways(keys, np.int64(num_nodes), src, dst)
    del keys
    return edges_to_csr(num_nodes, src, dst)


def _id_dtype(num_nodes: int):
    """int32 while every vertex id fits (the file's ``/graph/indices`` type), else int64."""
    return np.int32 if num_nodes <= np.iinfo(np.int32).max else np.int64


def edge_count(num_nodes: int, avg_degree: float, undirected: bool = False) -> int:
    """The edges to draw: ``num_nodes`` x ``avg_degree``, halved when ``undirected`` (each is stored both
    ways), rounded half up on the degree's decimal form (10 x 0.35 is 3.5: 4 edges, not the float's 3)."""
    with localcontext() as context:
        context.prec = 60  # exact: an int64 count times a float's 17 significant digits
        edges = Decimal(num_nodes) * Decimal(repr(float(avg_degree))) / (2 if undirected else 1)
        return int(edges.to_integral_value(rounding=ROUND_HALF_UP))


#: the most vertices for which an edge's key ``src * N + dst`` fits in int64: isqrt(2**63 - 1), about 3.04e9
MAX_KEYED_NODES = math.isqrt(2**63 - 1)


def edges_to_csr(num_nodes: int, src: np.ndarray, dst: np.ndarray, weights: np.ndarray | None = None):
    """Sort an edge list into an out-edge CSR.

    ``src``, ``dst``: [E] integer vertex ids below ``num_nodes``; ``weights``: [E] or None. Returns
    ``(indptr int64 [N + 1], indices [E])`` or, with weights, also the permuted ``weights``; ``indices``
    keep ``dst``'s dtype when it is int32 or int64 (int32 ids stay 4 bytes an edge), else int64.
    Edges are ordered by (source, destination); parallel edges keep their input order. A counting
    sort by source and a sort of each row by destination (``edge_order.group_by_row``): O(E log d) for
    rows of d edges and one output array beside the input, where an argsort of (source, destination)
    keys held three int64 arrays of E and took about 24 s of `pregel convert`'s 30 on 100M shuffled edges.
    Edges already in that order (a file written from a CSR) are not moved: ``indices`` is then ``dst``
    itself, and ``weights`` the given array.
    """
    src = np.asarray(src)
    dst = np.asarray(dst)
    if dst.dtype not in (np.int32, np.int64):
        dst = dst.astype(np.int64)
    if src.dtype.kind not in "iu":
        src = src.astype(np.int64)
    weights = None if weights is None else np.asarray(weights)
    if pairs_ascending(src, dst):
        indptr, indices = indptr_of(count_rows(src, num_nodes)), dst
    else:
        indptr, indices, weights = group_by_row(src, num_nodes, dst, weights, keys=dst)
    if weights is None:
        return indptr, indices
    return indptr, indices, weights


@njit(cache=True)
def _keys_both_ways(keys, num_nodes, src, dst):
    """The edges of keys [E] ``s * num_nodes + d`` both ways: (s, d) at i and (d, s) at E + i of src, dst
    [2E]."""
    count = keys.shape[0]
    for i in range(count):
        s = keys[i] // num_nodes
        d = keys[i] - s * num_nodes
        src[i], dst[i] = s, d
        src[count + i], dst[count + i] = d, s


def random_features(labels: np.ndarray | None, num_nodes: int, num_features: int, rng,
                    noise: float = 1.0) -> np.ndarray:
    """Gaussian node features [N, F] float32; with ``labels`` [N], each class gets its own mean.

    The class means are drawn at unit scale, so a classifier can learn the labels from the features
    (useful for GNN demos) while ``noise`` keeps it from being trivial.
    """
    features = np.empty((num_nodes, num_features), dtype=np.float32)
    rows = max(1, SAMPLE_CHUNK // max(num_features, 1))  # the float64 draws a block of rows at a time: the
    for start in range(0, num_nodes, rows):  # same numbers as one draw, without its [N, F] float64 temporary
        features[start:start + rows] = rng.normal(0.0, noise, size=(min(rows, num_nodes - start), num_features))
    if labels is not None:
        centroids = rng.normal(0.0, 1.0, size=(int(labels.max()) + 1, num_features)).astype(np.float32)
        for start in range(0, num_nodes, rows):
            features[start:start + rows] += centroids[labels[start:start + rows]]
    return features


def random_weights(num_edges: int, rng) -> np.ndarray:
    """Uniform edge weights in (0, 1] as float32 [E], drawn ``SAMPLE_CHUNK`` at a time (the same numbers as
    ``1 - rng.random(E)``, without its float64 temporary)."""
    weights = np.empty(num_edges, dtype=np.float32)
    for start in range(0, num_edges, SAMPLE_CHUNK):
        weights[start:start + SAMPLE_CHUNK] = 1.0 - rng.random(min(SAMPLE_CHUNK, num_edges - start))
    return weights


class _PowerLawSampler:
    """Draws vertex ids with probability ∝ rank ** -b, b = 1 / (exponent - 1), ranks on shuffled ids.

    Ranks come from the inverse CDF of the continuous density x ** -b on [1, N + 1) (one power per
    sample instead of a binary search over N weights), then ``floor`` and a fixed random
    permutation of ids so hubs are spread over the id range.
    """

    def __init__(self, num_nodes: int, exponent: float, rng):
        self.num_nodes = num_nodes
        self.b = 1.0 / (exponent - 1.0)
        self.id_of_rank = rng.permutation(num_nodes)

    def __call__(self, rng, size: int) -> np.ndarray:
        """[size] int64 vertex ids, drawn ``SAMPLE_CHUNK`` at a time (the same uniform numbers as one draw of
        ``size``: ``Generator.random`` takes one 64-bit output a number, in order)."""
        ids = np.empty(size, dtype=np.int64)
        for start in range(0, size, SAMPLE_CHUNK):
            ids[start:start + SAMPLE_CHUNK] = self._ids_of(rng.random(min(SAMPLE_CHUNK, size - start)))
        return ids

    def _ids_of(self, u: np.ndarray) -> np.ndarray:
        """The vertex ids [k] int64 of uniform numbers u [k] in [0, 1)."""
        top = float(self.num_nodes + 1)
        if abs(self.b - 1.0) < 1e-12:
            x = np.exp(u * np.log(top))
        else:
            one_minus_b = 1.0 - self.b
            x = (1.0 + u * (top ** one_minus_b - 1.0)) ** (1.0 / one_minus_b)
        ranks = np.minimum(x.astype(np.int64) - 1, self.num_nodes - 1)
        return self.id_of_rank[ranks]


def _sample_simple_edges(num_nodes: int, num_edges: int, sample_ids, rng, undirected: bool):
    """Draw ``num_edges`` distinct non-loop edges; endpoints from ``sample_ids(rng, size)`` or uniform.

    Returns their keys ``src * N + dst`` [E] int64, ascending. Duplicates and loops are dropped and the
    shortfall redrawn until the count is met; with ``undirected`` an edge and its reverse count as
    the same edge (returned once, as src < dst). Keys are made, sorted and deduplicated in place in the
    array of the sources, so memory holds the two draws of ids, then the keys and the surplus's choice
    (`pregel generate` of 100M edges: 2.0 GB at the peak, where the NumPy expressions took 4.4 GB).
    """
    if num_nodes > MAX_KEYED_NODES:  # the distinct edges are found by an int64 key src * N + dst
        raise InputError(f"generating a graph of more than {MAX_KEYED_NODES:,} vertices is not supported, got "
                         f"{num_nodes:,}")
    max_edges = num_nodes * (num_nodes - 1) // (2 if undirected else 1)
    if num_edges > max_edges:  # InputError: the command line reports it as one line, exit status 2
        what = "undirected edges (`nodes` x `avg_degree` / 2)" if undirected else "edges (`nodes` x `avg_degree`)"
        raise InputError(f"{num_edges:,} distinct {what} do not fit in a simple graph on {num_nodes:,} vertices, "
                         f"which has at most {max_edges:,}")
    if sample_ids is None:
        def sample_ids(generator, size):
            return generator.integers(0, num_nodes, size=size)
    keys = np.empty(0, dtype=np.int64)
    while keys.size < num_edges:
        draw = int((num_edges - keys.size) * 1.1) + 16
        src = sample_ids(rng, draw)
        drawn = src[:_keys_of_pairs(src, sample_ids(rng, draw), num_nodes, undirected)]  # src becomes the keys
        if keys.size:
            drawn = np.concatenate([keys, drawn])
        drawn.sort()
        keys = drawn[:_drop_repeats(drawn)]
    surplus = keys.size - num_edges
    if surplus:
        dropped = np.zeros(keys.size, dtype=bool)
        dropped[rng.choice(keys.size, size=surplus, replace=False)] = True
        keys = keys[:_drop_marked(keys, dropped)]
    return keys


@njit(cache=True)
def _keys_of_pairs(src, dst, num_nodes, undirected):
    """Writes the key ``s * num_nodes + d`` of each pair (s, d) of src, dst [k] int64 (s < d first with
    ``undirected``) that is not a loop into the front of ``src``, in order; returns how many."""
    kept = 0
    for i in range(src.shape[0]):
        s, d = src[i], dst[i]
        if s == d:
            continue
        if undirected and s > d:
            s, d = d, s
        src[kept] = s * num_nodes + d
        kept += 1
    return kept


@njit(cache=True)
def _drop_repeats(keys):
    """Moves the distinct values of ascending keys [k] to its front, in order; returns how many."""
    kept = 0
    for i in range(keys.shape[0]):
        if kept == 0 or keys[i] != keys[kept - 1]:
            keys[kept] = keys[i]
            kept += 1
    return kept


@njit(cache=True)
def _drop_marked(keys, dropped):
    """Moves the keys [k] whose ``dropped`` [k] bool is unset to the front, in order; returns how many."""
    kept = 0
    for i in range(keys.shape[0]):
        if not dropped[i]:
            keys[kept] = keys[i]
            kept += 1
    return kept


@njit(cache=True)
def _split_keys(keys, num_nodes, counts):
    """counts[s] += 1 for each key ``s * num_nodes + d`` of keys [E] int64, which becomes d (in place)."""
    for i in range(keys.shape[0]):
        s = keys[i] // num_nodes
        counts[s] += 1
        keys[i] -= s * num_nodes


def _csr_of_keys(keys: np.ndarray, num_nodes: int) -> tuple[np.ndarray, np.ndarray]:
    """(indptr [N + 1] int64, indices [E] of ``_id_dtype``) of ascending edge keys [E] int64 ``src * N +
    dst`` (overwritten: the destinations are split out in place)."""
    counts = np.zeros(num_nodes, dtype=np.int64)
    _split_keys(keys, np.int64(num_nodes), counts)
    return indptr_of(counts), keys.astype(_id_dtype(num_nodes), copy=False)


def _grid_edges(num_nodes: int):
    """4-neighbour edges of the largest square grid with at most ``num_nodes`` vertices, both directions."""
    side = int(np.sqrt(num_nodes))
    ids = np.arange(side * side, dtype=_id_dtype(side * side)).reshape(side, side)
    right = (ids[:, :-1].ravel(), ids[:, 1:].ravel())
    down = (ids[:-1, :].ravel(), ids[1:, :].ravel())
    src = np.concatenate([right[0], down[0], right[1], down[1]])
    dst = np.concatenate([right[1], down[1], right[0], down[0]])
    return src, dst, side * side
