"""Weak components with each rank's own block merged first: the union-find kernel against scipy's
``connected_components`` (its twin) and networkx, and ``wcc`` on a grid and on a path spread by hash,
whose diameter no longer sets the number of supersteps (P = 2 and 3, all layouts, ``ctx.fetch``:
tests/test_engine.py)."""

import os
import shutil
import subprocess
import sys

import h5py
import networkx as nx
import numpy as np
import pytest

from kernels.local_components import _local_components, local_components
from pregel.comm import Comm
from pregel.convert import from_networkx
from pregel.graph_io import write_graph
from pregel.job import run_job
from vertex_programs import WeakComponents


@pytest.mark.parametrize("num_rows, num_columns, num_edges", [(0, 0, 0), (1, 3, 2), (50, 50, 30), (400, 520, 900)])
def test_local_components_match_scipy_and_networkx(num_rows, num_columns, num_edges):
    rng = np.random.default_rng(num_edges)
    rows = np.sort(rng.integers(0, max(num_rows, 1), num_edges)) if num_rows else np.zeros(0, np.int64)
    columns = rng.integers(0, max(num_columns, 1), len(rows))  # columns ≥ num_rows: ghost rows, left out
    indptr = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=num_rows))]).astype(np.int64)
    got = local_components(indptr, columns, num_rows)
    assert np.array_equal(got, _local_components(indptr, columns, num_rows))
    graph = nx.Graph()
    graph.add_nodes_from(range(num_rows))
    graph.add_edges_from((int(r), int(c)) for r, c in zip(rows, columns) if c < num_rows)
    for component in nx.connected_components(graph):
        assert set(got[list(component)].tolist()) == {min(component)}


@pytest.mark.parametrize("num_rows, num_columns, num_edges", [(0, 0, 0), (1, 3, 2), (50, 50, 30), (400, 520, 900)])
def test_local_components_of_edges_stored_both_ways_read_each_once_and_match_scipy(num_rows, num_columns, num_edges):
    rng = np.random.default_rng(num_edges + 1)
    rows = rng.integers(0, max(num_rows, 1), num_edges) if num_rows else np.zeros(0, np.int64)
    columns = rng.integers(0, max(num_columns, 1), len(rows))
    between = columns < num_rows  # edges between rows, stored again the other way (ghost columns once)
    rows, columns = np.concatenate([rows, columns[between]]), np.concatenate([columns, rows[between]])
    order = np.argsort(rows, kind="stable")
    rows, columns = rows[order], columns[order]
    indptr = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=num_rows))]).astype(np.int64)
    got = local_components(indptr, columns, num_rows, both_ways=True)
    assert np.array_equal(got, _local_components(indptr, columns, num_rows))


def test_local_components_refuse_a_bad_csr():
    with pytest.raises(ValueError, match="num_rows \\+ 1"):
        local_components(np.array([0, 1]), np.array([0]), 2)
    with pytest.raises(ValueError, match="non-negative"):
        local_components(np.array([0, 1]), np.array([-1]), 1)


def test_wcc_on_a_grid_takes_a_few_supersteps_and_matches_networkx(tmp_path):
    rng = np.random.default_rng(5)
    order = rng.permutation(60 * 60)
    grid = nx.Graph()
    grid.add_nodes_from(range(60 * 60 + 7))  # and seven isolated vertices
    grid.add_edges_from((int(order[u[0] * 60 + u[1]]), int(order[v[0] * 60 + v[1]]))
                        for u, v in nx.grid_2d_graph(60, 60).edges)
    grid.add_edge(3600, 3601)
    report = run_job(Comm(), from_networkx(grid), WeakComponents(), tmp_path / "out.h5", algorithm="wcc")
    assert np.array_equal(report.values, _wcc_oracle(grid))
    assert report.result.supersteps <= 2  # one rank holds every edge: its block is the whole component


def _wcc_oracle(graph: nx.Graph) -> np.ndarray:
    """[N] the smallest id of each vertex's component, from networkx."""
    expected = np.empty(len(graph), np.int64)
    for component in nx.connected_components(graph):
        expected[list(component)] = min(component)
    return expected


@pytest.mark.parametrize("ranks", [2, 3])
def test_wcc_on_a_long_path_spread_by_hash_takes_few_supersteps(tmp_path, ranks):
    """A path of 3,000 vertices in id order, dealt to ranks by hash: each rank's blocks are short
    runs, and min-labels alone would take the path's length in supersteps (the smallest id walks
    from one end to the other); labels that jump along their pointers need about twice log2 of its length (13 at P = 2 and 3)."""
    length, bin_dir = 3000, os.path.dirname(sys.executable)
    path = nx.path_graph(length)
    path.add_nodes_from([length, length + 1, length + 2])  # a second component, and an isolated vertex
    path.add_edge(length, length + 1)
    write_graph(tmp_path / "g.h5", from_networkx(path))
    result = subprocess.run(
        [shutil.which("mpiexec", path=bin_dir), "-n", str(ranks), shutil.which("pregel", path=bin_dir), "run",
         "wcc", "--graph", tmp_path / "g.h5", "--out", tmp_path / "o.h5", "--partition", "hash", "--quiet"],
        capture_output=True, text=True, timeout=120, env=dict(os.environ, OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1"))
    assert result.returncode == 0, result.stderr
    with h5py.File(tmp_path / "o.h5") as f:
        values, supersteps = f["values"][:], f.attrs["supersteps"]
    assert np.array_equal(values, _wcc_oracle(path))
    assert supersteps <= 25, supersteps
