"""GNN layers as vertex programs on one process, against PyG's own full-graph forward pass.

Every layer kind and option we support, on a graph with isolated vertices, (parallel) self-loops,
a doubled edge and a hub, with the hub strategies off and with a threshold low enough that most
vertices are hubs (partial gather and shadow nodes on). The MPI runs at P = 1, 2, 3 are in
tests/test_gnn_distributed.py.
"""

import numpy as np
import pytest
import torch
from gnn_cases import MODELS, build_model, mixed_graph, pyg_forward, randomize
from torch import nn
from torch_geometric.nn import GATConv, GCNConv, GINConv, SAGEConv

from pregel.comm import Comm
from pregel.dgraph import HubOptions, load_graph
from pregel.engine import run
from pregel.errors import InputError
from pregel.graph_io import GraphData
from vertex_programs.gnn import GATLayer, GCNLayer, GINLayer, GNNModel, SAGELayer, base, layer_from_pyg

TOLERANCE = 1e-4
HUBS = {"off": HubOptions(partial_gather=False, shadow_nodes=False), "hubs": HubOptions(threshold=3)}

# single layers with non-default options, beyond the models in gnn_cases.MODELS
OPTIONS = {
    "gcn_nobias_narrow": (lambda: [GCNConv(6, 2, bias=False)], "relu"),
    "sage_normalize_nobias": (lambda: [SAGEConv(6, 4, normalize=True, bias=False)], "relu"),
    "sage_mean_noroot": (lambda: [SAGEConv(6, 3, root_weight=False)], "relu"),
    "gin_single_linear": (lambda: [GINConv(nn.Linear(6, 4), eps=-0.5)], "relu"),
    "gin_bn_first": (lambda: [GINConv(nn.Sequential(nn.BatchNorm1d(6), nn.Sigmoid(), nn.Linear(6, 2)))], "relu"),
    "gat_slope_residual_nobias": (lambda: [GATConv(6, 2, heads=3, negative_slope=0.1, residual=True,
                                                   bias=False)], "relu"),
    "gat_no_self_loops": (lambda: [GATConv(6, 3, heads=2, concat=False, add_self_loops=False)], "relu"),
    "tanh_between": (lambda: [SAGEConv(6, 4), GATConv(4, 2, heads=2), GCNConv(4, 2)], "tanh"),
    # equal widths: the dense transforms after the gather run in place (``transform_rows``)
    "sage_square": (lambda: [SAGEConv(6, 6), SAGEConv(6, 6, aggr="max")], "relu"),
    "gin_square": (lambda: [GINConv(nn.Sequential(nn.Linear(6, 6), nn.ReLU(), nn.Linear(6, 6)))], "relu"),
}


@pytest.fixture(scope="module")
def graph():
    return mixed_graph()


@pytest.fixture(scope="module")
def loaded(graph):
    comm = Comm()
    return {name: load_graph(comm, graph, hubs=hubs) for name, hubs in HUBS.items()}


def _build(name):
    if name in MODELS:
        return build_model(name)
    make, activation = OPTIONS[name]
    torch.manual_seed(1)
    return [randomize(layer) for layer in make()], activation


@pytest.mark.parametrize("hubs", sorted(HUBS))
@pytest.mark.parametrize("name", sorted(MODELS) + sorted(OPTIONS))
def test_layer_matches_pyg(graph, loaded, name, hubs):
    layers, activation = _build(name)
    expected, _ = pyg_forward(layers, activation, graph)
    model = GNNModel(layers, activation)
    result = run(loaded[hubs], model)
    assert result.values.dtype == np.float32 and result.values.shape == expected.shape
    assert result.supersteps == len(layers)
    assert np.abs(result.values - expected).max() <= TOLERANCE


def test_hub_layout_really_splits_in_edges(loaded):
    """The 'hubs' layout gathers most in-edges partially on the sender side (else the hub tests
    above would not exercise partial gather)."""
    g = loaded["hubs"]
    assert len(g.part_src) > len(g.in_indices)
    assert len(loaded["off"].part_src) == 0


def test_hidden_outputs_match_pyg(graph, loaded):
    layers, activation = build_model("mixed")
    expected, hidden = pyg_forward(layers, activation, graph)
    model = GNNModel(layers, activation, keep_hidden=True)
    result = run(loaded["hubs"], model)
    outputs = model.hidden_outputs(result.state)
    assert [h.shape for h in outputs] == [(graph.num_nodes, 8), (graph.num_nodes, 5)]
    for ours, theirs in zip(outputs, hidden):
        assert ours.dtype == np.float32 and np.abs(ours - theirs).max() <= TOLERANCE
    assert np.abs(result.values - expected).max() <= TOLERANCE
    assert GNNModel(layers, activation).hidden_outputs(run(loaded["off"], GNNModel(layers)).state) == []


def test_released_features_are_forgotten_by_the_graph_and_the_values_are_pyg_s(graph):
    layers, activation = build_model("mixed")
    expected, _ = pyg_forward(layers, activation, graph)
    loaded = load_graph(Comm(), graph, hubs=HUBS["hubs"])
    kept = run(loaded, GNNModel(layers, activation)).values  # by default the graph keeps its features
    assert loaded.features is not None and np.abs(kept - expected).max() <= TOLERANCE
    released = run(loaded, GNNModel(layers, activation, release_features=True)).values
    assert loaded.features is None and np.abs(released - expected).max() <= TOLERANCE


@pytest.mark.parametrize("out_width", [5, 7])  # in place (a square weight) and into a new array
def test_transform_rows_in_blocks_equals_a_matmul(monkeypatch, out_width):
    monkeypatch.setattr(base, "BLOCK_ROWS", 4)
    rng = np.random.default_rng(2)
    values = rng.standard_normal((11, 5)).astype(np.float32)
    weight = rng.standard_normal((out_width, 5)).astype(np.float32)
    expected = values.astype(np.float64) @ weight.T.astype(np.float64)
    got = base.transform_rows(values.copy(), weight)
    assert got.shape == (11, out_width)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_model_runs_twice(graph, loaded):
    """A model instance resets its layer index in init, so it can run again."""
    layers, activation = build_model("mixed")
    model = GNNModel(layers, activation)
    first = run(loaded["off"], model).values
    second = run(loaded["hubs"], model).values
    np.testing.assert_allclose(first, second, atol=1e-5)


@pytest.mark.parametrize("name", ["gat_concat", "gat_slope_residual_nobias"])
def test_gat_message_in_blocks_matches_pyg(graph, loaded, name, monkeypatch):
    """GAT's message written a few rows at a time (blocks smaller than the graph) gives PyG's output."""
    import vertex_programs.gnn.gat as gat

    monkeypatch.setattr(gat, "MESSAGE_ROWS", 7)
    layers, activation = _build(name)
    expected, _ = pyg_forward(layers, activation, graph)
    assert graph.num_nodes > 7
    assert np.abs(run(loaded["hubs"], GNNModel(layers, activation)).values - expected).max() <= TOLERANCE


def test_combiner_follows_the_layer(loaded):
    """The engine reads combiner / per_edge before message: they must be the current layer's."""
    layers, _ = build_model("mixed")  # GAT (softmax, per edge), SAGE max, GCN sum
    seen = []

    class Recording(GNNModel):
        def message(self, ctx, state):
            seen.append((ctx.superstep, self.combiner, self.per_edge))
            return super().message(ctx, state)

    run(loaded["off"], Recording(layers))
    assert seen == [(0, "softmax", True), (1, "max", False), (2, "sum", False)]


def test_properties():
    layers, _ = build_model("mixed")
    model = GNNModel(layers)
    assert (model.in_features, model.out_features, model.widths, model.max_supersteps) == (6, 3, [8, 5, 3], 3)
    kinds = [type(layer) for layer in GNNModel(build_model("gin")[0] + [SAGEConv(3, 2), GATConv(2, 2),
                                                                         GCNConv(2, 1)]).layers]
    assert kinds == [GINLayer, GINLayer, SAGELayer, GATLayer, GCNLayer]


def test_graph_without_features_is_an_input_error():
    graph = mixed_graph()
    bare = GraphData(graph.indptr, graph.indices)
    with pytest.raises(InputError, match="no /nodes/features"):
        run(load_graph(Comm(), bare), GNNModel([SAGEConv(6, 2)]))


def test_feature_width_mismatch_is_an_input_error(loaded):
    with pytest.raises(InputError, match="have 6 columns but the model's first layer expects 5"):
        run(loaded["off"], GNNModel([SAGEConv(5, 2)]))


@pytest.mark.parametrize("layers, message", [
    ([SAGEConv(6, 4), GCNConv(5, 2)], "layer 0 \\(sage\\) outputs 4 features but layer 1 \\(gcn\\) expects 5"),
    ([], "at least one layer"),
])
def test_bad_chains_are_rejected(layers, message):
    with pytest.raises(ValueError, match=message):
        GNNModel(layers)


def test_unknown_activation_is_rejected():
    with pytest.raises(ValueError, match="activation must be one of"):
        GNNModel([SAGEConv(6, 4)], activation="swish")


@pytest.mark.parametrize("module, message", [
    (SAGEConv(6, 4, aggr="sum"), "aggr='sum' is not supported"),
    (SAGEConv(6, 4, project=True), "project=True"),
    (SAGEConv((6, 5), 4), "bipartite"),
    (SAGEConv(-1, 4), "not initialised"),
    (GCNConv(6, 4, improved=True), "only improved=False"),
    (GCNConv(6, 4, add_self_loops=False), "only improved=False"),
    (GATConv(6, 4, edge_dim=3), "edge_dim"),
    (GATConv((6, 5), 4), "bipartite"),
    (GINConv(nn.Sequential(nn.Linear(6, 4), nn.GELU())), "unsupported module GELU"),
    (GINConv(nn.Sequential(nn.Linear(6, 4), nn.Linear(5, 3))), "expects 5 features but gets 4"),
    (GINConv(nn.ReLU()), "at least one Linear"),
    (nn.Linear(6, 4), "unsupported layer Linear"),
])
def test_unsupported_pyg_modules_are_rejected(module, message):
    with pytest.raises(ValueError, match=message):
        layer_from_pyg(module)


#: torch's definitions of the activations a model file may name (the oracle of the NumPy ones)
TORCH_ACTIVATIONS = {"relu": torch.relu, "elu": torch.nn.functional.elu, "leaky_relu": torch.nn.functional.leaky_relu,
                     "gelu": torch.nn.functional.gelu, "tanh": torch.tanh, "sigmoid": torch.sigmoid,
                     "none": lambda x: x}


@pytest.mark.parametrize("name", sorted(TORCH_ACTIVATIONS))
def test_activations_equal_torch(name):
    """Every activation between layers, in NumPy and in place, equals torch's function (in float64,
    rounded: torch's own float32 gelu is 5.6e-7 off in the negative tail), from -100 (sigmoid's exp
    overflows) to 100, zero included."""
    from vertex_programs.gnn.base import ACTIVATIONS, activate

    assert set(ACTIVATIONS) == set(TORCH_ACTIVATIONS)
    x = np.concatenate([np.linspace(-100, 100, 2001), np.random.default_rng(0).normal(size=999)]).astype(np.float32)
    x = x.reshape(-1, 3)
    expected = TORCH_ACTIVATIONS[name](torch.from_numpy(x).double()).numpy()
    rows = x.copy()
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        got = activate(name, rows)
    assert got.dtype == np.float32 and np.shares_memory(got, rows)
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=4e-7)
