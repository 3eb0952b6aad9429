"""The shared-memory row transfer (pregel/shared_rows.py) at this job's size (tests/test_shared_rows.py).

Usage: mpiexec -n P python -m mpi4py tests/mpi_scripts/shared_rows.py MODE OUT_FOLDER
Every rank writes OUT_FOLDER/rank{r}.json; modes:
  rounds    random exchange plans (every rank draws every rank's rows and plan from one seed), rows of
            several kinds and sizes, so the window grows; each round's received rows against the
            NumPy twin (every sender's rows sliced by its plan); the flags while the rows of a round
            are held and after they are dropped; a round with KEEP_BELOW = 0, whose segment must be
            emptied once its rows are dropped
  exchange  pregel.exchange.exchange on a loaded graph whose rows are a function of the global id:
            the ghost rows must be that function of ghost_ids, through the window and through Alltoallv,
            with hubs' direct messages
  prefer    the same exchange with KEEP_BELOW = 0 (the window runs emptied) and HEAP_BLOCK_LIMIT set
            so that Alltoallv's buffers come from the heap on every rank, on none, on every rank but
            the last; the path taken and the ghost rows
  error     the last rank hands the transfer no rows (None): it raises inside the transfer while the
            others wait at the barrier; the job must end (mpi4py's runner aborts it), not hang
"""

import json
import sys

import numpy as np
from mpi4py import MPI

from pregel import shared_rows
from pregel.comm import Comm

MODE, OUT = sys.argv[1], sys.argv[2]
comm = Comm(MPI.COMM_WORLD)
SIZE, RANK = comm.size, comm.rank
KINDS = [(np.float32, (4,)), (np.float64, ()), (np.float32, (16,)), (np.float64, (3,)), (np.float32, (8,))]


def plan(seed: int, most: int):
    """Every rank's rows count [P], and counts [P, P] / ids [P][P] of the rows q sends to r."""
    rng = np.random.default_rng(seed)
    n = rng.integers(0, most, size=SIZE)
    counts = np.array([[0 if q == r or not n[q] else rng.integers(0, 2 * n[q]) for r in range(SIZE)]
                       for q in range(SIZE)])
    ids = [[rng.integers(0, max(n[q], 1), size=counts[q, r]) for r in range(SIZE)] for q in range(SIZE)]
    return n, counts, ids


def rows_of(seed: int, q: int, n: int, kind) -> np.ndarray:
    dtype, shape = kind
    return np.random.default_rng((seed, q)).standard_normal((n,) + shape).astype(dtype)


def one_round(window, seed: int, most: int, kind):
    """(received rows, expected rows) of one random plan sent through ``window``."""
    n, counts, ids = plan(seed, most)
    values = rows_of(seed, RANK, n[RANK], kind)
    received = int(counts[:, RANK].sum())
    width = values.dtype.itemsize * int(np.prod(kind[1], dtype=np.int64))
    flags = comm.allgather(window.flags(received * width))
    assert not any(f & shared_rows.BUSY for f in flags)
    if any(f & shared_rows.GROW for f in flags):
        window.grow(received * width)
    starts = np.cumsum(counts, axis=0) - counts  # [q, r]: the row where q's rows begin on r
    got = window.transfer(values, np.concatenate(ids[RANK]).astype(np.int64), counts[RANK], starts[RANK],
                          received)
    expected = [rows_of(seed, q, n[q], kind)[ids[q][RANK]] for q in range(SIZE)]
    return got, np.concatenate(expected) if expected else np.zeros((0,) + kind[1])


def rounds():
    window = shared_rows.shared_rows(comm)
    report = {"window": window is not None, "equal": [], "kinds": []}
    for i, (most, kind) in enumerate(zip([50, 200, 3000, 10, 20000], KINDS)):
        got, expected = one_round(window, 100 + i, most, kind)
        report["equal"].append(bool(np.array_equal(got, expected)) and got.shape == expected.shape)
        report["kinds"].append([str(got.dtype), list(got.shape[1:])])
        if i == 2:  # held: this rank's segment is busy until the rows are dropped
            report["held_flags"] = window.flags(0)
            view = got[1:]
            del got
            report["view_flags"] = window.flags(0)  # a view still holds the segment
            del view
            report["dropped_flags"] = window.flags(0)
        else:
            del got
    shared_rows.KEEP_BELOW = 0  # every exchange hands its pages back
    got, expected = one_round(window, 200, 30000, (np.float32, (32,)))
    report["equal_released"] = bool(np.array_equal(got, expected))
    received = got.nbytes
    del got  # the segment's whole pages are emptied now
    segment = window.segments[RANK][:received // 4096 * 4096]
    report["emptied"] = bool(received >= 4096 and not segment.any())
    got, expected = one_round(window, 201, 30000, (np.float32, (32,)))
    report["equal_after_release"] = bool(np.array_equal(got, expected))
    return report


def rows_of_ids(ids):
    """The rows [k, 3] of global ids ``ids`` [k]."""
    return np.stack([np.sin(ids), np.cos(0.5 * ids), ids % 7], axis=1).astype(np.float32)


def small_graph():
    """(GraphData, this rank's DistributedGraph) of a 3,000-vertex power-law graph with hubs."""
    from pregel.dgraph import HubOptions, load_graph
    from pregel.generate import generate_graph
    from pregel.graph_io import GraphData

    graph_data = GraphData(*generate_graph("powerlaw", 3000, 8.0, seed=5))
    return graph_data, load_graph(comm, graph_data, hubs=HubOptions(threshold=20))


def exchange_rows():
    from pregel.exchange import Outgoing, exchange

    graph_data, graph = small_graph()
    report = {"ghosts": int(graph.num_ghosts)}
    for shared in (True, False, True):
        direct_ids = np.arange(RANK, graph_data.num_nodes, 97 + RANK, dtype=np.int64)
        out = Outgoing(rows_of_ids(graph.owned), None, direct_ids, rows_of_ids(direct_ids), None)
        inc = exchange(graph, out, with_counts=False, shared=shared)
        ghosts_equal = bool(np.array_equal(inc.ghost_values, rows_of_ids(graph.ghost_ids)))
        report.setdefault("ghosts_equal", []).append(ghosts_equal)
        everyone = np.concatenate(comm.allgather(direct_ids))
        mine = np.sort(everyone[graph.partition.owner(everyone) == RANK])
        order = np.argsort(inc.direct_ids, kind="stable")
        report.setdefault("direct_equal", []).append(
            bool(np.array_equal(inc.direct_ids[order], mine))
            and bool(np.array_equal(inc.direct_values[order], rows_of_ids(mine))))
        report.setdefault("ext", []).append(inc.ext is not None)
        del inc
    return report


def prefer():
    from pregel.exchange import Outgoing, exchange

    _, graph = small_graph()
    shared_rows.KEEP_BELOW = 0  # every exchange through the window would fault its pages in
    report = {}
    for name, heap in (("every rank", True), ("none", False), ("all but the last", RANK < SIZE - 1)):
        shared_rows.HEAP_BLOCK_LIMIT = 1 << 40 if heap else 0
        out = Outgoing(rows_of_ids(graph.owned), None, np.zeros(0, np.int64), np.zeros((0, 3), np.float32), None)
        inc = exchange(graph, out, with_counts=False)
        report[name] = [inc.ext is not None, bool(np.array_equal(inc.ghost_values, rows_of_ids(graph.ghost_ids)))]
        del inc
    return report


def error():
    window = shared_rows.shared_rows(comm)
    values = np.ones((10, 4), np.float32) if RANK < SIZE - 1 else None
    counts = np.array([0 if q == RANK else 10 for q in range(SIZE)])
    window.grow(10 * (SIZE - 1) * 16)
    window.transfer(values, np.tile(np.arange(10), SIZE - 1), counts,
                    np.array([10 * (RANK - (RANK > q)) for q in range(SIZE)]), 10 * (SIZE - 1))
    return {"returned": True}


report = {"rounds": rounds, "exchange": exchange_rows, "prefer": prefer, "error": error}[MODE]()
with open(f"{OUT}/rank{RANK}.json", "w") as f:
    json.dump(report, f)
