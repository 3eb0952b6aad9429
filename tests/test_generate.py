"""Generators: the graphs have the promised size, shape and degree distribution."""
import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp

from pregel.errors import InputError
from pregel.generate import MAX_KEYED_NODES, edges_to_csr, generate_graph


def _edges(indptr, indices):
    return np.repeat(np.arange(len(indptr) - 1), np.diff(indptr)), indices


@pytest.mark.parametrize("kind", ["powerlaw", "er"])
@pytest.mark.parametrize("undirected", [False, True])
def test_simple_graph_of_requested_size(kind, undirected):
    indptr, indices = generate_graph(kind, 2000, 6, seed=3, undirected=undirected)
    src, dst = _edges(indptr, indices)
    assert len(indices) == 2000 * 6
    assert not np.any(src == dst), "no self-loops"
    assert len(np.unique(src * 2000 + dst)) == len(src), "no duplicate edges"
    adjacency = sp.csr_matrix((np.ones(len(src)), (src, dst)), shape=(2000, 2000))
    assert np.array_equal(adjacency.indptr, indptr) and np.array_equal(adjacency.indices, indices)
    if undirected:
        assert abs(adjacency - adjacency.T).nnz == 0


@pytest.mark.parametrize("kind", ["powerlaw", "er"])
def test_the_file_has_n_times_d_edges_rounded_half_up_as_the_readme_says(kind, tmp_path):
    # counted by hand: N·D rounded half up; undirected, N·D / 2 undirected edges rounded half up, stored both
    # ways. Python's round (halves to even) gave 1,003 x 3 undirected 3,008 edges where 1,001 x 3 gave 3,004,
    # 10 x 0.5 undirected 4, 5 x 0.5 directed 2, and 10 x 0.35 (the float 3.4999999999999996) 3
    from pregel.cli import main
    from pregel.convert import to_networkx
    from pregel.graph_io import read_graph

    cases = [(1001, 3, True, 3004), (1003, 3, True, 3010), (1000, 3, True, 3000), (10, 0.5, True, 6),
             (1001, 3, False, 3003), (5, 0.5, False, 3), (10, 0.35, False, 4)]
    for nodes, degree, undirected, edges in cases:
        out = tmp_path / f"{nodes}-{degree}-{undirected}.h5"
        assert main(["generate", "--kind", kind, "--nodes", str(nodes), "--avg-degree", str(degree), "--seed", "0",
                     *(["--undirected"] if undirected else []), "--out", str(out)]) == 0
        graph = read_graph(out)
        assert graph.num_edges == edges and graph.directed != undirected, (nodes, degree, undirected, graph.num_edges)
        simple = to_networkx(graph)  # undirected: a Graph, whose edges are the stored pairs, once each
        assert simple.number_of_edges() == (edges // 2 if undirected else edges) and nx.number_of_selfloops(simple) == 0


def test_same_seed_same_graph_and_other_seed_other_graph():
    a = generate_graph("powerlaw", 500, 4, seed=7)
    b = generate_graph("powerlaw", 500, 4, seed=7)
    c = generate_graph("powerlaw", 500, 4, seed=8)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert not np.array_equal(a[1], c[1])


def test_powerlaw_has_hubs_and_exponent_controls_them():
    heavy = generate_graph("powerlaw", 100_000, 10, seed=0, exponent=2.1)
    light = generate_graph("powerlaw", 100_000, 10, seed=0, exponent=3.5)
    er = generate_graph("er", 100_000, 10, seed=0)
    max_in = [np.bincount(g[1]).max() for g in (heavy, light, er)]
    max_out = [np.diff(g[0]).max() for g in (heavy, light, er)]
    assert max_in[0] > max_in[1] > max_in[2] and max_out[0] > max_out[1] > max_out[2]
    assert max_in[0] > 5000 and max_out[0] > 5000, "heavy tail: a hub holds >0.5% of all edges"
    assert max_in[2] < 40, "uniform graphs have no hubs"


def test_grid_matches_networkx():
    indptr, indices = generate_graph("grid", 30, 0)  # rounds down to 5 x 5
    src, dst = _edges(indptr, indices)
    ours = nx.Graph(list(zip(src.tolist(), dst.tolist())))
    expected = nx.convert_node_labels_to_integers(nx.grid_2d_graph(5, 5), ordering="sorted")
    assert nx.utils.graphs_equal(ours, expected)
    assert len(indices) == 2 * expected.number_of_edges()


def test_edges_to_csr_sorts_and_carries_weights():
    src = np.array([2, 0, 2, 1, 0])
    dst = np.array([0, 2, 1, 1, 1])
    w = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    indptr, indices, weights = edges_to_csr(3, src, dst, w)
    assert indptr.tolist() == [0, 2, 3, 5]
    assert indices.tolist() == [1, 2, 1, 0, 1]
    assert weights.tolist() == [5.0, 2.0, 4.0, 1.0, 3.0]


def test_rejects_impossible_requests():
    with pytest.raises(ValueError, match="kind"):
        generate_graph("tree", 10, 2)
    with pytest.raises(ValueError, match="do not fit"):  # an InputError, a ValueError
        generate_graph("er", 5, 10)
    with pytest.raises(ValueError, match=r"25 distinct undirected edges \(`nodes` x `avg_degree` / 2\) .* at most 10"):
        generate_graph("er", 5, 10, undirected=True)
    with pytest.raises(ValueError, match="exponent"):
        generate_graph("powerlaw", 10, 2, exponent=1.0)


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@pytest.mark.parametrize("num_edges", [0, 1, 3000, (1 << 22) + 17])  # the last through the bucketed scatter
def test_edges_to_csr_equals_a_lexsort_by_source_then_destination(dtype, num_edges):
    # numpy's stable lexsort by (src, dst) as the oracle: parallel edges keep their input order (the
    # weights, all distinct, tell them apart); rows empty, short and long (a hub of 1 in 8 edges)
    num_nodes = 5000
    rng = np.random.default_rng(num_edges)
    src = rng.integers(0, num_nodes, num_edges).astype(dtype)
    src[::8] = 7
    dst = rng.integers(0, 60, num_edges).astype(dtype)  # many parallel edges
    weights = np.arange(num_edges, dtype=np.float32)
    order = np.lexsort((dst, src))
    indptr, indices, got_weights = edges_to_csr(num_nodes, src, dst, weights)
    assert np.array_equal(indptr, np.r_[0, np.cumsum(np.bincount(src, minlength=num_nodes))])
    assert indices.dtype == dtype and np.array_equal(indices, dst[order])
    assert np.array_equal(got_weights, weights[order])
    # in order already (a file written from a CSR): not moved, so the indices are the given array; and
    # with one pair of edges out of order, sorted
    in_order = dst[order]
    indptr_again, indices, got_weights = edges_to_csr(num_nodes, src[order], in_order, weights[order])
    assert np.array_equal(indptr_again, indptr) and np.array_equal(indices, dst[order])
    assert np.array_equal(got_weights, weights[order]) and (indices is in_order or num_edges == 0)
    if num_edges > 1:
        swapped = order.copy()
        swapped[[-1, -2]] = swapped[[-2, -1]]
        if (src[swapped[-1]], dst[swapped[-1]]) != (src[swapped[-2]], dst[swapped[-2]]):
            _, indices, got_weights = edges_to_csr(num_nodes, src[swapped], dst[swapped], weights[swapped])
            assert np.array_equal(indices, dst[order]) and np.array_equal(got_weights, weights[order])


def test_generate_refuses_a_vertex_count_whose_edge_keys_overflow():
    with pytest.raises(InputError, match="more than 3,037,000,499 vertices"):
        generate_graph("er", MAX_KEYED_NODES + 1, 0.001)


def _numpy_twin(kind, num_nodes, avg_degree, seed, undirected, exponent=2.5):
    """The generator as plain NumPy expressions (whole-array draws, np.sort, masks, np.delete) and SciPy's
    CSR: the graph each seed gave before the sampling moved into in-place kernels."""
    from pregel.generate import edge_count

    rng = np.random.default_rng(seed)
    if kind == "powerlaw":
        b = 1.0 / (exponent - 1.0)
        id_of_rank = rng.permutation(num_nodes)

        def sample(generator, size):
            u = generator.random(size)
            x = (1.0 + u * (float(num_nodes + 1) ** (1.0 - b) - 1.0)) ** (1.0 / (1.0 - b))
            return id_of_rank[np.minimum(x.astype(np.int64) - 1, num_nodes - 1)]
    else:
        def sample(generator, size):
            return generator.integers(0, num_nodes, size=size)
    num_edges = edge_count(num_nodes, avg_degree, undirected)
    keys = np.empty(0, dtype=np.int64)
    while keys.size < num_edges:
        draw = int((num_edges - keys.size) * 1.1) + 16
        src, dst = sample(rng, draw), sample(rng, draw)
        keep = src != dst
        src, dst = src[keep], dst[keep]
        if undirected:
            src, dst = np.minimum(src, dst), np.maximum(src, dst)
        keys = np.sort(np.concatenate([keys, src * num_nodes + dst]))
        keys = keys[np.concatenate([[True], keys[1:] != keys[:-1]])]
    keys = np.delete(keys, rng.choice(keys.size, size=keys.size - num_edges, replace=False))
    src, dst = keys // num_nodes, keys % num_nodes
    if undirected:
        src, dst = np.concatenate([src, dst]), np.concatenate([dst, src])
    csr = sp.csr_matrix((np.ones(len(src)), (src, dst)), shape=(num_nodes, num_nodes))
    csr.sort_indices()
    return csr.indptr, csr.indices


@pytest.mark.parametrize("undirected", [False, True], ids=["directed", "undirected"])
@pytest.mark.parametrize("kind", ["powerlaw", "er"])
def test_a_seed_gives_the_graph_of_the_numpy_twin(kind, undirected, monkeypatch):
    # dense enough that duplicates are redrawn and the surplus dropped; the power-law ids drawn in chunks
    # of 1,000 numbers (instead of 4M) must be the same numbers as one draw
    import pregel.generate as generate

    monkeypatch.setattr(generate, "SAMPLE_CHUNK", 1000)
    for seed, (num_nodes, degree) in enumerate([(60, 25), (3000, 7)]):
        indptr, indices = generate_graph(kind, num_nodes, degree, seed=seed, undirected=undirected)
        expected_indptr, expected_indices = _numpy_twin(kind, num_nodes, degree, seed, undirected)
        np.testing.assert_array_equal(indptr, expected_indptr)
        np.testing.assert_array_equal(indices, expected_indices)
        assert indptr.dtype == np.int64 and indices.dtype == np.int32  # the file's type: no copy to write


@pytest.mark.parametrize("with_labels", [False, True])
def test_features_and_weights_are_the_numbers_of_one_draw(with_labels, monkeypatch):
    # drawn a block at a time (blocks of 3 rows of 7 features here, 10 weights) to bound their float64
    # temporaries: the same numbers as the whole draw at once, as the files of earlier versions hold them
    import pregel.generate as generate

    monkeypatch.setattr(generate, "SAMPLE_CHUNK", 21)
    labels = np.random.default_rng(3).integers(0, 4, 50) if with_labels else None
    expected_rng, rng = np.random.default_rng(8), np.random.default_rng(8)
    expected = expected_rng.normal(0.0, 0.5, size=(50, 7)).astype(np.float32)
    if with_labels:
        expected += expected_rng.normal(0.0, 1.0, size=(4, 7)).astype(np.float32)[labels]
    np.testing.assert_array_equal(generate.random_features(labels, 50, 7, rng, noise=0.5), expected)
    expected_weights = (1.0 - expected_rng.random(95)).astype(np.float32)
    np.testing.assert_array_equal(generate.random_weights(95, rng), expected_weights)
