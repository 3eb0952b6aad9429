"""Global Gaussian ids: every Gaussian of a training run has an int64 id that does not depend on the
number of ranks, so that any owner can name, order and seed its rows without asking anyone.

The initial Gaussians are 0 .. G0 - 1. When densification clones or splits a Gaussian, it becomes two
Gaussians, its *children* (a clone's original row is child 0, the copy child 1; a split's two samples
are children 0 and 1), and the parent's id is retired. An id packs a depth d (the number of
densifications in its lineage) into its top bits and a value below them:

    id = d << DEPTH_SHIFT | v,   v = (root << d) | path   (path: the d child bits, oldest first)

so a root keeps its index (d = 0, v = root) and the children of (d, v) are (d + 1, 2 v) and
(d + 1, 2 v + 1). Two different Gaussians never share an id: (d, v) determines the root and every
child choice on the way down, and a Gaussian's ids are never reused (a retired parent's descendants
all carry larger depths). The rule needs a Gaussian's own id only, no count of others: an owner
names its children from its own rows. ``parent_ids`` inverts it, so an owner also knows
which of its rows a new Gaussian came from (its cell is the parent's).

Limit: v must stay below 2^DEPTH_SHIFT, so a lineage can densify DEPTH_SHIFT - ceil(log2 G0) times
(36 for 2,000,000 initial Gaussians, 40 for 100,000), whatever the number of rounds: ``can_densify``
says which Gaussians still can, and densification leaves the others as they are (deterministically, on
every number of ranks). 3DGS's 150 rounds grow a model 10-30 fold (about 5 doublings per lineage on
average); a lineage densified in 36 of them is the rare case this bounds.
"""
import torch

#: bits below the depth; the depth takes the 6 above (up to 63) and the sign bit stays 0
DEPTH_SHIFT = 57
VALUE_MASK = (1 << DEPTH_SHIFT) - 1


def initial_ids(count: int, device="cpu") -> torch.Tensor:
    """int64 [count]: the ids of the initial Gaussians, 0 .. count - 1."""
    return torch.arange(count, dtype=torch.int64, device=device)


def can_densify(ids: torch.Tensor) -> torch.Tensor:
    """bool [n]: whether the Gaussians ``ids`` ([n] int64) can still have children."""
    value = ids & VALUE_MASK
    depth = ids >> DEPTH_SHIFT
    return (value < (1 << (DEPTH_SHIFT - 1))) & (depth < 63)


def child_ids(ids: torch.Tensor, child: int) -> torch.Tensor:
    """int64 [n]: the ids of child ``child`` (0 or 1) of the Gaussians ``ids`` ([n], all ``can_densify``)."""
    depth = (ids >> DEPTH_SHIFT) + 1
    return (depth << DEPTH_SHIFT) | ((ids & VALUE_MASK) * 2 + child)


def parent_ids(ids: torch.Tensor) -> torch.Tensor:
    """int64 [n]: the id each of ``ids`` ([n], depth >= 1) is a child of (``child_ids`` inverted)."""
    depth = (ids >> DEPTH_SHIFT) - 1
    return (depth << DEPTH_SHIFT) | ((ids & VALUE_MASK) >> 1)
