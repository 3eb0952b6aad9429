"""GIN (PyG ``GINConv``) as one superstep."""

from vertex_programs.gnn.base import (GNNLayer, RecordReader, activate, add_scaled, module_tensor, rows32,
                                      transform_rows)

#: activations an MLP may hold; in place: every op of the MLP gets rows of the layer's own (the
#: gathered rows or a product)
MLP_ACTIVATIONS = ("relu", "tanh", "sigmoid")
_TORCH_ACTIVATIONS = {"ReLU": "relu", "Tanh": "tanh", "Sigmoid": "sigmoid"}
_SKIPPED = ("Dropout", "Identity")  # identities at inference


class GINLayer(GNNLayer):
    """x'_i = MLP((1 + eps) · x_i + Σ_{j→i} x_j)   (PyG ``GINConv``; self-loops and parallel
    edges count like any edge).

    The MLP is a list of ops: ``("linear", weight [out, in], bias [out] or None)``,
    ``("batch_norm", running_mean, running_var, weight or None, bias or None, eps)`` (as in eval
    mode) and ``("relu" | "tanh" | "sigmoid",)``. When the MLP starts with a linear map that
    narrows the rows, it is applied before the gather (W · Σ x = Σ W · x): vertices send x W.
    """

    kind = "gin"
    combiner = "sum"

    def __init__(self, mlp: list, eps: float = 0.0):
        self.mlp, self.eps = [tuple(op) for op in mlp], float(eps)
        problem = _width_problem(self.mlp)
        if problem:
            raise ValueError(f"GIN: {problem}")
        self.in_features, self.out_features = _mlp_widths(self.mlp)
        first = self.mlp[0]
        self.transform_first = first[0] == "linear" and first[1].shape[0] < first[1].shape[1]

    def message(self, ctx, x):
        sent = x @ self.mlp[0][1].T if self.transform_first else x
        return sent, sent

    def apply(self, ctx, x, sent, gathered):
        h = add_scaled(rows32(ctx.xp, gathered), sent, 1.0 + self.eps)  # the gathered rows, in place
        ops = self.mlp
        if self.transform_first:
            bias = self.mlp[0][2]
            if bias is not None:
                h += bias
            ops = ops[1:]
        for op in ops:
            h = _run_op(op, h)
        return h

    def record(self):
        return {"kind": self.kind, "eps": self.eps, "mlp": [_op_record(op) for op in self.mlp]}

    @classmethod
    def from_record(cls, reader: RecordReader):
        eps = float(reader.option("eps", (float, int)))
        ops = reader.option("mlp", list)
        mlp = [_read_op(reader.child(f"mlp[{i}]", op)) for i, op in enumerate(ops)]
        reader.finish()
        problem = _width_problem(mlp)
        if problem:
            raise reader.error(problem)
        return cls(mlp, eps)

    @classmethod
    def from_pyg(cls, module):
        import torch  # only ever called with a PyG module, so torch is already loaded

        nn = module.nn
        children = list(nn) if isinstance(nn, torch.nn.Sequential) else [nn]
        mlp = [op for op in (_op_from_torch(child) for child in children) if op is not None]
        return cls(mlp, float(module.eps.detach().reshape(-1)[0]))


def _run_op(op, h):
    """One MLP op on rows h [n, k] of the layer's own (overwritten where the op keeps the width)."""
    name = op[0]
    if name == "linear":
        out = transform_rows(h, op[1])
        if op[2] is not None:
            out += op[2]
        return out
    if name == "batch_norm":
        mean, var, weight, bias, eps = op[1:]
        h -= mean
        h /= (var + eps) ** 0.5
        if weight is not None:
            h *= weight
        if bias is not None:
            h += bias
        return h
    return activate(name, h)


def _mlp_widths(mlp) -> tuple[int, int]:
    """(input width, output width) of an MLP with at least one linear op."""
    sized = [op for op in mlp if op[0] in ("linear", "batch_norm")]
    first, last = sized[0], sized[-1]
    in_width = first[1].shape[1] if first[0] == "linear" else first[1].shape[0]
    out_width = last[1].shape[0]
    return in_width, out_width


def _width_problem(mlp) -> str | None:
    """Where the MLP's widths do not chain (or None)."""
    if not any(op[0] == "linear" for op in mlp):
        return "the MLP needs at least one Linear layer"
    width = None
    for i, op in enumerate(mlp):
        if op[0] not in ("linear", "batch_norm"):
            continue
        expects = op[1].shape[1] if op[0] == "linear" else op[1].shape[0]
        if width is not None and expects != width:
            return f"MLP op {i} ({op[0]}) expects {expects} features but gets {width}"
        width = op[1].shape[0]
    return None


def _op_from_torch(module):
    name = type(module).__name__
    if name == "Linear" and hasattr(module, "weight"):  # torch.nn.Linear or PyG's Linear
        bias = None if module.bias is None else module_tensor(module, "bias", "GINConv")
        return ("linear", module_tensor(module, "weight", "GINConv"), bias)
    if name == "BatchNorm1d":
        if module.running_mean is None:
            raise ValueError("GINConv: BatchNorm1d without running statistics is not supported")
        affine = module.weight is not None
        return ("batch_norm", module_tensor(module, "running_mean", "GINConv"),
                module_tensor(module, "running_var", "GINConv"),
                module_tensor(module, "weight", "GINConv") if affine else None,
                module_tensor(module, "bias", "GINConv") if affine else None, float(module.eps))
    if name in _TORCH_ACTIVATIONS:
        return (_TORCH_ACTIVATIONS[name],)
    if name in _SKIPPED:
        return None
    raise ValueError(f"GINConv: unsupported module {name} in nn (use a torch.nn.Sequential of "
                     f"Linear, BatchNorm1d, ReLU, Tanh, Sigmoid, Dropout)")


def _op_record(op) -> dict:
    name = op[0]
    if name == "linear":
        weights = {"weight": op[1]} if op[2] is None else {"weight": op[1], "bias": op[2]}
        return {"op": name, "bias": op[2] is not None, "weights": weights}
    if name == "batch_norm":
        mean, var, weight, bias, eps = op[1:]
        weights = {"running_mean": mean, "running_var": var}
        if weight is not None:
            weights.update(weight=weight, bias=bias)
        return {"op": name, "affine": weight is not None, "eps": eps, "weights": weights}
    return {"op": name}


def _read_op(reader: RecordReader):
    name = reader.option("op", str, ("linear", "batch_norm") + tuple(MLP_ACTIVATIONS))
    if name == "linear":
        weight = reader.tensor("weight", (None, None))
        bias = reader.tensor("bias", (weight.shape[0],)) if reader.option("bias", bool) else None
        op = (name, weight, bias)
    elif name == "batch_norm":
        mean = reader.tensor("running_mean", (None,))
        width = mean.shape[0]
        var = reader.tensor("running_var", (width,))
        if bool((var < 0).any()):
            raise reader.error("running_var has negative entries")
        affine = reader.option("affine", bool)
        weight = reader.tensor("weight", (width,)) if affine else None
        bias = reader.tensor("bias", (width,)) if affine else None
        eps = float(reader.option("eps", (float, int)))
        op = (name, mean, var, weight, bias, eps)
    else:
        op = (name,)
    reader.finish()
    return op
