"""Visible (selective) Adam for Gaussian parameters.

A training step updates only the Gaussians its camera sees: their parameters, their first and second
moments and their step counts. Every other Gaussian keeps its parameters and optimizer state bit for bit.
This is the property the barrier-free scheduler relies on (two steps that see disjoint Gaussians commute).

Each Gaussian carries its own step count, so a Gaussian evolves exactly as if ``torch.optim.Adam`` had
been run on it alone, over the steps in which it was visible (torch's formula, including where epsilon is
added). Learning rates are per parameter group, with the defaults of the reference 3DGS code
(``arguments/__init__.py`` of graphdeco-inria/gaussian-splatting, current release): means 1.6e-4 times
the scene extent (``position_lr_init``, decayed to 1.6e-6 times the extent by the trainer), log-scales
1e-3 (``scaling_lr``; the original release had 5e-3), quaternions 1e-3, opacity logits 5e-2, the DC
colour coefficients ``sh0`` 2.5e-3 (``feature_lr``) and the higher SH coefficients ``shN`` 2.5e-3 / 20
(``feature_lr / 20.0`` in ``GaussianModel.training_setup``).
"""
import torch

from kernels.adam import adam_rows
from odin_sched.training.gaussian_ids import initial_ids

DEFAULT_LR = {
    "means": 1.6e-4,  # multiplied by the scene extent
    "scales": 1e-3,
    "quats": 1e-3,
    "opacities": 5e-2,
    "sh0": 2.5e-3,
    "shN": 2.5e-3 / 20,
}


def default_lrs(extent: float) -> dict[str, float]:
    """The 3DGS learning rates for a scene of the given spatial extent (the means' rate scales with it)."""
    lrs = dict(DEFAULT_LR)
    lrs["means"] = DEFAULT_LR["means"] * float(extent)
    return lrs


class VisibleAdam:
    """Adam over a dict of per-Gaussian parameter tensors that steps only the visible rows.

    params: dict name -> torch.Tensor  # [G, ...] float32, leaf tensors; ``requires_grad`` is set here
    lrs: dict name -> float            # learning rate per parameter (may be changed between steps)
    The moments, step counts and ids live on the parameters' device (CPU or GPU); ``ids`` [G] int64
    are the Gaussians' global ids (``odin_sched.training.gaussian_ids``), 0 .. G - 1 at the start.
    copy: train copies of ``params`` (False: train the given tensors themselves, for tensors made for this
    optimizer that nothing else uses: no second copy of the model is made while it is built; a tensor that
    is not contiguous is still copied, since the Adam kernel updates contiguous rows in place).
    """

    def __init__(self, params: dict, lrs: dict, betas=(0.9, 0.999), eps: float = 1e-15, copy: bool = True):
        missing = set(params) - set(lrs)
        if missing:
            raise ValueError(f"lrs: no learning rate for {sorted(missing)}")
        sizes = {p.shape[0] for p in params.values()}
        if len(sizes) != 1:
            raise ValueError(f"params: leading dimensions differ ({sorted(sizes)}); all must be G")
        self.lrs = dict(lrs)
        self.beta1, self.beta2 = betas
        self.eps = eps
        self.params = {}
        self.exp_avg = {}
        self.exp_avg_sq = {}
        self._install(params, copy)
        self.step_count = torch.zeros(self.num_gaussians, dtype=torch.int64, device=self.device)
        self.ids = initial_ids(self.num_gaussians, self.device)

    @property
    def num_gaussians(self) -> int:
        return next(iter(self.params.values())).shape[0]

    @property
    def device(self) -> torch.device:
        return next(iter(self.params.values())).device

    def _install(self, params: dict, copy: bool) -> None:
        for name, value in params.items():
            self.params[name] = _trained(value, copy)
            self.exp_avg[name] = torch.zeros_like(self.params[name])
            self.exp_avg_sq[name] = torch.zeros_like(self.params[name])

    @torch.no_grad()
    def step(self, visible: torch.Tensor) -> None:
        """One Adam step on the visible Gaussians, using each parameter's ``.grad``.

        visible: torch.Tensor  # [G] bool, the Gaussians seen in this step
        A parameter without a gradient is left alone (as torch's Adam does).
        """
        if visible.shape != (self.num_gaussians,) or visible.dtype != torch.bool:
            raise ValueError(f"visible: expected a bool tensor of shape ({self.num_gaussians},), "
                             f"got {visible.dtype} {tuple(visible.shape)}")
        idx = torch.nonzero(visible).squeeze(1)
        grads = {name: p.grad[idx] for name, p in self.params.items() if p.grad is not None}
        self.step_rows(idx, grads)

    @torch.no_grad()
    def step_rows(self, idx: torch.Tensor, grads: dict, lrs: dict | None = None,
                  grad_rows: torch.Tensor | None = None) -> None:
        """One Adam step on the rows ``idx`` with the given gradients (each row independently).

        idx: torch.Tensor                 # [k] int64 rows to update, ascending
        grads: dict name -> torch.Tensor  # [k, ...] gradient of those rows; a missing name is left alone
        lrs: dict name -> float            # this step's learning rates (default: ``self.lrs``)
        grad_rows: torch.Tensor            # [k] int64 or None: row idx[i]'s gradient is grads[name][grad_rows[i]]
                                           # (grads then hold [n, ...] rows; no copy of the chosen ones is made)
        The update of a row depends only on that row's values, so stepping a subset of rows (one cell of
        the distributed trainer) gives bit for bit what stepping them within all rows gives.
        """
        if idx.numel() == 0:
            return
        lrs = self.lrs if lrs is None else lrs
        t = self.step_count.index_select(0, idx) + 1  # index_select / index_copy_: the rows' values, fast
        self.step_count.index_copy_(0, idx, t)
        t = t.to(torch.float64)
        bias1 = 1.0 - self.beta1 ** t
        bias2_sqrt = torch.sqrt(1.0 - self.beta2 ** t).to(torch.float32)
        for name, g in grads.items():
            adam_rows(self.params[name], self.exp_avg[name], self.exp_avg_sq[name], idx, g,
                      (lrs[name] / bias1).to(torch.float32), bias2_sqrt, self.beta1, self.beta2, self.eps, grad_rows)

    def replace(self, params: dict, source: torch.Tensor, fresh: torch.Tensor | None, ids: torch.Tensor,
                copy: bool = True) -> None:
        """Swap in a new set of Gaussians (after densification) and carry the optimizer state over.

        params: dict name -> torch.Tensor  # [G', ...] the new parameter values
        source: torch.Tensor               # [G'] int64, the old row whose moments and step count row i
                                           # inherits, or -1 for a new Gaussian (zero state, step 0)
        fresh: torch.Tensor or None        # [G'] bool, rows whose moments start at zero while keeping
                                           # their source's step count (None: none)
        ids: torch.Tensor                  # [G'] int64, the new rows' global ids
        copy: train copies of ``params`` (False: train the given tensors themselves, for tensors made for
        this optimizer that nothing else uses, as ``__init__``'s ``copy``: no second copy of the new model)
        """
        if set(params) != set(self.params):
            raise ValueError(f"params: expected {sorted(self.params)}, got {sorted(params)}")
        n = source.shape[0]
        if ids.shape != (n,):
            raise ValueError(f"ids: expected shape ({n},), got {tuple(ids.shape)}")
        for name, value in params.items():
            if value.shape[0] != n:
                raise ValueError(f"params[{name!r}]: {value.shape[0]} rows but source has {n}")
        if n and (source.min() < -1 or source.max() >= self.num_gaussians):
            raise ValueError(f"source: indices must be in [-1, {self.num_gaussians})")
        unknown = source < 0
        zeroed = unknown if fresh is None else unknown | fresh
        src = source.clamp(min=0)
        for name, value in params.items():
            m = self.exp_avg[name][src]
            v = self.exp_avg_sq[name][src]
            m[zeroed] = 0.0
            v[zeroed] = 0.0
            self.params[name] = _trained(value, copy)
            self.exp_avg[name] = m
            self.exp_avg_sq[name] = v
        steps = self.step_count[src]
        steps[unknown] = 0
        self.step_count = steps
        self.ids = ids.to(torch.int64)

    @torch.no_grad()
    def reset_param(self, name: str, value: torch.Tensor) -> None:
        """Set parameter ``name`` to ``value`` ([G, ...]) with zero moments; step counts are kept (the
        reference's ``replace_tensor_to_optimizer``)."""
        self.params[name] = _trained(value, True)
        self.exp_avg[name] = torch.zeros_like(self.params[name])
        self.exp_avg_sq[name] = torch.zeros_like(self.params[name])


def _trained(value: torch.Tensor, copy: bool) -> torch.Tensor:
    """The leaf tensor that trains ``value`` [G, ...]: a contiguous copy, or (``copy`` False) ``value``
    itself when it is contiguous (the Adam kernel updates contiguous rows in place)."""
    value = value.detach()
    return (value.clone(memory_format=torch.contiguous_format) if copy else value.contiguous()).requires_grad_(True)
