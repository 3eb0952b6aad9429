"""GraphSAGE (PyG ``SAGEConv``) as one superstep."""

from vertex_programs.gnn.base import GNNLayer, RecordReader, add_product, module_tensor, rows32, transform_rows


class SAGELayer(GNNLayer):
    """x'_i = W_l · aggr_{j→i} x_j + b_l + W_r · x_i   (PyG ``SAGEConv``; aggr 'mean' or 'max').

    Every in-edge counts, self-loops and parallel edges included; a vertex without in-edges
    aggregates 0 (as PyG). For 'mean', W_l is applied before the gather when that narrows the
    message (mean(x_j) W_l = mean(x_j W_l)); 'max' sends x_j itself. Optional as in PyG: no root
    term (``root_weight=False``), no bias, L2-normalised output (``normalize=True``).
    weight_l: [out, in], bias_l: [out] or None, weight_r: [out, in] or None (float32 arrays).
    """

    kind = "sage"

    def __init__(self, weight_l, bias_l, weight_r, aggr: str = "mean",
                 normalize: bool = False):
        if aggr not in ("mean", "max"):
            raise ValueError(f"SAGE aggr must be 'mean' or 'max', got {aggr!r}")
        self.weight_l, self.bias_l, self.weight_r = weight_l, bias_l, weight_r
        self.aggr, self.normalize = aggr, normalize
        self.out_features, self.in_features = weight_l.shape
        self.combiner = aggr
        self.transform_first = aggr == "mean" and self.out_features < self.in_features

    def message(self, ctx, x):
        sent = x @ self.weight_l.T if self.transform_first else x
        return sent, None

    def apply(self, ctx, x, cache, gathered):
        out = rows32(ctx.xp, gathered)  # the gathered rows, this layer's own: written in place
        if self.aggr == "max":  # the engine's identity for 'max' is -inf; PyG gives 0
            out[~ctx.received] = 0
        if not self.transform_first:
            out = transform_rows(out, self.weight_l)
        if self.bias_l is not None:
            out += self.bias_l
        if self.weight_r is not None:
            add_product(out, x, self.weight_r)
        if self.normalize:  # F.normalize: x / max(|x|_2, 1e-12)
            out /= ((out * out).sum(1) ** 0.5).clip(min=1e-12)[:, None]
        return out

    def record(self):
        weights = {"lin_l.weight": self.weight_l}
        if self.bias_l is not None:
            weights["lin_l.bias"] = self.bias_l
        if self.weight_r is not None:
            weights["lin_r.weight"] = self.weight_r
        return {"kind": self.kind, "aggr": self.aggr, "normalize": self.normalize,
                "bias": self.bias_l is not None, "root_weight": self.weight_r is not None,
                "weights": weights}

    @classmethod
    def from_record(cls, reader: RecordReader):
        aggr = reader.option("aggr", str, ("mean", "max"))
        normalize = reader.option("normalize", bool)
        weight_l = reader.tensor("lin_l.weight", (None, None))
        out_features, in_features = weight_l.shape
        bias = reader.tensor("lin_l.bias", (out_features,)) if reader.option("bias", bool) else None
        weight_r = (reader.tensor("lin_r.weight", (out_features, in_features))
                    if reader.option("root_weight", bool) else None)
        reader.finish()
        return cls(weight_l, bias, weight_r, aggr, normalize)

    @classmethod
    def from_pyg(cls, module):
        aggr = module.aggr
        if aggr not in ("mean", "max"):
            raise ValueError(f"SAGEConv: aggr={aggr!r} is not supported (use 'mean' or 'max')")
        if module.project:
            raise ValueError("SAGEConv: project=True is not supported")
        in_channels = module.in_channels
        if isinstance(in_channels, (tuple, list)) and len(set(in_channels)) != 1:
            raise ValueError(f"SAGEConv: bipartite in_channels={in_channels} are not supported")
        weight_l = module_tensor(module.lin_l, "weight", "SAGEConv")
        bias = None if module.lin_l.bias is None else module_tensor(module.lin_l, "bias", "SAGEConv")
        weight_r = module_tensor(module.lin_r, "weight", "SAGEConv") if module.root_weight else None
        return cls(weight_l, bias, weight_r, aggr, bool(module.normalize))

