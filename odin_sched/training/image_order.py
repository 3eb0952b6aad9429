"""The order in which training images are visited, batch by batch.

* ``shuffled``: consecutive seeded permutations of the training cameras, cut into batches (B = 1 is
  the one-image-per-step trainer's order).
* ``spread`` (the default for B > 1): the same stream of permutations, but each batch is chosen among
  the next pass's worth of cameras, preferring those that see none of the cells seen by the previous
  batch, one camera at a time, each the candidate that adds the fewest new cells to the batch (ties:
  stream order). So a batch stays in one part of the scene and consecutive batches touch different
  parts wherever the cameras allow, and the barrier-free trainer can run a batch while the previous
  one's updates are still in flight.

Both are functions of the training cameras, the seed, B and, for ``spread``, of what each camera may
see of the initial model (``ORDER_CELLS`` k-d cells, with the motion margin of ``ORDER_WINDOW``
batches) — never of the number of ranks. The
single-process trainer uses the same order, so the two stay comparable bit for bit.
"""
import numpy as np
import torch

IMAGE_ORDERS = ("shuffled", "spread")
#: cells used to judge which cameras see the same part of the scene (independent of the ranks) ...
ORDER_CELLS = 64
#: ... and the window (in batches) whose motion margin the judgement allows for
ORDER_WINDOW = 10


def resolved_order(image_order: str | None, batch_size: int) -> str:
    """The image order asked for, or the default: shuffled for B = 1, spread otherwise."""
    return image_order or ("shuffled" if batch_size == 1 else "spread")


def camera_order(train_ids: np.ndarray, count: int, seed: int) -> np.ndarray:
    """``count`` training cameras: consecutive seeded permutations of ``train_ids`` [C_train]."""
    gen = torch.Generator().manual_seed(seed)
    passes = -(-count // len(train_ids))
    perms = [torch.randperm(len(train_ids), generator=gen) for _ in range(passes)]
    return train_ids[torch.cat(perms).numpy()[:count]]


def shuffled_batches(train_ids: np.ndarray, steps: int, batch_size: int, seed: int) -> np.ndarray:
    """The cameras of every batch [steps, B]: ``camera_order`` cut into batches."""
    return camera_order(train_ids, steps * batch_size, seed).reshape(steps, batch_size)


def spread_batches(train_ids: np.ndarray, steps: int, batch_size: int, seed: int, sees: np.ndarray) -> np.ndarray:
    """The cameras of every batch [steps, B], consecutive batches seeing different cells where possible.

    train_ids: np.ndarray  # [C_train] training cameras
    sees: np.ndarray       # [C, K] bool, the cells each camera sees
    Each pass over the cameras (a seeded permutation) is used up before the next begins, so every
    camera is visited once per pass, as in ``shuffled_batches``. The loop is over batches; the choice
    within a batch is vectorised over the candidate cameras.
    """
    per_pass = len(train_ids)
    passes = -(-(steps * batch_size) // per_pass) + 1
    stream = camera_order(train_ids, passes * per_pass, seed)
    taken = np.zeros(len(stream), bool)
    batches = np.empty((steps, batch_size), train_ids.dtype)
    previous = np.zeros(sees.shape[1], bool)
    for b in range(steps):
        first = int(np.argmin(taken))  # the first stream entry not yet taken
        current = first // per_pass
        left = current * per_pass + np.flatnonzero(~taken[current * per_pass:(current + 1) * per_pass])
        forced = left if len(left) <= batch_size else np.empty(0, np.int64)  # the end of a pass goes first
        pool = left if len(forced) == 0 else (current + 1) * per_pass + np.arange(per_pass)
        conflicts = (sees[stream[pool]] & previous).any(axis=1)
        pick = _coherent_pick(sees, stream, forced, pool[~conflicts], pool[conflicts], batch_size)
        taken[pick] = True
        batches[b] = stream[pick]
        previous = sees[stream[pick]].any(axis=0)
    return batches


def _coherent_pick(sees, stream, forced, clear, blocked, batch_size) -> np.ndarray:
    """Stream positions [B] of one batch: ``forced`` ones, then from ``clear`` (then ``blocked``) one at a
    time the candidate that adds the fewest new cells to the batch (ties: stream order), so a batch stays
    in one part of the scene and leaves the other parts to the next batch. Returned in stream order."""
    union = sees[stream[forced]].any(axis=0)
    pick = list(forced)
    for pool in (clear, blocked):
        while len(pick) < batch_size and len(pool):
            added = (sees[stream[pool]] & ~union).sum(axis=1)
            k = int(np.argmin(added))
            pick.append(pool[k])
            union |= sees[stream[pool[k]]]
            pool = np.delete(pool, k)
    return np.sort(np.array(pick, dtype=np.int64))
