"""GAT (PyG ``GATConv``) as one superstep on the engine's softmax combiner."""

import numpy as np

from kernels.attention_gather import attention_gather
from vertex_programs.gnn.base import GNNLayer, RecordReader, add_product, module_tensor


#: rows of x transformed at a time by ``GATLayer.message`` (bounds its temporaries to a few MB)
MESSAGE_ROWS = 1 << 16


class GATLayer(GNNLayer):
    """Per head h: x'_i = Σ_{j→i} α_ij · (x_j W)_h, then concat (or mean) over heads, + bias.

    α_ij = softmax over the in-edges of i of leaky_relu(a_src · (x_j W)_h + a_dst · (x_i W)_h)
    (PyG ``GATConv``; negative slope as saved, 0.2 by default). With ``add_self_loops`` (PyG's
    default) the file's self-loops (parallel ones too) are dropped and one self loop per vertex is
    added (PyG's remove_self_loops + add_self_loops); without it they count as ordinary edges.
    Each vertex sends [x W | α_src] (H·C + H floats); the receiver gathers its in-edges' scores and
    weighted rows in one pass (``kernels.attention_gather``: no per-edge arrays); partial softmax
    sums travel for split hubs (``SoftmaxParts``, per edge through ``edge_message``).
    Optional as in PyG: ``residual`` (x W_res added), no bias.
    weight: [H·C, in]; att_src, att_dst: [H, C]; bias: [H·C] (concat) or [C] or None;
    res_weight: [H·C or C, in] or None.
    """

    kind = "gat"
    combiner = "softmax"
    per_edge = True

    def __init__(self, weight, att_src, att_dst, bias=None, concat: bool = True,
                 negative_slope: float = 0.2, add_self_loops: bool = True, res_weight=None):
        self.heads, self.channels = att_src.shape
        self.weight, self.att_src, self.att_dst = weight, att_src, att_dst
        self.bias, self.res_weight = bias, res_weight
        self.concat, self.negative_slope = bool(concat), float(negative_slope)
        self.add_self_loops = bool(add_self_loops)
        self.in_features = weight.shape[1]
        self.out_features = self.heads * self.channels if self.concat else self.channels
        if weight.shape[0] != self.heads * self.channels or att_dst.shape != att_src.shape:
            raise ValueError(f"GAT: weight {tuple(weight.shape)} and attention {tuple(att_src.shape)} "
                             f"/ {tuple(att_dst.shape)} do not match")

    def message(self, ctx, x):
        """Sent rows [n, H·C + H] = [x W | α_src], written block of rows by block (no [n, H, C]
        temporaries); the cache keeps x W and α_src as views of them, and α_dst [n, H]."""
        n, heads, channels = len(x), self.heads, self.channels
        split = heads * channels
        sent = np.empty((n, split + heads), dtype=np.float32)
        alpha_dst = np.empty((n, heads), dtype=np.float32)
        for start in range(0, n, MESSAGE_ROWS):
            stop = min(start + MESSAGE_ROWS, n)
            h = (x[start:stop] @ self.weight.T).reshape(stop - start, heads, channels)
            sent[start:stop, :split] = h.reshape(stop - start, split)
            sent[start:stop, split:] = (h * self.att_src).sum(-1)
            alpha_dst[start:stop] = (h * self.att_dst).sum(-1)
        return sent, (sent[:, :split].reshape(n, heads, channels), sent[:, split:], alpha_dst)

    def destination_values(self, ctx, cache):
        return cache[2]

    def edge_message(self, ctx, src_values, dst_values):
        split = self.heads * self.channels
        logits = self._leaky(src_values[:, split:] + dst_values)
        if self.add_self_loops:
            logits[ctx.edge_src == ctx.edge_dst] = -np.inf
        return logits, src_values[:, :split].reshape(-1, self.heads, self.channels)

    def fused_softmax(self, ext, dst_values, indptr, indices, ext_ids, row_ids, ghosts=None):
        """The gather of ``edge_message`` + softmax in one kernel pass (``kernels.attention_gather``)."""
        return attention_gather(indptr, indices, ext, dst_values, self.heads, self.channels,
                                self.negative_slope, ext_ids, row_ids, self.add_self_loops, ghosts=ghosts)

    def apply(self, ctx, x, cache, parts):
        h, alpha_src, alpha_dst = cache
        if self.add_self_loops:
            parts = parts.with_self(self._leaky(alpha_src + alpha_dst), h)
        out = np.asarray(parts.normalized(), dtype=np.float32)  # this layer's own rows: added to in place
        out = out.reshape(len(x), self.heads * self.channels) if self.concat else out.mean(axis=1)
        if self.res_weight is not None:
            add_product(out, x, self.res_weight)
        if self.bias is not None:
            out += self.bias
        return out

    def _leaky(self, values: np.ndarray) -> np.ndarray:
        return np.where(values > 0, values, values * np.float32(self.negative_slope))

    def record(self):
        weights = {"lin.weight": self.weight, "att_src": self.att_src, "att_dst": self.att_dst}
        if self.bias is not None:
            weights["bias"] = self.bias
        if self.res_weight is not None:
            weights["res.weight"] = self.res_weight
        return {"kind": self.kind, "heads": self.heads, "out_channels": self.channels,
                "concat": self.concat, "negative_slope": self.negative_slope,
                "add_self_loops": self.add_self_loops, "bias": self.bias is not None,
                "residual": self.res_weight is not None, "weights": weights}

    @classmethod
    def from_record(cls, reader: RecordReader):
        heads, channels = reader.option("heads", int), reader.option("out_channels", int)
        if heads < 1 or channels < 1:
            raise reader.error(f"heads and out_channels must be positive, got {heads}, {channels}")
        concat = reader.option("concat", bool)
        slope = float(reader.option("negative_slope", (float, int)))
        self_loops = reader.option("add_self_loops", bool)
        weight = reader.tensor("lin.weight", (heads * channels, None))
        att_src = reader.tensor("att_src", (heads, channels))
        att_dst = reader.tensor("att_dst", (heads, channels))
        out = heads * channels if concat else channels
        bias = reader.tensor("bias", (out,)) if reader.option("bias", bool) else None
        res = reader.tensor("res.weight", (out, weight.shape[1])) if reader.option("residual", bool) else None
        reader.finish()
        return cls(weight, att_src, att_dst, bias, concat, slope, self_loops, res)

    @classmethod
    def from_pyg(cls, module):
        if module.lin is None:
            raise ValueError("GATConv: bipartite (tuple) in_channels are not supported")
        if module.edge_dim is not None:
            raise ValueError("GATConv: edge features (edge_dim) are not supported")
        heads, channels = module.heads, module.out_channels
        bias = None if module.bias is None else module_tensor(module, "bias", "GATConv")
        res = None if module.res is None else module_tensor(module.res, "weight", "GATConv")
        return cls(module_tensor(module.lin, "weight", "GATConv"),
                   module_tensor(module, "att_src", "GATConv").reshape(heads, channels),
                   module_tensor(module, "att_dst", "GATConv").reshape(heads, channels),
                   bias, module.concat, module.negative_slope, module.add_self_loops, res)
