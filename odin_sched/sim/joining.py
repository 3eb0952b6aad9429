"""A what-if of the simulator, NOT what the runtime does: fewer messages by joining them (docs/simulator-measurements.md,
"Joining messages: a what-if").

The runtime sends one message per group (source vertex, destination rank), each costing its sender
``CostProfile.overhead``. Here a rank holds the messages of its fires and sends those to one destination rank
with one join key as one message: one overhead, one latency, their words summed (or the key's, below); the
receiver gets all its groups when it arrives. A rank holds them while it serves at a serving point
(``flush`` 'serving') or until it begins an image part or waits (``flush`` 'run': also an image's gradients
with the cell versions fired right after it). Groups of key -1 go alone, at once. Two designs, each a hook for
``simulate``'s ``joining`` (called with each planned window and its ``Routes``; returns the key [G] of every
group and the words [K] of a joined message of each key, or None for its groups' words summed):

- ``DynamicJoin``: every group key 0 (joined by destination alone);
- ``MergedVersions``: the planner merging the cell versions of one owner whose in-neighbours are the same
  (they become ready at the same instant in every execution) into one vertex: the versions of one such
  class join (key: the class), and the merged vertex's message carries every member's cell, read or not
  (words: the class's). ``stats`` counts, per window, the version messages and words as sent today and
  merged, exactly (independent of the simulated timing).
"""
import numpy as np


class DynamicJoin:
    """``simulate``'s ``joining`` hook for design (a): messages joined by destination rank (module docstring);
    flush: 'serving' or 'run'."""

    def __init__(self, flush: str = "run"):
        if flush not in ("serving", "run"):
            raise ValueError(f"flush must be 'serving' or 'run', got {flush!r}")
        self.flush = flush

    def __call__(self, win, routes) -> tuple:
        """(key [G] int64: 0 for every group of ``routes``, None)."""
        return np.zeros(len(routes.group_src), np.int64), None


def same_inputs(graph, vertices: np.ndarray, owner: np.ndarray) -> np.ndarray:
    """[N] int64 class of every vertex of ``graph`` (a GraphData over N vertices): the ``vertices`` [k] of one
    ``owner`` [N] rank with the same in-neighbours (at least one) share a class (0, 1, ...); every other vertex
    -1, as are classes of one vertex. Hashed (two sums of random 64-bit words over the in-neighbours), then
    each member checked edge by edge against its class's first."""
    n = graph.num_nodes
    src = np.repeat(np.arange(n, dtype=np.int64), np.diff(graph.indptr))
    key = np.unique(np.asarray(graph.indices, np.int64) * n + src)  # distinct in-edges by (dst, src)
    dst, src = key // max(n, 1), key % max(n, 1)
    degree = np.bincount(dst, minlength=n)
    first = np.searchsorted(dst, np.arange(n))  # where each vertex's in-edges begin
    cand = np.asarray(vertices, np.int64)[degree[vertices] > 0]
    words = np.random.default_rng(0).integers(0, 2 ** 63, (2, n), dtype=np.int64).astype(np.uint64)
    sums = [np.concatenate([np.zeros(1, np.uint64), np.cumsum(w[src], dtype=np.uint64)]) for w in words]
    hashes = [(s[first[cand] + degree[cand]] - s[first[cand]]).view(np.int64) for s in sums]  # mod 2^64
    rows = np.stack([owner[cand], degree[cand], *hashes], axis=1)
    cls = np.full(n, -1, np.int64)
    cls[cand] = np.unique(rows, axis=0, return_inverse=True)[1].reshape(-1)
    cls = _renumbered(cls)
    members = np.flatnonzero(cls >= 0)
    lead = members[np.unique(cls[members], return_index=True)[1]]
    each = np.repeat(members, degree[members])
    at = np.arange(len(each)) - np.repeat(np.cumsum(degree[members]) - degree[members], degree[members])
    if not np.array_equal(src[first[each] + at], src[first[lead[cls[each]]] + at]):
        raise RuntimeError("same_inputs: a hash collision put vertices of different in-neighbours in one class")
    return cls


class MergedVersions:
    """``simulate``'s ``joining`` hook for design (b): cell versions of one owner with the same in-neighbours
    merged (module docstring); the merged vertex's messages wait for all its members (``flush`` 'run').
    initial: whether a window's initial versions (no in-neighbours: all ready at its start) merge too, per
    owner. ``stats``: per window, dict of version messages and words today and merged."""

    flush = "run"

    def __init__(self, initial: bool = False):
        self.initial = initial
        self.stats = []

    def __call__(self, win, routes) -> tuple:
        """(key [G] int64: the class of each group's source, -1 alone; words [K] of each class's message)."""
        steps, plan = win.steps, win.plan
        n = plan.graph.num_nodes
        versions = np.flatnonzero(~steps.is_image(np.arange(n)))
        cls = same_inputs(plan.graph, versions, plan.rank)
        if self.initial:  # the initial versions (no inputs) of each owner: one class per owner
            first = versions[steps.version_batch[steps.version_index(versions)] < 0]
            base = int(cls.max(initial=-1)) + 1
            cls[first] = base + plan.rank[first]
            cls = _renumbered(cls)
        payload = np.zeros(n)  # words a version sends (its groups' size, broadcast: the same to every rank)
        payload[routes.group_src] = routes.group_size
        classes = int(cls.max(initial=-1)) + 1
        member = cls >= 0
        words = np.bincount(cls[member], payload[member], minlength=classes)
        key = np.where(routes.remote, cls[routes.group_src], -1)
        remote = routes.remote & ~steps.is_image(routes.group_src)
        merged = np.unique(np.where(key >= 0, key, -2 - routes.group_src)[remote] * (routes.group_rank.max() + 1)
                           + routes.group_rank[remote], return_index=True)[1]
        g = np.flatnonzero(remote)[merged]
        self.stats.append({"messages": int(remote.sum()), "merged_messages": len(merged),
                           "words": float(routes.group_size[remote].sum()),
                           "merged_words": float(np.where(key[g] >= 0, np.append(words, 0.0)[key[g]],  # -1: alone
                                                          routes.group_size[g]).sum())})
        return key, words


def _renumbered(cls: np.ndarray) -> np.ndarray:
    """``cls`` [N] with the classes of one member set to -1 and the rest numbered 0, 1, ... in order."""
    out = np.full(len(cls), -1, np.int64)
    member = cls >= 0
    values, inverse, counts = np.unique(cls[member], return_inverse=True, return_counts=True)
    many = counts > 1
    number = np.cumsum(many) - 1
    out[np.flatnonzero(member)] = np.where(many[inverse.reshape(-1)], number[inverse.reshape(-1)], -1)
    return out
