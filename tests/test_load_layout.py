"""Where the loader puts each edge, at P = 1, 2 and 3 (tests/mpi_scripts/load_layout.py), against a
NumPy oracle built from the whole file: every edge exactly once (and, for a symmetric program, its
reverse once), on its destination's owner unless it goes to an in-hub (or, shadow nodes off, leaves
an out-hub), then on its source's owner; rows by ascending source with duplicate edges in file order,
a file edge before a reverse edge from the same source; in-degrees, self-loops, in-hubs, ghosts and
dtypes."""

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from pregel.comm import Comm
from pregel.dgraph import load_graph
from pregel.graph_io import GraphData, write_graph

SIZES = (1, 2, 3)
THRESHOLD = 5
LAYOUTS = ("range", "hash", "noshadow", "nogather", "automatic",  # see the script
           "symmetric", "symmetric-hubs", "symmetric-hash", "symmetric-hash-hubs", "symmetric-noshadow")
SCRIPT = os.path.join(os.path.dirname(__file__), "mpi_scripts", "load_layout.py")
MPIEXEC = shutil.which("mpiexec", path=os.path.dirname(sys.executable)) or "mpiexec"
N = 300


def _edges():
    """(src, dst, weight) [E] of a skewed graph in file order: sources ascending, with duplicate
    edges (same ends, other weights) and self-loops."""
    rng = np.random.default_rng(4)
    dst = np.concatenate([rng.integers(0, N, 1500), np.full(200, 7), np.full(60, 250), rng.integers(0, 5, 200)])
    src = np.concatenate([rng.integers(0, N, 1500), rng.integers(0, N, 260), np.full(200, 3)])
    loops = np.arange(0, N, 9)
    src, dst = np.concatenate([src, src[:100], loops]), np.concatenate([dst, dst[:100], loops])
    order = np.argsort(src, kind="stable")
    return src[order], dst[order], rng.random(len(src)).astype(np.float32)


def _lopsided_edges():
    """(src, dst, weight) [E]: a ring that steps over two in-hubs (150 and 250), whose in-edges all come
    from vertices below 50, so that at P = 2 and 3 the last rank's slice has no edge to any hub."""
    ring = np.arange(N)
    after = (ring + 1) % N
    after[np.isin(after, (150, 250))] += 1
    src = np.concatenate([ring, np.repeat(np.arange(50), 2)])
    dst = np.concatenate([after, np.tile([150, 250], 50)])
    order = np.argsort(src, kind="stable")
    return src[order], dst[order], np.random.default_rng(7).random(len(src)).astype(np.float32)


def _load_everywhere(folder, edges):
    """Write ``edges`` as a graph file in ``folder``, load it with every layout at P = 1, 2, 3 and
    return {P: [each rank's arrays]}."""
    src, dst, weight = edges
    indptr = np.concatenate([[0], np.cumsum(np.bincount(src, minlength=N))]).astype(np.int64)
    features = np.random.default_rng(5).random((N, 3)).astype(np.float32)
    write_graph(folder / "g.h5", GraphData(indptr, dst.astype(np.int32), weight, features))
    env = dict(os.environ, OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1")
    for size in SIZES:
        subprocess.run([MPIEXEC, "-n", str(size), sys.executable, "-m", "mpi4py", SCRIPT, str(folder / "g.h5")],
                       check=True, timeout=300, env=env)
    return {size: [dict(np.load(folder / f"layout_{size}_{r}.npz")) for r in range(size)] for size in SIZES}


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    return _load_everywhere(tmp_path_factory.mktemp("layout"), _edges())


@pytest.fixture(scope="module")
def loaded_lopsided(tmp_path_factory):
    return _load_everywhere(tmp_path_factory.mktemp("lopsided"), _lopsided_edges())


def _rows(part, name):
    """The rank's destination-side edges (src, dst, weight) and source-side ones, in stored order."""
    g = {k.split("/", 1)[1]: v for k, v in part.items() if k.startswith(name + "/")}
    owned = g["owned"]
    ext = np.concatenate([owned, g["ghost_ids"]])
    dest = (ext[g["in_indices"]], np.repeat(owned, np.diff(g["in_indptr"])), g["in_weights"])
    source = (owned[g["part_src"]], np.repeat(g["part_dst"], np.diff(g["part_indptr"])), g["part_weights"])
    return g, dest, source


@pytest.mark.parametrize("name", LAYOUTS)
def test_each_edge_on_the_rank_that_processes_it(loaded, name):
    _check_layout(loaded, name, *_edges())


@pytest.mark.parametrize("name", ("range", "symmetric-hubs", "automatic"))
def test_a_rank_without_edges_to_hubs(loaded_lopsided, name):
    """In-hubs exist but no file edge of the last rank's slice goes to one: every rank must still make
    the same exchanges (the load would hang or mix up destinations if that rank alone reused the
    in-degree's)."""
    src, dst, _ = edges = _lopsided_edges()
    last = loaded_lopsided[3][-1][f"{name}/owned"]
    assert not np.isin(dst[np.isin(src, last)], (150, 250)).any()  # the case this graph is for
    _check_layout(loaded_lopsided, name, *edges)


def _check_layout(loaded, name, src, dst, weight):
    """Every rank's arrays of layout ``name`` against the oracle built from the file's edges [E]."""
    out_degree = np.bincount(src, minlength=N)
    forward = np.ones(len(src), bool)
    if name.startswith("symmetric"):  # the reverse edges after the file's: a stable sort keeps them after
        src, dst = np.concatenate([src, dst]), np.concatenate([dst, src])
        weight, forward = np.concatenate([weight, weight]), np.concatenate([forward, ~forward])
    in_degree, loops = np.bincount(dst, minlength=N), np.bincount(src[src == dst], minlength=N)
    for size in SIZES:
        automatic = np.inf if size == 1 else max(100, 20 * len(src) / N, len(src) / (100 * size))
        threshold = THRESHOLD if name not in ("automatic", "symmetric", "symmetric-hash") else automatic
        hubs = np.flatnonzero(in_degree > threshold) if name != "nogather" else np.zeros(0, np.int64)
        source_side = np.isin(dst, hubs)
        if name in ("noshadow", "nogather", "symmetric-noshadow"):
            source_side |= forward & (out_degree[src] > threshold)  # a reverse edge is no out-hub's
        owner = np.empty(N, np.int64)
        for r, part in enumerate(loaded[size]):
            owner[part[f"{name}/owned"]] = r
        for r, part in enumerate(loaded[size]):
            g, dest, source = _rows(part, name)
            assert np.array_equal(g["in_degree"], in_degree[g["owned"]]), (size, r)
            assert np.array_equal(g["out_degree"], out_degree[g["owned"]]), (size, r)
            assert np.array_equal(g["self_loops"], loops[g["owned"]]), (size, r)
            assert np.array_equal(g["in_hubs"], hubs), (size, r)
            for stored, side, key in ((dest, ~source_side, dst), (source, source_side, src)):
                pick = side & (owner[key] == r)
                order = np.lexsort((src[pick], dst[pick]))  # by (dst, src); duplicates in file order
                for got, want in zip(stored, (src[pick][order], dst[pick][order], weight[pick][order])):
                    assert np.array_equal(got, want), (size, r)
            remote = np.unique(dest[0][owner[dest[0]] != r])
            assert np.array_equal(g["ghost_ids"], remote[np.lexsort((remote, owner[remote]))]), (size, r)
            assert g["in_indices"].dtype == np.int32 and g["part_src"].dtype == np.int64
            assert g["in_degree"].dtype == np.int64 and g["in_hubs"].dtype == np.int64


def test_an_in_memory_graph_is_left_as_given():
    """A symmetric load sorts the rows it read in place; an in-memory graph hands out views of its own
    arrays, which must stay as they were (rows not sorted by target, int64 ids, weights)."""
    indptr = np.array([0, 3, 5, 6], np.int64)
    indices = np.array([2, 0, 1, 2, 0, 1], np.int64)
    weights = np.arange(6, dtype=np.float32)
    graph = GraphData(indptr, indices, weights)
    loaded = load_graph(Comm(), graph, symmetric=True)
    np.testing.assert_array_equal(indices, [2, 0, 1, 2, 0, 1])
    np.testing.assert_array_equal(weights, np.arange(6))
    src = np.repeat(np.arange(3), np.diff(indptr))
    rows = np.repeat(np.arange(3), np.diff(loaded.in_indptr))  # (source, destination) of each stored in-edge
    got = sorted(zip(loaded.in_indices.tolist(), rows.tolist()))
    assert got == sorted(zip(np.r_[src, indices].tolist(), np.r_[indices, src].tolist()))  # both ways


def test_the_placed_edges_are_not_kept_alive_by_the_empty_source_side():
    """With no source-side edge, the source side is empty arrays of their own: empty views (slices) of
    the placed edges would keep their whole buffers alive after the destinations are dropped (at P = 2
    on a 100M-edge graph, 200 MB of the load's peak on every rank but the first)."""
    from pregel.dgraph import _Edges, _LocalEdges
    from pregel.partition import make_partition

    src, dst = np.array([0, 1, 2, 2], np.int32), np.array([1, 2, 0, 2], np.int32)
    edges = _Edges(src, dst, np.ones(4, np.float32), np.zeros(4, bool))
    partition = make_partition("range", np.array([0, 3]), 3, 1)
    local = _LocalEdges(Comm(), partition, 3, edges, np.zeros(0, np.int64), np.array([1, 1, 2]))
    assert local.dest.dst is None and np.array_equal(local.dst_local, [1, 2, 0, 2])
    assert np.array_equal(local.self_loops, [0, 0, 1])
    for name in ("src", "dst", "weight", "out_hub"):
        array = getattr(local.source, name)
        assert len(array) == 0 and array.base is None, name


def test_splitting_the_source_side_keeps_every_edge_once_and_releases_the_placed_arrays():
    """With an in-hub, ``_LocalEdges`` splits the placed edges field by field (boolean masks of NumPy as
    the oracle) and drops each placed array once split, so the caller's copy does not stay at the peak."""
    from pregel.dgraph import _Edges, _LocalEdges
    from pregel.partition import make_partition

    rng = np.random.default_rng(5)
    src = rng.integers(0, 40, 500).astype(np.int32)
    dst = rng.integers(0, 40, 500).astype(np.int32)
    dst[::7] = 17  # the in-hub
    weight, out_hub, reverse = rng.random(500).astype(np.float32), rng.random(500) < 0.1, rng.random(500) < 0.5
    edges = _Edges(src.copy(), dst.copy(), weight.copy(), out_hub.copy(), reverse.copy())
    partition = make_partition("range", np.array([0, 40]), 40, 1)
    local = _LocalEdges(Comm(), partition, 40, edges, np.array([17]), np.bincount(dst, minlength=40))
    side = out_hub | (dst == 17)
    for name, values in (("src", src), ("weight", weight), ("out_hub", out_hub), ("reverse", reverse)):
        assert np.array_equal(getattr(local.dest, name), values[~side]), name
        assert np.array_equal(getattr(local.source, name), values[side]), name
        assert getattr(edges, name) is None, name
    assert np.array_equal(local.dst_local, dst[~side]) and np.array_equal(local.source.dst, dst[side])
    # the file edges' self-loops: each reverse one is counted by doubling (a symmetric load's rows hold both)
    assert np.array_equal(local.self_loops, np.bincount(src[(src == dst) & ~reverse], minlength=40))
