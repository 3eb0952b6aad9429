"""Full-graph GNN inference on the superstep engine: each GNN layer is one Gather-Apply-Scatter
superstep over the whole graph (no sampling), equal to PyTorch Geometric's full-graph forward.

* ``GNNModel(layers, activation="relu", keep_hidden=False)``: the vertex program (one superstep
  per layer; ``in_features``, ``out_features``, ``hidden_outputs(state)``).
* Layers, same semantics and weights as PyG: ``GCNLayer`` (``GCNConv``), ``SAGELayer``
  (``SAGEConv``, mean / max), ``GINLayer`` (``GINConv``), ``GATLayer`` (``GATConv``).
* ``save_model(path, layers, activation)`` / ``load_model(path)``: the model file, readable by
  ``torch.load(path, weights_only=True)`` (``load_model`` reads it without torch: inference runs
  in NumPy and the numba kernels); ``layer_from_pyg(module)`` converts one PyG conv.

Edge direction follows PyG: an edge u→v of the graph file is ``edge_index = [[u], [v]]``, a message
from u to v. Edge weights in the graph file are not used (PyG's ``conv(x, edge_index)``).
"""

from vertex_programs.gnn.base import ACTIVATIONS, GNNLayer
from vertex_programs.gnn.gat import GATLayer
from vertex_programs.gnn.gcn import GCNLayer
from vertex_programs.gnn.gin import GINLayer
from vertex_programs.gnn.model import GNNModel, layer_from_pyg
from vertex_programs.gnn.model_io import FORMAT, VERSION, load_model, save_model
from vertex_programs.gnn.sage import SAGELayer

__all__ = ["ACTIVATIONS", "FORMAT", "GATLayer", "GCNLayer", "GINLayer", "GNNLayer", "GNNModel",
           "SAGELayer", "VERSION", "layer_from_pyg", "load_model", "save_model"]
