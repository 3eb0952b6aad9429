"""What every GNN layer shares: the layer interface, the model-file record reader, array helpers.

A layer is one Gather-Apply-Scatter superstep. ``message`` computes, on the owning rank, what each
vertex sends (a [n, k] float32 array) and a cache for ``apply``; the engine combines the messages
per receiver with the layer's ``combiner``; ``apply`` turns the combined rows into the layer's
output [n, out_features]. Layers hold only their weights (float32 NumPy arrays; torch tensors on the
run's GPU in a ``device='cuda'`` run, see ``GNNLayer.on``) and compute with operators and methods
that NumPy arrays and torch tensors share, so one implementation serves both; the state of a run
lives in ``GNNModel``. Nothing here imports torch on the host path.
"""

from abc import ABC, abstractmethod

import numpy as np

from pregel.arrays import as_numpy
from pregel.errors import InputError

#: rows per block of ``add_product`` / ``add_scaled`` (bounds their temporaries to a few MB)
BLOCK_ROWS = 1 << 16


def rows32(xp, values):
    """``values`` [n, ...] as float32 of namespace ``xp`` (no copy when they already are)."""
    if xp is np:
        return np.ascontiguousarray(as_numpy(values), dtype=np.float32)
    return xp.astype(xp.asarray(values), xp.float32, copy=False)


def on_namespace(value, xp):
    """``value`` with every array in it (also inside lists and tuples) in namespace ``xp``."""
    if isinstance(value, (list, tuple)):
        return type(value)(on_namespace(item, xp) for item in value)
    if isinstance(value, np.ndarray) or hasattr(value, "detach"):
        return rows32(xp, value)
    return value


def add_product(out, x, weight):
    """out [n, k] += x [n, m] @ weight.T ([k, m]), in place, a block of rows at a time."""
    for start in range(0, len(out), BLOCK_ROWS):
        rows = slice(start, start + BLOCK_ROWS)
        out[rows] += x[rows] @ weight.T
    return out


def transform_rows(values, weight):
    """values [n, m] @ weight.T ([k, m]) as [n, k]. ``values`` are rows of the layer's own, which it may
    overwrite: NumPy rows with k == m are transformed in place a block of rows at a time, so the layer
    never holds a second [n, k] array (2.6 GB for 10M rows of 64 floats); otherwise a new array."""
    if not isinstance(values, np.ndarray) or weight.shape[0] != weight.shape[1]:
        return values @ weight.T
    for start in range(0, len(values), BLOCK_ROWS):
        rows = slice(start, start + BLOCK_ROWS)
        values[rows] = values[rows] @ weight.T
    return values


def add_scaled(out, values, scale):
    """out [n, k] += scale * values [n, k] (``scale``: a number, or [n, 1] per row), in place, by
    blocks of rows."""
    per_row = not isinstance(scale, (int, float))
    if not per_row and scale == 1:
        out += values
        return out
    for start in range(0, len(out), BLOCK_ROWS):
        rows = slice(start, start + BLOCK_ROWS)
        out[rows] += values[rows] * (scale[rows] if per_row else scale)
    return out


def _sigmoid(x):
    with np.errstate(over="ignore"):  # exp(-x) = inf for x < -88 gives 1 / inf = 0, as it should
        np.exp(np.negative(x, out=x), out=x)
    x += 1
    return np.reciprocal(x, out=x)


def _gelu(x):
    """x · Φ(x) = x · erfc(-x / √2) / 2 (erfc keeps the negative tail accurate)."""
    from scipy.special import erfc  # only for models that use gelu

    return np.multiply(x, erfc(x * np.float32(-0.5 ** 0.5)) * np.float32(0.5), out=x)


def _negative_part(function):
    def activation(x):
        negative = x < 0
        x[negative] = function(x[negative])
        return x
    return activation


#: element-wise activations on float32 NumPy rows, in place (torch's definitions; leaky_relu with
#: torch's default slope 0.01, elu with alpha 1, gelu exact, not tanh-approximated)
NUMPY_ACTIVATIONS = {
    "relu": lambda x: np.maximum(x, 0, out=x),
    "elu": _negative_part(np.expm1),
    "leaky_relu": _negative_part(lambda v: v * np.float32(0.01)),
    "gelu": _gelu,
    "tanh": lambda x: np.tanh(x, out=x),
    "sigmoid": _sigmoid,
    "none": lambda x: x,
}
ACTIVATIONS = tuple(NUMPY_ACTIVATIONS)


def activate(name: str, x):
    """x [n, k] (rows the layer has just made, overwritten) after the activation ``name``."""
    if isinstance(x, np.ndarray):
        return NUMPY_ACTIVATIONS[name](x)
    import torch  # a device run (``device='cuda'``): x is a torch tensor on the run's GPU
    import torch.nn.functional as F

    return {"relu": F.relu, "elu": F.elu, "leaky_relu": F.leaky_relu, "gelu": F.gelu, "tanh": torch.tanh,
            "sigmoid": torch.sigmoid, "none": lambda v: v}[name](x)


def module_tensor(module, name: str, kind: str) -> np.ndarray:
    """``module.<name>`` of a torch module as a float32 NumPy array (a ValueError for lazy,
    uninitialised weights)."""
    import torch  # only ever called with torch modules, so torch is already loaded

    value = getattr(module, name)
    if isinstance(value, torch.nn.parameter.UninitializedParameter):
        raise ValueError(f"{kind}: {name} is not initialised (lazy in_channels=-1): run one forward "
                         f"pass or give in_channels before saving")
    return value.detach().to(torch.float32).cpu().numpy().copy()


class GNNLayer(ABC):
    """Base class of the layers. Subclasses set ``kind`` (the name in the model file) and
    ``combiner`` and implement ``message``, ``apply``, ``record``, ``from_record`` and ``from_pyg``.

    in_features / out_features: the widths of the layer's input and output rows.
    """

    kind: str = ""
    combiner: str = "sum"
    per_edge: bool = False
    in_features: int
    out_features: int

    def on(self, xp) -> "GNNLayer":
        """The layer with its weights in the run's array namespace ``xp`` (``numpy``, or a
        ``pregel.arrays.TorchNamespace`` on a GPU), in place (a no-op where they are); returns it."""
        for name, value in vars(self).items():
            setattr(self, name, on_namespace(value, xp))
        return self

    @abstractmethod
    def message(self, ctx, x):
        """(values [n, k] to send along the out-edges, cache passed to ``apply``) from x [n, in]."""

    def destination_values(self, ctx, cache):
        """Receiver-side terms [n, k] for ``edge_message`` (None when the layer has none)."""
        return None

    def edge_message(self, ctx, src_values, dst_values):
        """Per-edge messages of E edges (only for layers with ``per_edge``)."""
        return src_values

    def fused_softmax(self, ext, dst_values, indptr, indices, ext_ids, row_ids, ghosts=None):
        """For softmax layers: ``(m, s, acc)`` of the gather in one pass (see
        ``VertexProgram.fused_softmax``), or None to have ``edge_message`` called per edge."""
        return None

    @abstractmethod
    def apply(self, ctx, x, cache, gathered):
        """The layer's output [n, out] from its input x [n, in] and the combined messages."""

    @abstractmethod
    def record(self) -> dict:
        """The layer as plain data for the model file: ``kind``, options and ``weights``."""

    @classmethod
    @abstractmethod
    def from_record(cls, reader: "RecordReader") -> "GNNLayer":
        """The layer from a validated model-file record (``reader`` raises ``InputError``)."""

    @classmethod
    @abstractmethod
    def from_pyg(cls, module) -> "GNNLayer":
        """The layer with the weights and options of a PyG conv module (ValueError if unsupported)."""


class RecordReader:
    """Reads one record (a dict) of a model file; every problem is an ``InputError`` that names
    the file and where in it (``layer 2 (sage): ...``)."""

    def __init__(self, path, where: str, record):
        self.path, self.where = path, where
        if not isinstance(record, dict):
            raise self.error(f"must be a dict, got {type(record).__name__}")
        self.record = record
        self.weights = record.get("weights", {})
        if not isinstance(self.weights, dict):
            raise self.error(f"'weights' must be a dict of tensors, got {type(self.weights).__name__}")
        self._read = set()

    def error(self, problem: str) -> InputError:
        """An ``InputError`` naming the file, this record and ``problem``."""
        return InputError.at(self.path, None, f"{self.where}: {problem}")

    def child(self, where: str, record) -> "RecordReader":
        """A reader of ``record``, nested in this one at ``where`` (for its errors)."""
        return RecordReader(self.path, f"{self.where} {where}", record)

    def option(self, name: str, kind, choices=None):
        """The option ``name``, which must be of type ``kind`` (a type or tuple of types)."""
        if name not in self.record:
            raise self.error(f"missing option '{name}'")
        value = self.record[name]
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            names = " or ".join(k.__name__ for k in kinds)
            raise self.error(f"option '{name}' must be {names}, got {value!r}")
        if choices is not None and value not in choices:
            raise self.error(f"option '{name}' must be one of {list(choices)}, got {value!r}")
        return value

    def tensor(self, name: str, shape: tuple) -> np.ndarray:
        """The weight ``name`` (a tensor of the file, read as a NumPy array), finite floats of
        ``shape`` (None: any size on that axis), as float32."""
        if name not in self.weights:
            raise self.error(f"missing weight '{name}'")
        value = self.weights[name]
        if not isinstance(value, np.ndarray) or value.dtype.kind != "f":
            kind = f"{value.dtype} tensor" if isinstance(value, np.ndarray) else type(value).__name__
            raise self.error(f"weight '{name}' must be a float tensor, got {kind}")
        expected = "(" + ", ".join("*" if s is None else str(s) for s in shape) + ")"
        if value.ndim != len(shape) or any(s is not None and s != d for s, d in zip(shape, value.shape)):
            raise self.error(f"weight '{name}' has shape {tuple(value.shape)}, expected {expected}")
        if not np.isfinite(value).all():
            raise self.error(f"weight '{name}' holds NaN or infinite values")
        self._read.add(name)
        return np.ascontiguousarray(value, dtype=np.float32)

    def finish(self) -> None:
        """Reject weights that the layer's options do not use."""
        extra = sorted(set(self.weights) - self._read)
        if extra:
            raise self.error(f"unexpected weight(s) {extra} for these options")

