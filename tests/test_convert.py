"""Converters against networkx and scipy as the oracles."""
import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp

from pregel.convert import from_networkx, from_scipy, read_edge_list, to_networkx
from pregel.errors import InputError
from pregel.graph_io import read_graph, write_graph


def test_edge_list_with_weights_and_comments(tmp_path):
    text = tmp_path / "e.txt"
    text.write_text("# a comment\n0 3 0.5\n2 1 1.5  # trailing comment\n\n3 0 2\n")
    graph = read_edge_list(text)
    expected = nx.DiGraph()
    expected.add_nodes_from(range(4))
    expected.add_weighted_edges_from([(0, 3, 0.5), (2, 1, 1.5), (3, 0, 2.0)])
    assert nx.utils.graphs_equal(to_networkx(graph), expected)
    assert [d["weight"] for *_, d in to_networkx(graph).edges(data=True)] == [0.5, 1.5, 2.0]


def test_undirected_edge_list_stores_both_directions(tmp_path):
    text = tmp_path / "e.txt"
    text.write_text("0 1\n1 2\n2 2\n")
    graph = read_edge_list(text, num_nodes=5, directed=False)
    assert graph.num_nodes == 5 and graph.num_edges == 5  # the self-loop once
    expected = nx.empty_graph(5)
    expected.add_edges_from([(0, 1), (1, 2), (2, 2)])
    assert nx.utils.graphs_equal(to_networkx(graph), expected)


@pytest.mark.parametrize("content,problem", [
    ("0 1\n1 2 3\n", "line 2: expected 2 or 3 columns .* the same on every line"),
    ("0 -1\n", "line 1: vertex ids must be non-negative integers"),
    ("# c\n0 1.5\n", "line 2: vertex ids must be non-negative integers"),
    ("0 1 nan\n", "line 1: weight .* NaN or inf"),
    ("0 1 2x\n", "line 1: weight is not a number"),
    ("0 1 2 3\n", "line 1: expected 2 or 3 columns"),
    ("a b\n", "line 1: vertex ids must be non-negative integers"),
])
def test_bad_edge_lists(tmp_path, content, problem):
    text = tmp_path / "e.txt"
    text.write_text(content)
    with pytest.raises(InputError, match=problem):
        read_edge_list(text)


def test_num_nodes_too_small(tmp_path):
    text = tmp_path / "e.txt"
    text.write_text("0 9\n")
    with pytest.raises(InputError, match="not below `num_nodes` 5"):
        read_edge_list(text, num_nodes=5)


@pytest.mark.parametrize("directed", [True, False])
def test_networkx_round_trip_through_a_file(tmp_path, directed):
    g = nx.gnm_random_graph(40, 120, seed=2, directed=directed)
    g.add_edge(5, 5)
    for u, v in g.edges:
        g[u][v]["weight"] = float(u + 2 * v)
    write_graph(tmp_path / "g.h5", from_networkx(g))
    back = to_networkx(read_graph(tmp_path / "g.h5"))
    assert nx.utils.graphs_equal(back, g)


def test_networkx_node_labels_follow_node_order():
    g = nx.DiGraph([("b", "a"), ("a", "c")])
    graph = from_networkx(g)  # order: b=0, a=1, c=2
    assert graph.indptr.tolist() == [0, 1, 2, 2] and graph.indices.tolist() == [1, 2]
    assert graph.weights is None


def test_scipy_matrix_matches_its_entries():
    a = sp.random(50, 50, density=0.1, random_state=4, format="coo", dtype=np.float32)
    graph = from_scipy(a)
    back = sp.csr_matrix((graph.weights, graph.indices, graph.indptr), shape=(50, 50))
    assert (back != a.tocsr()).nnz == 0
    with pytest.raises(ValueError, match="square"):
        from_scipy(sp.random(3, 4, format="csr"))
