"""What every GNN layer shares: the layer interface, the model-file record reader, tensor helpers.

A layer is one Gather-Apply-Scatter superstep. ``message`` computes, on the owning rank, what each
vertex sends (a [n, k] float32 tensor) and a cache for ``apply``; the engine combines the messages
per receiver with the layer's ``combiner``; ``apply`` turns the combined rows into the layer's
output [n, out_features]. Layers hold only their weights (plain float32 tensors); the state of a
run lives in ``GNNModel``.
"""

from abc import ABC, abstractmethod

import numpy as np
import torch

from pregel.errors import InputError


def as_tensor(values) -> torch.Tensor:
    """A float32 torch view of a NumPy array or tensor [n, ...] (copied only if not float32)."""
    if isinstance(values, torch.Tensor):
        return values.to(torch.float32)
    return torch.from_numpy(np.ascontiguousarray(values, dtype=np.float32))


def moved(value, device: str):
    """``value`` with every tensor in it (also inside lists and tuples) on torch ``device``."""
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, (list, tuple)):
        return type(value)(moved(item, device) for item in value)
    return value


def module_tensor(module, name: str, kind: str) -> torch.Tensor:
    """``module.<name>`` as a detached float32 tensor (a ValueError for lazy, uninitialised weights)."""
    value = getattr(module, name)
    if isinstance(value, torch.nn.parameter.UninitializedParameter):
        raise ValueError(f"{kind}: {name} is not initialised (lazy in_channels=-1): run one forward "
                         f"pass or give in_channels before saving")
    return value.detach().to(torch.float32).cpu().contiguous().clone()


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

    def to(self, device: str) -> "GNNLayer":
        """Move the layer's weights to torch ``device`` (in place; a no-op where they are); returns it."""
        for name, value in vars(self).items():
            setattr(self, name, moved(value, device))
        return self

    @abstractmethod
    def message(self, ctx, x: torch.Tensor):
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
    def apply(self, ctx, x: torch.Tensor, cache, gathered) -> torch.Tensor:
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
        return InputError.at(self.path, None, f"{self.where}: {problem}")

    def child(self, where: str, record) -> "RecordReader":
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

    def tensor(self, name: str, shape: tuple) -> torch.Tensor:
        """The weight ``name``, a finite float tensor of ``shape`` (None: any size on that axis)."""
        if name not in self.weights:
            raise self.error(f"missing weight '{name}'")
        value = self.weights[name]
        if not isinstance(value, torch.Tensor) or not value.is_floating_point():
            raise self.error(f"weight '{name}' must be a float tensor, got {type(value).__name__}")
        expected = "(" + ", ".join("*" if s is None else str(s) for s in shape) + ")"
        if value.dim() != len(shape) or any(s is not None and s != d for s, d in zip(shape, value.shape)):
            raise self.error(f"weight '{name}' has shape {tuple(value.shape)}, expected {expected}")
        if not bool(torch.isfinite(value).all()):
            raise self.error(f"weight '{name}' holds NaN or infinite values")
        self._read.add(name)
        return value.detach().to(torch.float32).contiguous()

    def finish(self) -> None:
        """Reject weights that the layer's options do not use."""
        extra = sorted(set(self.weights) - self._read)
        if extra:
            raise self.error(f"unexpected weight(s) {extra} for these options")

