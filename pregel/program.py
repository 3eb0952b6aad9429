"""``VertexProgram``, the class users subclass, and the ``Context`` the engine hands it.

A vertex program is vectorised: every hook sees arrays over the rank's owned vertices (NumPy
arrays or torch tensors), never one vertex at a time — like PyG's ``message(x_j)`` sees all edges.
One superstep is::

    values = message(ctx, state)            # what each owned vertex sends along its out-edges
    (values travel once per rank that needs them, then are combined per destination)
    state, active = apply(ctx, state, gathered)

and the run ends when no vertex is active (a vertex that receives a message computes again), at
``max_supersteps``, or when ``master`` says so. Every hook has a default that does nothing useful,
so a program overrides only what it needs (PageRank overrides ``init``, ``message`` and ``apply``).
"""

from dataclasses import dataclass, field

import numpy as np

from pregel.arrays import as_numpy
from pregel.fetch import fetch_rows

COMBINERS = ("sum", "min", "max", "mean", "softmax", None)


@dataclass(frozen=True)
class Option:
    """A constructor argument of a vertex program that ``pregel run`` sets from the flag of the same
    name (``max_iter`` from ``--max-iter``): its type, default and a line of help."""

    name: str
    type: type
    default: object
    help: str


class VertexProgram:
    """Base class of vertex programs. Override the hooks you need.

    Class attributes:

    * ``combiner`` — how messages to one vertex are combined: ``'sum'``, ``'min'``, ``'max'``,
      ``'mean'`` (each with an identity element, so the sending rank pre-reduces them: *partial
      gather*); ``'softmax'`` (attention: ``edge_message`` returns per-edge ``(logits [E, H],
      values [E, H, C])`` and ``apply`` gets ``SoftmaxParts``, whose ``normalized()`` is
      ``Σ softmax(logits) · values`` per head); or ``None``: ``apply`` then gets every message as
      ``Messages`` (a CSR by receiver). It is read every superstep, so a program may change it.
    * ``weighted`` — multiply each message by its edge's weight (GCN-style normalisation), or add
      the weight to it when ``weight_op`` is ``'add'`` (a path's length: with the ``min`` combiner,
      shortest paths' relaxation ``min(dist[u] + w)``). Either runs in the fused gather, with no
      message per edge. On a graph without weights the messages go as they are.
    * ``symmetric`` — follow every edge both ways (the engine loads the reverse edges too).
    * ``max_supersteps`` — a default cap, overridden by the ``run`` argument.
    * ``uses_features`` — whether the program reads ``ctx.features``: when False the engine does not
      load ``/nodes/features`` (``ctx.features`` is None), which the built-in analytics do not need
      (10M vertices with 16 features: 0.6 GB of PageRank's 2.5 GB peak on one rank).
    * ``rowwise`` — whether ``message`` and ``apply`` compute each vertex's row from that vertex's
      rows alone (its state, gathered value and ``ctx`` entries; no aggregates over all rows). The
      engine may then call them on only the rows that send (``message``) or that send or receive
      (``apply``), where ``ctx.num_local``, ``ctx.global_ids`` and the other per-vertex arrays are
      those rows' (``ctx.rows``): with a ``min`` or ``max`` combiner, a superstep in which few vertices
      send costs time in proportion to them and their edges, not to the rank's vertices (a search
      front crossing a road network or a mesh). Set in bfs and sssp; off by default. Read every
      superstep, so a program may change it.
    * ``blockwise`` — whether ``apply`` may change the rows of vertices that neither were active nor
      received (it relaxes the edges among the rank's own vertices, as sssp does on long searches): the
      engine then keeps every row ``apply`` returns, where it keeps only those vertices' otherwise
      (Pregel's rule: a vertex computes when active or messaged). Read every superstep; off by default.

    A built-in combiner gives the same result as ``combiner = None`` plus the same reduction in
    ``apply``; for example ``'min'`` equals ``np.minimum.reduceat`` over ``Messages`` segments
    (tests assert this).
    """

    combiner: str | None = "sum"
    weighted: bool = False
    weight_op: str = "mul"
    symmetric: bool = False
    max_supersteps: int | None = None
    uses_features: bool = True
    rowwise: bool = False
    blockwise: bool = False
    #: the constructor's arguments that ``pregel run`` sets from flags (``Option``s; none by default)
    options: tuple = ()

    @classmethod
    def from_options(cls, values: dict) -> "VertexProgram":
        """The program made from ``values`` (option name -> value) of its ``options``."""
        return cls(**{option.name: values[option.name] for option in cls.options})

    def summary(self, values) -> list[str]:
        """Lines ``pregel run`` prints about a finished run (``values``: the output [N], on rank 0)."""
        return []

    def warnings(self, stopped_by: str) -> list[str]:
        """Warnings ``pregel run`` prints about how the run stopped (``stopped_by``: 'halted',
        'master' or 'max_supersteps')."""
        return []

    def combiners(self) -> dict:
        """Every combiner a run of this program uses, keyed by what uses it (the GPU path refuses
        unsupported ones before the run): ``{class name: combiner}``, unless overridden by a
        program that changes ``combiner`` between supersteps."""
        return {type(self).__name__: self.combiner}

    def check_input(self, ctx: "Context") -> str | None:
        """Validate the program's options against the loaded graph before anything runs: return
        a one-line problem (e.g. a source vertex out of range) or None. Called on every rank; if
        any rank reports a problem, every rank stops with it (never a hang)."""
        return None

    def init(self, ctx: "Context"):
        """Initial state of the owned vertices: an array [n] / [n, F] (NumPy or torch) or a dict of
        them, optionally ``(state, active)`` with ``active`` a bool [n] array or a bool (default:
        every vertex active)."""
        return ctx.xp.full(ctx.num_local, 0.0)

    def message(self, ctx: "Context", state):
        """Value each owned vertex sends along all its out-edges: [n] or [n, F], or None to send
        nothing. Only vertices in ``ctx.active`` send, unless ``(values, senders)`` is returned
        with ``senders`` a bool [n] mask. Messages to arbitrary vertices: ``ctx.send_to``."""
        return None

    @property
    def per_edge(self) -> bool:
        """Whether ``edge_message`` transforms each edge's message this superstep (default: when
        ``edge_message`` is overridden). Without it, messages are reduced in one fused pass."""
        return type(self).edge_message is not VertexProgram.edge_message

    def edge_message(self, ctx: "Context", src_values, dst_values, weights):
        """Per-edge transform, vectorised over a batch of E edges (in a superstep in which only some
        vertices send, the senders' edges only): ``src_values`` [E] / [E, F] the
        senders' values, ``dst_values`` [E, k] the receivers' ``destination_values`` (or None),
        ``weights`` [E] float32 (ones if the file has none); ``ctx.edge_src`` / ``ctx.edge_dst``
        hold the edges' global ids. Returns the per-edge messages (``(logits, values)`` for the
        softmax combiner). Used only when ``per_edge`` is true."""
        return src_values

    def fused_softmax(self, ctx: "Context", ext, dst_values, indptr, indices, ext_ids, row_ids, ghosts=None):
        """Optional one-pass gather for the softmax combiner: ``(m, s, acc)`` partial softmax sums
        ([n, H], [n, H], [n, H, C]; see ``pregel.softmax_parts``) of the destination-side edges in
        CSR ``indptr`` [n + 1] / ``indices`` [E] (rows of ``ext`` [n + g, k], the owned then ghost
        message rows, whose global ids are ``ext_ids``; ``row_ids`` [n] the owned ids), from
        ``dst_values`` [n, k']; the same as ``edge_message`` followed by the softmax, without
        per-edge arrays. With ``ghosts`` [g, k] (not None), ``ext`` holds the n owned rows only and
        the ghost rows are ``ghosts``. None (the default): the engine calls ``edge_message`` on
        every edge."""
        return None

    def destination_values(self, ctx: "Context", state):
        """Optional per-vertex terms [n, k] that ``edge_message`` needs from the receiving end of
        each edge (e.g. GAT's destination attention score); None when not needed."""
        return None

    def apply(self, ctx: "Context", state, gathered):
        """New state from the combined messages ``gathered`` ([n] / [n, F]; ``Messages`` when
        ``combiner`` is None). Vertices that received nothing (``~ctx.received``) see the
        combiner's identity: 0 for sum/mean, +inf for min, -inf for max. Returns
        ``(state, active)``; vertices neither active nor receiving keep their state."""
        return state, False

    def master(self, ctx: "Context", aggregates: dict) -> bool:
        """Global decision after each superstep, on rank 0 (broadcast): True stops the run.
        ``aggregates`` holds this superstep's reduced aggregator values."""
        return False

    def progress(self, ctx: "Context", aggregates: dict) -> str:
        """A few words for the progress line after each superstep, on rank 0, beside the number of
        active vertices: what tells how far the run is from stopping when that number does not
        (PageRank's L1 change, wcc's labels changed). ``aggregates`` as for ``master``."""
        return ""

    def output(self, ctx: "Context", state):
        """The values written to ``/values``: [n] or [n, F] per owned vertex (default: the state)."""
        return state


@dataclass
class Messages:
    """All messages received by the owned vertices when a program has no combiner.

    indptr: [n + 1] int64, values: [M] or [M, F]; the messages of local vertex ``i`` are
    ``values[indptr[i]:indptr[i + 1]]``, in order of the sender's global id (direct messages last).
    """

    indptr: np.ndarray
    values: np.ndarray


class VertexArrays:
    """The per-vertex arrays a ``Context`` reads (``owned``, the degrees, ``self_loops``, ``features``,
    ``labels``) of ``source`` (a graph, or another ``VertexArrays``), each passed once through ``take``
    (an array to an array: a device copy, some rows) when first read; None stays None."""

    NAMES = ("owned", "out_degree", "in_degree", "self_loops", "features", "labels")

    def __init__(self, source, take):
        self._source, self._take = source, take

    def __getattr__(self, name):
        if name not in VertexArrays.NAMES:
            raise AttributeError(name)
        value = getattr(self._source, name)
        value = None if value is None else self._take(value)
        setattr(self, name, value)
        return value


@dataclass
class Context:
    """What a vertex program may read about the run and its rank's vertices.

    global_ids, out_degree, in_degree, self_loops: [n] int64 (over the whole graph);
    features: [n, F] float32 or None; labels: [n] int64 or None; active: [n] bool before
    ``message``; received: [n] bool in ``apply``; aggregated: the aggregator values reduced after
    the previous superstep (or init); edge_src, edge_dst: [E] global ids, in ``edge_message`` (computed
    when first read: a program that does not read them does not pay for them); rows: [k] int64 the
    owned rows (local indices, ascending) that a ``rowwise`` program's hook sees, or None for all
    (the per-vertex arrays, ``active`` and ``received`` are then those rows'). The per-vertex arrays are NumPy arrays, or torch tensors on the GPU with ``--device cuda``;
    ``xp`` is their namespace: the ``numpy`` module, or a ``pregel.arrays.TorchNamespace`` with the
    same names (``xp.where``, ``xp.minimum``, ``xp.astype(x, xp.int64)``, ...), so one program runs
    on both.
    """

    graph: object
    superstep: int = 0
    active: np.ndarray | None = None
    received: np.ndarray | None = None
    _edge_ids: object = None  # edge_message's batch: its (src, dst) ids, a function giving them, or None
    aggregated: dict = field(default_factory=dict)
    xp: object = np
    vertices: object = None  # where global_ids, degrees, features, labels are read (default: graph)
    rows: np.ndarray | None = None
    _pending_aggregates: dict = field(default_factory=dict)
    _direct: list = field(default_factory=list)

    def __post_init__(self):
        if self.vertices is None:
            self.vertices = self.graph

    def forget_features(self) -> None:
        """Drop the run's references to ``features`` (the graph's, and the copy the context read, such
        as a device copy), which read None from then on: a program whose state keeps what it needs of
        them lets them be freed. Only for a graph that nothing reads afterwards (one a job loaded for
        itself)."""
        self.vertices.features = None
        self.graph.features = None

    @property
    def edge_src(self):
        """[E] global source ids of ``edge_message``'s batch of edges (None outside it)."""
        return self._batch_ids()[0]

    @property
    def edge_dst(self):
        """[E] global destination ids of ``edge_message``'s batch of edges (None outside it)."""
        return self._batch_ids()[1]

    def _set_edges(self, ids) -> None:
        """Name the edges of the coming ``edge_message`` call: their (src [E], dst [E]) global ids, a
        function returning them (called at the first read of ``edge_src`` or ``edge_dst``), or None
        once the call is over."""
        self._edge_ids = ids

    def _batch_ids(self) -> tuple:
        if callable(self._edge_ids):
            self._edge_ids = self._edge_ids()
        return (None, None) if self._edge_ids is None else self._edge_ids

    @property
    def rank(self) -> int:
        return self.graph.comm.rank

    @property
    def size(self) -> int:
        return self.graph.comm.size

    @property
    def num_vertices(self) -> int:
        """Global number of vertices N."""
        return self.graph.num_nodes

    @property
    def num_local(self) -> int:
        """Number of owned vertices the hook sees (``len(rows)`` when a subset)."""
        return self.graph.num_local if self.rows is None else len(self.rows)

    @property
    def global_ids(self) -> np.ndarray:
        return self.vertices.owned

    @property
    def out_degree(self) -> np.ndarray:
        return self.vertices.out_degree

    @property
    def in_degree(self) -> np.ndarray:
        return self.vertices.in_degree

    @property
    def self_loops(self) -> np.ndarray:
        return self.vertices.self_loops

    @property
    def features(self):
        return self.vertices.features

    @property
    def labels(self):
        return self.vertices.labels

    def aggregate(self, name: str, value, op: str = "sum") -> None:
        """Contribute ``value`` (a number or small array) to the global aggregator ``name``.

        Call from ``init`` or ``apply``; every rank's contributions are reduced with ``op``
        (sum, min or max) after the superstep and visible in ``aggregated`` (and to ``master``).
        Several calls on one rank in one superstep are reduced too.
        """
        if op not in ("sum", "min", "max"):
            raise ValueError(f"aggregator op must be sum, min or max, got {op!r}")
        value = as_numpy(value)
        if name in self._pending_aggregates:
            previous_op, previous = self._pending_aggregates[name]
            if previous_op != op:
                raise ValueError(f"aggregator {name!r} used with ops {previous_op!r} and {op!r}")
            value = REDUCERS[op](previous, value)
        self._pending_aggregates[name] = (op, value)

    def send_to(self, ids, values) -> None:
        """Send messages to arbitrary global vertex ids (from ``message`` only).

        ids: [k] int global ids; values: [k] or [k, F], same dtype and width as the edge messages.
        They are combined with the program's combiner on this rank before they travel.
        """
        ids, values = as_numpy(ids), as_numpy(values)
        if ids.size and not np.issubdtype(ids.dtype, np.integer):
            raise ValueError(f"send_to: ids must be integers, got {ids.dtype} (a float id would be truncated)")
        ids = ids.astype(np.int64, copy=False)
        if len(ids) != len(values):
            raise ValueError(f"send_to got {len(ids)} ids and {len(values)} values")
        if len(ids) and (ids.min() < 0 or ids.max() >= self.num_vertices):
            raise ValueError(f"send_to: ids must lie in [0, {self.num_vertices})")
        self._direct.append((ids, values))

    def fetch(self, ids, values) -> np.ndarray:
        """[k] / [k, F] the rows of ``values`` ([n] / [n, F]: each rank's rows of its owned vertices,
        such as its state) at the global vertex ids ``ids`` [k] int, read from their owners: what a
        vertex needs from vertices that are not its neighbours (``wcc`` reads its parent's label).
        Collective: every rank calls it in the same hook of each superstep (``message`` and ``apply``
        are called once a superstep on every rank), so it needs all of the rank's rows and is not for
        a ``rowwise`` program. Host arrays only."""
        if self.rows is not None:
            raise ValueError("fetch needs every owned row: a rowwise program's hooks may see only some")
        return fetch_rows(self.graph, as_numpy(ids), as_numpy(values))


#: The reduction of each aggregator op and of the sum/min/max combiners.
REDUCERS = {"sum": np.add, "min": np.minimum, "max": np.maximum}
