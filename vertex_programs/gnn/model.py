"""``GNNModel``: a stack of GNN layers run as a vertex program, one superstep per layer."""

import numpy as np

from pregel.arrays import as_numpy
from pregel.program import VertexProgram
from vertex_programs.gnn.base import ACTIVATIONS, GNNLayer, activate, rows32
from vertex_programs.gnn.gat import GATLayer
from vertex_programs.gnn.gcn import GCNLayer
from vertex_programs.gnn.gin import GINLayer
from vertex_programs.gnn.sage import SAGELayer

PYG_CLASSES = {"GCNConv": GCNLayer, "SAGEConv": SAGELayer, "GINConv": GINLayer, "GATConv": GATLayer}


def layer_from_pyg(module) -> GNNLayer:
    """Our layer for a PyG conv module (GCNConv, SAGEConv, GINConv, GATConv), same weights."""
    for cls in type(module).__mro__:
        if cls.__name__ in PYG_CLASSES and cls.__module__.startswith("torch_geometric"):
            return PYG_CLASSES[cls.__name__].from_pyg(module)
    raise ValueError(f"unsupported layer {type(module).__name__}: expected one of "
                     f"{sorted(PYG_CLASSES)} (PyG) or a vertex_programs.gnn layer")


class GNNModel(VertexProgram):
    """Full-graph inference of a GNN: superstep l runs layer l over every vertex, with
    ``activation`` between layers (none after the last), from ``/nodes/features``.

    ``layers``: ``GNNLayer`` objects (``vertex_programs.gnn``'s layer classes) or PyG conv modules
    of the supported kinds (converted with ``layer_from_pyg``). The output is float32
    [n, out_features]; the layer's dense transforms run in float32 NumPy on the owning rank (in
    torch on its GPU in a ``device='cuda'`` run, where ``init`` moves the weights to the device).
    With ``keep_hidden``, the state also keeps each hidden layer's output (after the activation)
    for ``hidden_outputs``. With ``release_features``, ``init`` has the run forget the graph's features
    (``Context.forget_features``), so the state's input rows are their only holder and are freed once
    the first layer's output replaces them (2.6 GB at 10M vertices of 64 floats): for a graph loaded
    for this run alone, as ``infer`` does; a graph that other runs read afterwards keeps them.

    The engine reads ``combiner`` and ``per_edge`` when each superstep starts, before calling
    ``message``, so they follow the layer index kept here: reset by ``init``, advanced at the end
    of ``apply`` (``init`` starts at ``ctx.superstep``, so a run restored from a checkpoint
    continues at its layer). One instance runs one job at a time.
    """

    def __init__(self, layers, activation: str = "relu", keep_hidden: bool = False,
                 release_features: bool = False):
        self.layers = [layer if isinstance(layer, GNNLayer) else layer_from_pyg(layer) for layer in layers]
        if not self.layers:
            raise ValueError("a GNN model needs at least one layer")
        problem = chain_problem(self.layers)
        if problem:
            raise ValueError(problem)
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {activation!r}")
        self.activation = activation
        self.keep_hidden = keep_hidden
        self.release_features = release_features
        self.max_supersteps = len(self.layers)
        self._layer = 0
        self._cache = None

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    @property
    def in_features(self) -> int:
        """Width of the input features the model expects."""
        return self.layers[0].in_features

    @property
    def out_features(self) -> int:
        """Width of the model's output."""
        return self.layers[-1].out_features

    @property
    def widths(self) -> list[int]:
        """Output width of every layer, [num_layers]."""
        return [layer.out_features for layer in self.layers]

    @property
    def combiner(self):
        """The combiner of the layer being run."""
        return self.layers[self._layer].combiner

    @property
    def per_edge(self) -> bool:
        return self.layers[self._layer].per_edge

    def check_input(self, ctx):
        if ctx.features is None:
            return "the graph has no /nodes/features: GNN inference needs input features"
        width = ctx.features.shape[1]
        if width != self.in_features:
            return (f"the graph's /nodes/features have {width} columns but the model's first layer "
                    f"expects {self.in_features}")
        return None

    def combiners(self) -> dict:
        return {f"layer {i} ({layer.kind})": layer.combiner for i, layer in enumerate(self.layers)}

    def init(self, ctx):
        """The input features as float32 [n, in]; puts the weights in the run's array namespace."""
        self._layer, self._cache = ctx.superstep, None
        self.layers = [layer.on(ctx.xp) for layer in self.layers]
        x = rows32(ctx.xp, ctx.features)
        if self.release_features:
            ctx.forget_features()
        return {"x": x, "hidden": []}

    def message(self, ctx, state):
        sent, self._cache = self.layers[self._layer].message(ctx, state["x"])
        return sent

    def destination_values(self, ctx, state):
        return self.layers[self._layer].destination_values(ctx, self._cache)

    def edge_message(self, ctx, src_values, dst_values, weights):
        return self.layers[self._layer].edge_message(ctx, src_values, dst_values)

    def fused_softmax(self, ctx, ext, dst_values, indptr, indices, ext_ids, row_ids, ghosts=None):
        return self.layers[self._layer].fused_softmax(ext, dst_values, indptr, indices, ext_ids, row_ids, ghosts)

    def apply(self, ctx, state, gathered):
        x = self.layers[self._layer].apply(ctx, state["x"], self._cache, gathered)
        last = self._layer == len(self.layers) - 1
        hidden = state["hidden"]
        if not last:
            x = activate(self.activation, x)  # x: the rows apply has just made
            if self.keep_hidden:
                hidden = hidden + [x]
        self._layer, self._cache = self._layer + 1, None
        return {"x": x, "hidden": hidden}, not last

    def output(self, ctx, state) -> np.ndarray:
        """float32 [n, out_features]: the last layer's output of the owned vertices."""
        return as_numpy(state["x"])

    def hidden_outputs(self, state) -> list[np.ndarray]:
        """With ``keep_hidden``: the output of every layer but the last, after the activation, as
        float32 [n, width_l] per layer (``RunResult.state`` holds the state); [] otherwise."""
        return [as_numpy(h) for h in state["hidden"]]


def chain_problem(layers) -> str | None:
    """The first pair of consecutive layers whose widths do not chain, as a message (or None)."""
    for i in range(len(layers) - 1):
        if layers[i].out_features != layers[i + 1].in_features:
            return (f"layer {i} ({layers[i].kind}) outputs {layers[i].out_features} features but "
                    f"layer {i + 1} ({layers[i + 1].kind}) expects {layers[i + 1].in_features}")
    return None
