"""Test graphs, PyG models and the PyG oracle shared by the GNN tests (single-process and MPI).

The oracle is PyG's own full-graph forward pass: ``conv(x, edge_index)`` layer after layer with
the activation between layers, on one process, with ``edge_index = [[u], [v]]`` for every edge
u → v of the graph file (edge weights unused).
"""

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch_geometric.nn import GATConv, GCNConv, GINConv, SAGEConv

from pregel.generate import edges_to_csr, generate_graph
from pregel.graph_io import GraphData

NUM_FEATURES = 6
ORACLE_ACTIVATIONS = {"relu": torch.relu, "elu": F.elu, "tanh": torch.tanh}


def mixed_graph(seed: int = 0) -> GraphData:
    """160 vertices: 150..159 isolated, 149 with out-edges only, hub 7 (120 in-edges, 110
    out-edges), one self-loop on 3 and 7, two parallel self-loops on 11, a doubled edge 20 → 21,
    random edges among 0..148, and random edge weights (which GNN layers ignore)."""
    rng = np.random.default_rng(seed)
    n = 160
    src = [rng.integers(0, 149, 400)]
    dst = [rng.integers(0, 149, 400)]
    others = np.setdiff1d(np.arange(149), [7])
    hub_in, hub_out = rng.choice(others, 120, replace=False), rng.choice(others, 110, replace=False)
    src += [hub_in, np.full(110, 7), [3, 7, 11, 11, 20, 20], [149] * 5]
    dst += [np.full(120, 7), hub_out, [3, 7, 11, 11, 21, 21], rng.integers(0, 149, 5)]
    src, dst = np.concatenate(src), np.concatenate(dst)
    keep = (src != dst) | np.isin(src, [3, 7, 11])  # self-loops only where listed
    weights = rng.uniform(0.1, 2.0, int(keep.sum())).astype(np.float32)
    indptr, indices, weights = edges_to_csr(n, src[keep], dst[keep], weights)
    return GraphData(indptr, indices, weights, _features(n, rng))


def powerlaw_graph(seed: int = 1) -> GraphData:
    """300 vertices with power-law degrees (a few heavy hubs), no weights."""
    indptr, indices = generate_graph("powerlaw", 300, 4, seed=seed)
    return GraphData(indptr, indices, None, _features(300, np.random.default_rng(seed)))


def tiny_graph(seed: int = 2) -> GraphData:
    """2 vertices, one edge 0 → 1: at P = 3 one rank owns nothing and no rank has two in-edges."""
    return GraphData(np.array([0, 1, 1]), np.array([1]), None, _features(2, np.random.default_rng(seed)))


def edgeless_graph(seed: int = 3) -> GraphData:
    """5 isolated vertices: no rank has any edge."""
    return GraphData(np.zeros(6, np.int64), np.zeros(0, np.int64), None,
                     _features(5, np.random.default_rng(seed)))


def _features(n, rng):
    return rng.normal(size=(n, NUM_FEATURES)).astype(np.float32)


def _gin_mlp_a():
    return nn.Sequential(nn.Linear(6, 9), nn.ReLU(), nn.Linear(9, 9))


def _gin_mlp_b():
    return nn.Sequential(nn.Linear(9, 3), nn.BatchNorm1d(3), nn.Tanh(), nn.Dropout(0.5), nn.Linear(3, 3))


# name -> (layers factory, activation). Widths grow and shrink, so that both orders
# (transform before / after the gather) run.
MODELS = {
    "gcn": (lambda: [GCNConv(6, 9), GCNConv(9, 3)], "relu"),
    "sage_mean": (lambda: [SAGEConv(6, 9), SAGEConv(9, 3)], "relu"),
    "sage_max": (lambda: [SAGEConv(6, 5, aggr="max"), SAGEConv(5, 3, aggr="max", root_weight=False)],
                 "relu"),
    "gin": (lambda: [GINConv(_gin_mlp_a(), eps=0.3), GINConv(_gin_mlp_b(), train_eps=True)], "relu"),
    "gat_concat": (lambda: [GATConv(6, 3, heads=3)], "relu"),
    "gat_mean": (lambda: [GATConv(6, 4, heads=2, concat=False)], "relu"),
    "mixed": (lambda: [GATConv(6, 4, heads=2), SAGEConv(8, 5, aggr="max"), GCNConv(5, 3)], "elu"),
}


def build_model(name: str, seed: int = 0):
    """(PyG layers in eval mode with random, non-trivial weights and buffers, activation)."""
    make, activation = MODELS[name]
    torch.manual_seed(seed)
    layers = make()
    for layer in layers:
        randomize(layer)
    return layers, activation


def randomize(module):
    """Uniform(-1, 1) parameters (biases and attention included), random BatchNorm statistics,
    eval mode (a trainable GIN eps is a parameter, so it is random too)."""
    with torch.no_grad():
        for p in module.parameters():
            p.uniform_(-1.0, 1.0)
        for m in module.modules():
            if isinstance(m, nn.BatchNorm1d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
    return module.eval()


def edge_index(graph: GraphData) -> torch.Tensor:
    """[2, E] PyG edge_index of the graph's CSR (u → v is [[u], [v]])."""
    src = np.repeat(np.arange(graph.num_nodes), np.diff(graph.indptr))
    return torch.from_numpy(np.stack([src, np.asarray(graph.indices, np.int64)]))


def pyg_forward(layers, activation: str, graph: GraphData):
    """(output [N, C], hidden outputs after the activation, one per layer but the last) of PyG."""
    x, ei, hidden = torch.from_numpy(graph.features), edge_index(graph), []
    with torch.no_grad():
        for i, layer in enumerate(layers):
            x = layer(x, ei)
            if i < len(layers) - 1:
                x = ORACLE_ACTIVATIONS[activation](x)
                hidden.append(x.numpy())
    return x.numpy(), hidden
