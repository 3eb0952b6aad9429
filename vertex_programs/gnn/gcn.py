"""GCN (PyG ``GCNConv`` with its defaults) as one superstep."""

from vertex_programs.gnn.base import GNNLayer, RecordReader, add_scaled, module_tensor, rows32, transform_rows


class GCNLayer(GNNLayer):
    """x'_i = d_i^-1/2 · Σ_{j→i, j=i once} d_j^-1/2 · x_j W + b   (PyG ``GCNConv`` defaults).

    As PyG's ``gcn_norm`` with ``add_remaining_self_loops``: every vertex gets exactly one self
    loop of weight 1, whatever the file holds (existing self-loops, even several parallel ones,
    are replaced by it); d_i = in-degree of i without its self-loops, plus 1. Edge weights of
    the file are not used (``conv(x, edge_index)``). Each vertex sends d_j^-1/2 · x_j, transformed
    by W first unless that widens the message (then W is applied after the gather); the receiver
    corrects the gathered sum for its own self-loops (adds 1 − loops_i copies of its own message)
    and scales by d_i^-1/2. weight: [out, in]; bias: [out] or None.
    """

    kind = "gcn"
    combiner = "sum"

    def __init__(self, weight, bias):
        self.weight, self.bias = weight, bias
        self.out_features, self.in_features = weight.shape
        self.transform_first = self.out_features <= self.in_features

    def message(self, ctx, x):
        xp, loops = ctx.xp, ctx.self_loops
        norm = (rows32(xp, ctx.in_degree - loops + 1) ** -0.5)[:, None]
        if self.transform_first:
            sent = x @ self.weight.T
            sent *= norm
        else:
            sent = x * norm
        self_count = rows32(xp, 1 - loops)[:, None]
        return sent, (sent, norm, self_count)

    def apply(self, ctx, x, cache, gathered):
        sent, norm, self_count = cache
        out = add_scaled(rows32(ctx.xp, gathered), sent, self_count)  # the gathered rows, in place
        out *= norm
        if not self.transform_first:
            out = transform_rows(out, self.weight)
        if self.bias is not None:
            out += self.bias
        return out

    def record(self):
        weights = {"weight": self.weight}
        if self.bias is not None:
            weights["bias"] = self.bias
        return {"kind": self.kind, "bias": self.bias is not None, "weights": weights}

    @classmethod
    def from_record(cls, reader: RecordReader):
        weight = reader.tensor("weight", (None, None))
        bias = reader.tensor("bias", (weight.shape[0],)) if reader.option("bias", bool) else None
        reader.finish()
        return cls(weight, bias)

    @classmethod
    def from_pyg(cls, module):
        if module.improved or not module.add_self_loops or not module.normalize:
            raise ValueError("GCNConv: only improved=False, add_self_loops=True, normalize=True "
                             "(the defaults) are supported")
        if module.lin.bias is not None:
            raise ValueError("GCNConv: a bias inside lin is not supported")
        bias = None if module.bias is None else module_tensor(module, "bias", "GCNConv")
        return cls(module_tensor(module.lin, "weight", "GCNConv"), bias)
