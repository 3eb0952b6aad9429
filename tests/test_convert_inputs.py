"""Streaming edge lists against np.loadtxt, Matrix Market against scipy.io.mmread, PyG round trips."""
import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp
import torch
from torch_geometric.data import Data
from torch_geometric.utils import is_undirected, to_scipy_sparse_matrix, to_undirected

from pregel.cli import main
from pregel.convert import from_pyg, from_scipy, read_edge_list, read_matrix_market, to_pyg
from pregel.edge_list import stream_edge_list
from pregel.errors import InputError
from pregel.graph_io import GraphData, read_graph


def _csr(graph: GraphData):
    return sp.csr_matrix((np.ones(graph.num_edges) if graph.weights is None else graph.weights,
                          graph.indices, graph.indptr), shape=(graph.num_nodes,) * 2)


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("chunk", [7, 64, 1 << 20])
def test_streamed_edge_list_equals_loadtxt_across_chunk_boundaries(tmp_path, weighted, chunk):
    rng = np.random.default_rng(3)
    e = 500
    src, dst = rng.integers(0, 10**6, e), rng.integers(0, 10**6, e)
    w = rng.standard_normal(e) * 10.0 ** rng.integers(-5, 5, e)
    lines = [f"{s} {d}" + (f"\t{x!r}" if weighted else "") + ("  # note" if i % 7 == 0 else "")
             for i, (s, d, x) in enumerate(zip(src, dst, w.tolist()))]
    lines.insert(100, "# a comment line")
    lines.insert(200, "")
    path = tmp_path / "e.txt"
    path.write_text("\n".join(lines))  # no final newline
    table = np.loadtxt(path, comments="#", ndmin=2)
    s, d, weights = stream_edge_list(path, chunk_bytes=chunk)
    np.testing.assert_array_equal(s, table[:, 0].astype(np.int64))
    np.testing.assert_array_equal(d, table[:, 1].astype(np.int64))
    if weighted:
        np.testing.assert_array_equal(weights, table[:, 2].astype(np.float32))
    else:
        assert weights is None


@pytest.mark.parametrize("large", [None, 3, 997])  # no id >= 2**31, one in an early chunk, one in the last line
def test_streamed_ids_are_int32_until_one_does_not_fit(tmp_path, large):
    rng = np.random.default_rng(4)
    src, dst = rng.integers(0, 2**31, 1000), rng.integers(0, 2**31, 1000)
    if large is not None:
        dst[large] = 2**31  # the smallest id that int32 cannot hold
    path = tmp_path / "e.txt"
    path.write_text("".join(f"{s} {d}\n" for s, d in zip(src, dst)))
    s, d, _ = stream_edge_list(path, chunk_bytes=200)  # many chunks, of either width
    assert s.dtype == d.dtype == (np.int32 if large is None else np.int64)
    np.testing.assert_array_equal(s, src)
    np.testing.assert_array_equal(d, dst)


def test_error_line_numbers_count_across_chunks(tmp_path):
    path = tmp_path / "e.txt"
    path.write_text("0 1\n" * 50 + "# c\n" + "2 x\n")
    with pytest.raises(InputError, match="line 52: vertex ids"):
        stream_edge_list(path, chunk_bytes=16)


@pytest.mark.parametrize("symmetry,field", [("general", "real"), ("symmetric", "real"), ("general", "pattern"),
                                            ("symmetric", "integer")])
def test_matrix_market_matches_mmread(tmp_path, symmetry, field):
    rng = np.random.default_rng(1)
    a = sp.random(40, 40, density=0.1, random_state=rng, format="coo")
    if symmetry == "symmetric":
        a = sp.coo_matrix(sp.triu(a) + sp.triu(a, 1).T)
    if field == "integer":
        a.data = np.ceil(a.data * 9)
    path = tmp_path / "m.mtx"
    scipy.io.mmwrite(path, a, field=field, symmetry=symmetry)
    oracle = sp.csr_matrix(scipy.io.mmread(path)).astype(np.float32)  # weights are stored as float32
    out = tmp_path / "m.h5"
    assert main(["convert", str(path), "--out", str(out)]) == 0
    graph = read_graph(out)
    assert graph.directed == (symmetry == "general")
    assert (graph.weights is None) == (field == "pattern")
    assert (_csr(graph) != (oracle != 0 if field == "pattern" else oracle)).nnz == 0
    assert graph.num_edges == oracle.nnz


@pytest.mark.parametrize("field", ["real", "pattern"])
def test_matrix_market_repeated_and_unordered_entries_as_scipy_reads_them(tmp_path, field):
    # entries out of order, one (2, 1) given twice: scipy sums them into one entry, and so does the file
    lines = ["3 1 0.5", "1 2 0.25", "3 2 1.5", "1 1 2.0", "3 2 0.125", "2 3 1.0"]
    if field == "pattern":
        lines = [" ".join(line.split()[:2]) for line in lines]
    for repeated in (True, False):
        body = lines if repeated else lines[:4] + lines[5:]
        path = tmp_path / "m.mtx"
        path.write_text(f"%%MatrixMarket matrix coordinate {field} general\n3 3 {len(body)}\n" + "\n".join(body) + "\n")
        oracle = sp.csr_matrix(scipy.io.mmread(path))
        graph = read_matrix_market(path)
        assert graph.num_edges == oracle.nnz == 5  # (3, 2) once
        assert graph.indices.dtype == np.int32  # as read, and as the file stores them
        if field == "pattern":
            assert graph.weights is None and (_csr(graph) != (oracle != 0)).nnz == 0
        else:
            assert (_csr(graph) != oracle.astype(np.float32)).nnz == 0


def test_has_repeats_looks_within_rows_only():
    from pregel.convert import has_repeats

    indptr = np.array([0, 2, 2, 4, 5])  # an empty row; rows 0 and 2 end on the id the next row starts with
    assert not has_repeats(indptr, np.array([1, 3, 3, 4, 4]))
    assert has_repeats(indptr, np.array([1, 3, 3, 3, 4]))
    assert has_repeats(np.array([0, 2]), np.array([0, 0])) and not has_repeats(np.array([0, 0]), np.zeros(0, int))


def test_matrix_market_errors(tmp_path):
    path = tmp_path / "rect.mtx"
    scipy.io.mmwrite(path, sp.random(3, 4, density=0.5, random_state=0))
    with pytest.raises(InputError, match="3 x 4; an adjacency matrix must be square"):
        read_matrix_market(path)
    (tmp_path / "junk.mtx").write_text("hello\n")
    with pytest.raises(InputError, match="not a Matrix Market file"):
        read_matrix_market(tmp_path / "junk.mtx")


def test_from_pyg_matches_pyg_adjacency_and_round_trips():
    rng = np.random.default_rng(2)
    n, e = 30, 120
    edge_index = torch.from_numpy(rng.integers(0, n, (2, e)))
    weight = torch.from_numpy(rng.random(e).astype(np.float32))
    data = Data(edge_index=edge_index, edge_attr=weight[:, None], x=torch.randn(n, 5), y=torch.arange(n) % 3,
                num_nodes=n)
    graph = from_pyg(data)
    assert graph.directed
    oracle = to_scipy_sparse_matrix(edge_index, weight, n).tocsr()  # PyG sums duplicate edges
    assert abs(_csr(graph) - oracle).max() < 1e-6
    np.testing.assert_array_equal(graph.features, data.x.numpy())
    np.testing.assert_array_equal(graph.labels, data.y.numpy())

    back = to_pyg(graph)
    assert back.num_nodes == n and torch.equal(back.x, data.x) and torch.equal(back.y, data.y)
    assert abs(to_scipy_sparse_matrix(back.edge_index, back.edge_weight, n).tocsr() - oracle).max() < 1e-6
    again = from_pyg(back)
    for name in ("indptr", "indices", "weights", "features", "labels"):
        np.testing.assert_array_equal(getattr(again, name), getattr(graph, name))


def test_undirected_pyg_graph_is_kept_as_is():
    edge_index = to_undirected(torch.tensor([[0, 1, 2, 3], [1, 2, 3, 3]]))
    data = Data(edge_index=edge_index, num_nodes=5)
    graph = from_pyg(data)
    assert not graph.directed and graph.num_edges == edge_index.shape[1] and graph.weights is None
    back = to_pyg(graph)
    assert is_undirected(back.edge_index) and back.edge_weight is None
    assert (to_scipy_sparse_matrix(back.edge_index, num_nodes=5) != to_scipy_sparse_matrix(edge_index, num_nodes=5)).nnz == 0
    with pytest.raises(InputError, match=r"edge_attr has shape \[7, 2\]"):
        from_pyg(Data(edge_index=edge_index, edge_attr=torch.ones(7, 2), num_nodes=5))


def test_scipy_matrix_written_and_read_as_edge_list_agree(tmp_path):
    a = sp.random(50, 50, density=0.05, random_state=4, format="csr")
    coo = a.tocoo()
    path = tmp_path / "e.txt"
    path.write_text("".join(f"{r} {c} {v!r}\n" for r, c, v in zip(coo.row, coo.col, coo.data.tolist())))
    graph = read_edge_list(path, num_nodes=50)
    expected = from_scipy(a)
    np.testing.assert_array_equal(graph.indptr, expected.indptr)
    np.testing.assert_array_equal(graph.indices, expected.indices)
    np.testing.assert_array_equal(graph.weights, expected.weights)
