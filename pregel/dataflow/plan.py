"""What a dataflow run takes and gives back: the program (``DataflowProgram``), the plan (``DataflowPlan``;
``depth_phases`` gives the phases of BSP mode), what a fire knows of the run (``DataflowContext``), and each
rank's account of the run (``DataflowResult``, with its ``Span``s when traced).

A ``DataflowProgram`` says what each vertex sends (``payload_size``, ``broadcasts``) and computes
(``fire``); a ``DataflowPlan`` says on which rank each vertex fires, which ready vertex goes first
(``priority``) and, for the bulk-synchronous baseline, in which superstep (``phase``).
"""

import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from pregel.graph_io import GraphData


class DataflowProgram:
    """Hooks of a program whose vertices each fire once, when all their inputs have arrived.

    Subclasses override what they need; the defaults describe a pure dependency DAG (every vertex
    broadcasts an empty payload and computes nothing). Payloads are 1-D contiguous float32 arrays.
    """

    def payload_size(self, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
        """[k] int64 >= 0: float32 elements of the payload on each edge ``src[j] -> dst[j]`` ([k] int64
        each). A broadcasting source must give every one of its out-edges the same size."""
        return np.zeros(len(src), dtype=np.int64)

    def broadcasts(self, vertices: np.ndarray) -> np.ndarray:
        """[k] bool: True if vertex ``vertices[j]`` sends ONE payload to all its out-neighbours
        (once per destination rank); False if it sends one payload per out-edge."""
        return np.ones(len(vertices), dtype=bool)

    def servable(self, vertices: np.ndarray) -> np.ndarray:
        """[k] bool: whether vertex ``vertices[j]`` may fire at another fire's serving point
        (``DataflowContext.serve``), inside that fire (default: none may)."""
        return np.zeros(len(vertices), dtype=bool)

    def fire(self, ctx, vertex: int, inputs: dict):
        """Compute ``vertex``; ``inputs`` maps each in-neighbour to its read-only float32 payload.

        Returns one float32 array (a broadcasting vertex), a dict {out-neighbour: float32 array}
        with one entry per out-neighbour (a per-edge vertex), or None; the return value of a vertex
        without out-neighbours is ignored. Returned arrays must not be modified afterwards.
        """
        return None


@dataclass
class DataflowPlan:
    """Where and when the vertices of a DAG fire; the same on every rank.

    graph: the DAG (CSR over sources; repeated edges count once); rank: [N] int64 rank that fires
    each vertex; priority: [N] float64, higher fires first among the ready vertices of a rank;
    phase: [N] int64 superstep of each vertex in BSP mode, strictly increasing along every edge.
    sequence: optional [N] int64, in dataflow mode: a vertex with sequence s >= 0 fires only once every
    vertex of its rank with a sequence below s - ``lookahead`` has begun firing (-1: free), so a rank
    does not start a vertex far ahead in its sequence while an earlier one is about to be ready. It must
    not decrease along any path between two sequenced vertices (else a rank could wait for itself).
    hold_share: with a sequence, how long a rank holds a ready vertex back when it has nothing else to fire:
    once it has had nothing ready for ``hold_share`` times the mean seconds of its fires of sequenced vertices
    so far, it lets the held vertex of the lowest sequence (the highest priority there) fire before its turn.
    A wait for an earlier vertex's inputs is then cut short, as a ski rental is: the rank waits a share of
    what starting the later vertex costs, then starts it. ``math.inf`` (the default): held until its turn.
    """

    graph: GraphData
    rank: np.ndarray
    priority: np.ndarray
    phase: np.ndarray
    sequence: np.ndarray | None = None
    lookahead: int = 0
    hold_share: float = math.inf


def nothing_to_serve() -> None:
    """The ``serve`` of a context with nothing to serve: BSP mode, and a run that has ended."""
    return None


@dataclass
class DataflowContext:
    """What ``fire`` knows about the run: this rank, the number of ranks and the plan; and ``serve``, which
    a fire may call part way to let the rank take in arrived messages and fire its ready servable
    vertices first (``DataflowProgram.servable``; dataflow mode; a no-op in BSP mode)."""

    rank: int
    size: int
    plan: DataflowPlan
    serve: object = nothing_to_serve


class Span(NamedTuple):
    """One interval of a rank's time, in seconds from the common start of the run.

    kind: 'compute' (a fire), 'send' (routing a vertex's outputs), 'recv' (taking in arrived
    messages), 'wait' (blocked on messages or on the last sends), 'barrier' (BSP mode);
    vertex: the vertex fired or routed, else -1.
    """

    kind: str
    start: float
    end: float
    vertex: int


@dataclass
class DataflowResult:
    """One rank's account of ``run_dataflow``.

    compute_seconds: in ``fire``; comm_seconds: routing outputs and taking in messages (the
    Alltoallv in BSP mode); wait_seconds: blocked on messages, on the last sends or at barriers;
    messages and bytes: to and from other ranks only; fired: vertices fired here; elapsed_seconds:
    from the common start to this rank's end; spans: the ``Span``s when traced, else None; let_go: vertices
    fired before their sequence's turn, the hold given up (``DataflowPlan.hold_share``).
    """

    mode: str
    fired: int
    compute_seconds: float
    comm_seconds: float
    wait_seconds: float
    messages_sent: int
    bytes_sent: int
    messages_received: int
    bytes_received: int
    elapsed_seconds: float
    spans: list | None
    let_go: int = 0


def depth_phases(graph: GraphData) -> np.ndarray:
    """[N] int64 phases for BSP mode: the length of the longest path from a vertex without inputs.

    Raises ``ValueError`` if the graph has a cycle. Loops over depth levels, not vertices.
    """
    n = graph.num_nodes
    missing = np.bincount(graph.indices, minlength=n).astype(np.int64)
    phase = np.full(n, -1, dtype=np.int64)
    frontier, level = np.flatnonzero(missing == 0), 0
    while frontier.size:
        phase[frontier] = level
        heads = graph.indices[_csr_rows(graph.indptr, frontier)]
        arrived = np.bincount(heads, minlength=n)
        missing -= arrived
        frontier, level = np.flatnonzero((arrived > 0) & (missing == 0)), level + 1
    if (phase < 0).any():
        raise ValueError(f"depth_phases: the graph has a cycle through vertex {np.flatnonzero(phase < 0)[0]}")
    return phase


def _csr_rows(indptr: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Positions of the entries of ``rows`` [k] in a CSR array with ``indptr`` [n + 1], row by row."""
    starts, counts = indptr[rows], indptr[rows + 1] - indptr[rows]
    shift = np.repeat(starts - (np.cumsum(counts) - counts), counts)
    return (shift + np.arange(counts.sum(), dtype=np.int64)).astype(np.int64)
