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

The trainers read the order through ``BatchOrder``, which makes it a pass of permutations at a time as
batches are read, so its memory does not grow with the number of steps.
"""
import operator

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
    return BatchOrder(train_ids, steps, batch_size, seed)[:]


def spread_batches(train_ids: np.ndarray, steps: int, batch_size: int, seed: int, sees: np.ndarray) -> np.ndarray:
    """The cameras of every batch [steps, B], consecutive batches seeing different cells where possible.

    train_ids: np.ndarray  # [C_train] training cameras
    sees: np.ndarray       # [C, K] bool, the cells each camera sees
    Each pass over the cameras (a seeded permutation) is used up before the next begins, so every
    camera is visited once per pass, as in ``shuffled_batches``. The loop is over batches; the choice
    within a batch is vectorised over the candidate cameras.
    """
    return BatchOrder(train_ids, steps, batch_size, seed, sees)[:]


class BatchOrder:
    """The cameras of every batch of a run as an [steps, B] array would give them (``order[i]``: [B],
    ``order[a:b]``: [b - a, B]) — the ``shuffled`` order, or with ``sees`` ([C, K] bool, the cells each
    camera sees) the ``spread`` one — made a pass of camera permutations at a time as batches are read.

    It keeps the passes still in use and the batches of the last read, so memory does not depend on
    ``steps``. Reads are meant to go forward (a trainer's steps and windows); one that goes back before
    the batches kept starts again from the seed, which makes the same batches.
    """

    def __init__(self, train_ids: np.ndarray, steps: int, batch_size: int, seed: int, sees: np.ndarray | None = None):
        self.train_ids, self.sees = np.asarray(train_ids), sees
        self.shape = (steps, batch_size)
        self.seed = seed
        self._restart()

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, key) -> np.ndarray:
        if isinstance(key, slice):
            start, stop, stride = key.indices(len(self))
            if stride != 1:
                raise IndexError("BatchOrder: only contiguous slices")
            return self._batches(start, max(start, stop))
        index = operator.index(key)
        index += len(self) if index < 0 else 0
        if not 0 <= index < len(self):
            raise IndexError(f"batch {key} of {len(self)}")
        return self._batches(index, index + 1)[0]

    def _restart(self) -> None:
        self._gen = torch.Generator().manual_seed(self.seed)
        self._stream = np.empty(0, self.train_ids.dtype)  # the passes kept, in stream order
        self._taken = np.empty(0, bool)                   # which of them a batch took
        self._previous = None if self.sees is None else np.zeros(self.sees.shape[1], bool)
        self._made, self._first = [], 0                   # batches kept: batch self._first on

    def _batches(self, start: int, stop: int) -> np.ndarray:
        """Batches [start, stop) as [stop - start, B]."""
        if start < self._first:
            self._restart()
        drop = min(start - self._first, len(self._made))
        del self._made[:drop]
        self._first += drop
        while self._first + len(self._made) < stop:
            self._made.append(self._next_batch())
            if self._first < start:
                del self._made[0]
                self._first += 1
        rows = self._made[start - self._first:stop - self._first]
        return np.array(rows, self.train_ids.dtype).reshape(stop - start, self.shape[1])

    def _next_batch(self) -> np.ndarray:
        """The cameras [B] of the next batch; passes before the first not wholly taken are dropped."""
        per_pass, batch_size = len(self.train_ids), self.shape[1]
        while len(self._taken) >= per_pass and self._taken[:per_pass].all():
            self._stream, self._taken = self._stream[per_pass:], self._taken[per_pass:]
        while len(self._stream) < per_pass + max(per_pass, batch_size):  # the current pass and the next
            perm = torch.randperm(per_pass, generator=self._gen).numpy()
            self._stream = np.concatenate([self._stream, self.train_ids[perm]])
            self._taken = np.concatenate([self._taken, np.zeros(per_pass, bool)])
        if self.sees is None:  # shuffled: the next B cameras of the stream
            pick = int(np.argmin(self._taken)) + np.arange(batch_size)
        else:
            pick = self._spread_pick(per_pass, batch_size)
        self._taken[pick] = True
        return self._stream[pick]

    def _spread_pick(self, per_pass: int, batch_size: int) -> np.ndarray:
        """Stream positions [B] of the next ``spread`` batch (the current pass starts at position 0)."""
        sees, stream = self.sees, self._stream
        left = np.flatnonzero(~self._taken[:per_pass])
        forced = left if len(left) <= batch_size else np.empty(0, np.int64)  # the end of a pass goes first
        pool = left if len(forced) == 0 else per_pass + np.arange(per_pass)
        conflicts = (sees[stream[pool]] & self._previous).any(axis=1)
        pick = _coherent_pick(sees, stream, forced, pool[~conflicts], pool[conflicts], batch_size)
        self._previous = sees[stream[pick]].any(axis=0)
        return pick


def _coherent_pick(sees, stream, forced, clear, blocked, batch_size) -> np.ndarray:
    """Stream positions [B] of one batch: ``forced`` ones, then from ``clear`` (then ``blocked``) one at a
    time the candidate that adds the fewest new cells to the batch (ties: stream order), so a batch stays
    in one part of the scene and leaves the other parts to the next batch. Returned in stream order."""
    union = sees[stream[forced]].any(axis=0)
    pick = list(forced)
    for pool in (clear, blocked):
        if len(pick) >= batch_size or not len(pool):
            continue
        rows = sees[stream[pool]]                # [p, K] the candidates' cells, gathered once per pool
        added = (rows & ~union).sum(axis=1)      # [p] new cells each would add, kept up to date below
        taken = np.iinfo(added.dtype).max        # above any count: a picked candidate is never the argmin
        for _ in range(min(batch_size - len(pick), len(pool))):
            k = int(np.argmin(added))
            pick.append(pool[k])
            new = rows[k] & ~union
            union |= new
            added -= rows[:, new].sum(axis=1)    # the cells now in the batch no longer count as new
            added[k] = taken
    return np.sort(np.array(pick, dtype=np.int64))
