"""Array namespaces: the same vertex-program code on NumPy arrays (host) and torch tensors (device).

A program reads its run's namespace as ``ctx.xp``: the ``numpy`` module itself on the host (so a
CPU run calls exactly the NumPy functions it always did), or a ``TorchNamespace`` when the run's
state lives on a GPU (``pregel run --device cuda``). ``TorchNamespace`` offers the NumPy names the
built-in programs and the engine use, with NumPy's dtype rules where torch's differ (a Python float
makes float64, not torch's default float32).
"""

import numpy as np


def as_numpy(values) -> np.ndarray:
    """A NumPy array of a NumPy array or torch tensor (a view for CPU tensors, a copy for GPU ones)."""
    return values.detach().cpu().numpy() if hasattr(values, "detach") else np.asarray(values)


def wire(values, xp=np):
    """Message rows as a contiguous float32/float64 array of namespace ``xp`` (``numpy``, which also
    takes host tensors, or a ``TorchNamespace``); integers and booleans are reduced in float64, exact
    below 2**53."""
    values = as_numpy(values) if xp is np else xp.asarray(values)
    if values.dtype not in (xp.float32, xp.float64):
        values = xp.astype(values, xp.float64)
    return xp.ascontiguousarray(values)


class TorchNamespace:
    """NumPy-named functions on torch tensors of one device (``device``: a torch device name)."""

    def __init__(self, device: str):
        import torch

        self.torch, self.device = torch, device
        self.bool, self.int64, self.float32, self.float64 = torch.bool, torch.int64, torch.float32, torch.float64

    def asarray(self, values, dtype=None):
        """A tensor on this device of ``values`` (a tensor, NumPy array or Python number; no copy when
        it already is one of ``dtype`` there); Python floats become float64 as in NumPy."""
        if not isinstance(values, self.torch.Tensor):
            values = np.asarray(values)
        return self.torch.as_tensor(values, dtype=dtype, device=self.device)

    def astype(self, values, dtype, copy: bool = True):
        return values.to(dtype, copy=copy)

    def ascontiguousarray(self, values):
        return values.contiguous()

    def zeros(self, shape, dtype):
        return self.torch.zeros(shape, dtype=dtype, device=self.device)

    def full(self, n: int, value, dtype=None):
        return self.torch.full((n,), value, dtype=dtype or self.asarray(value).dtype, device=self.device)

    def where(self, condition, a, b):
        return self.torch.where(condition, self.asarray(a), self.asarray(b))

    def minimum(self, a, b):
        return self.torch.minimum(self.asarray(a), self.asarray(b))

    def maximum(self, a, b):
        return self.torch.maximum(self.asarray(a), self.asarray(b))

    def abs(self, values):
        return self.torch.abs(values)

    def isinf(self, values):
        return self.torch.isinf(values)

    def flatnonzero(self, values):
        return self.torch.nonzero(values.reshape(-1)).reshape(-1)

    def concatenate(self, arrays):
        return self.torch.cat(list(arrays))
