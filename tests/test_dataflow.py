"""The dataflow runtime (pregel.dataflow) at P = 1, 2, 3 in dataflow and BSP mode.

The program of tests/mpi_scripts/run_dataflow.py computes on each vertex a value from its inputs;
the oracle recomputes the values with a plain loop in networkx topological order. One launch per
P runs every DAG in both modes; one more launch checks that an exception ends the job.
"""

import json
import math
import os
import shutil
import subprocess
import sys

import networkx as nx
import numpy as np
import pytest

from pregel.comm import Comm
from pregel.dataflow import DataflowPlan, DataflowProgram, depth_phases, run_dataflow
from pregel.graph_io import GraphData

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "mpi_scripts"))
from run_dataflow import SLOW_SECONDS  # noqa: E402  (how long the "slow" case's vertex 0 sleeps)

SIZES = (1, 2, 3)
MODES = ("dataflow", "bsp")
RUN_MODES = MODES + ("dataflow-thread",)  # run by mpiexec; the last: dataflow with send_thread
SCRIPT = os.path.join(os.path.dirname(__file__), "mpi_scripts", "run_dataflow.py")
MPIEXEC = shutil.which("mpiexec", path=os.path.dirname(sys.executable)) or "mpiexec"
TIMEOUT = 120


def _csr(n, edges):
    graph = nx.DiGraph()
    graph.add_nodes_from(range(n))
    graph.add_edges_from(edges)
    indptr = np.zeros(n + 1, dtype=np.int64)
    indptr[1:] = np.cumsum([graph.out_degree(v) for v in range(n)])
    indices = np.array([w for v in range(n) for w in sorted(graph.successors(v))], dtype=np.int64)
    return graph, indptr, indices


def _dags():
    """{name: (networkx DAG, arrays for dags.npz)}: a random DAG, a wide two-rank DAG, a crafted
    priority case and a slow-vertex case (P = 2 only)."""
    rng = np.random.default_rng(7)
    dags = {}
    random = nx.gnp_random_graph(300, 0.03, seed=5)
    graph, indptr, indices = _csr(301, [(min(u, v), max(u, v)) for u, v in random.edges])  # 300: isolated
    generation = {v: i for i, layer in enumerate(nx.topological_generations(graph)) for v in layer}
    arrays = {"priority": rng.random(301), "phase": 2 * np.array([generation[v] for v in range(301)])}
    arrays.update({f"rank_{p}": rng.integers(0, p, 301) for p in SIZES})
    dags["random"] = graph, indptr, indices, arrays
    edges = [(u, 1500 + u % 50) for u in range(1500)] + [(u, 1500 + (7 * u + 3) % 50) for u in range(1500)]
    graph, indptr, indices = _csr(1550, edges)
    dags["wide"] = graph, indptr, indices, {
        "rank": np.repeat([0, 1], [1500, 50]), "priority": rng.random(1550),
        "phase": np.repeat([0, 1], [1500, 50])}
    graph, indptr, indices = _csr(25, [(0, v) for v in range(1, 13)])
    priority = rng.integers(0, 4, 25).astype(np.float64)  # ties broken by vertex id
    priority[0] = 10.0
    dags["priority"] = graph, indptr, indices, {
        **{f"rank_{p}": np.full(25, p - 1) for p in SIZES}, "priority": priority,
        "phase": np.isin(np.arange(25), np.arange(1, 13)).astype(np.int64)}
    graph, indptr, indices = _csr(6, [(0, 1), (2, 1), (2, 3), (3, 4)])  # 5: no inputs, no outputs
    dags["slow"] = graph, indptr, indices, {
        "rank_2": np.array([0, 0, 1, 1, 1, 1]), "priority": np.zeros(6),
        "phase": np.array([0, 1, 0, 1, 2, 0])}
    return dags


def _launch(size, folder, *extra):
    env = dict(os.environ, OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1")
    command = [MPIEXEC, "-n", str(size), sys.executable, "-m", "mpi4py", SCRIPT, str(folder), *extra]
    return subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT, env=env)


@pytest.fixture(scope="module")
def dags(tmp_path_factory):
    folder = tmp_path_factory.mktemp("dataflow")
    dags = _dags()
    arrays = {f"{name}/{key}": value for name, (_, indptr, indices, more) in dags.items()
              for key, value in {"indptr": indptr, "indices": indices, **more}.items()}
    np.savez(folder / "dags.npz", **arrays)
    return folder, dags


@pytest.fixture(scope="module")
def runs(dags):
    folder, graphs = dags
    results = {}
    for size in SIZES:
        done = _launch(size, folder)
        assert done.returncode == 0, done.stderr
        results[size] = dict(np.load(folder / f"dataflow_{size}.npz", allow_pickle=True))
    return folder, graphs, results


def _rank_of(arrays, size):
    return arrays[f"rank_{size}"] if f"rank_{size}" in arrays else arrays["rank"] % size


def _coefficients(u, k):
    return ((u * 7 + np.arange(k) * 3) % 11 - 5) / 10


def _payload(x, u, v):
    if u % 3 == 0:
        return (x[u] * _coefficients(u, u % 4)).astype(np.float32)
    return (x[u] * ((u + 2 * v) % 5 + 1) / 5 * _coefficients(u, (u + 2 * v) % 5)).astype(np.float32)


def _oracle(graph):
    """Values of the test program by a plain loop in topological order."""
    x = {}
    for v in nx.topological_sort(graph):
        acc = ((v * 13) % 17 - 8) / 8
        for u in sorted(graph.predecessors(v)):
            p = _payload(x, u, v).astype(np.float64)
            acc += 0.3 * (p * (np.arange(len(p)) + 1)).sum()
        x[v] = np.tanh(acc)
    return np.array([x[v] for v in range(len(graph))])


def _cases(runs):
    _, graphs, results = runs
    for size in SIZES:
        for name in graphs:
            if f"{name}/dataflow/values" in results[size]:
                for mode in RUN_MODES:
                    prefix = f"{name}/{mode}/"
                    yield size, name, mode, graphs[name], {key[len(prefix):]: value for key, value in
                                                           results[size].items() if key.startswith(prefix)}


def test_values_match_the_networkx_oracle_bitwise_equal_across_modes_and_sizes(runs):
    seen = set()
    for size, name, mode, (graph, *_), got in _cases(runs):
        assert np.allclose(got["values"], _oracle(graph), rtol=1e-9, atol=1e-12), (size, name, mode)
        reference = runs[2][1 if name != "slow" else 2][f"{name}/dataflow/values"]  # "slow": P = 2 only
        assert np.array_equal(got["values"], reference), (size, name, mode)
        seen.add((size, name, mode))
    assert len(seen) == 3 * 3 * len(RUN_MODES) + len(RUN_MODES)  # "slow" at P = 2 only


def test_each_vertex_gets_one_payload_of_the_right_size_from_each_in_neighbour(runs):
    for size, name, mode, (graph, *_), got in _cases(runs):
        for v in graph:
            sizes = [(u, len(_payload({u: 1.0}, u, v))) for u in sorted(graph.predecessors(v))]
            assert got["inputs"][v] == sizes, (size, name, mode, v)


def test_every_vertex_fires_once_on_its_rank_after_all_its_inputs(runs):
    for size, name, mode, (graph, _, _, arrays), got in _cases(runs):
        start, end, rank = got["times"][:, 0], got["times"][:, 1], got["times"][:, 2]
        assert np.array_equal(rank, _rank_of(arrays, size)), (size, name, mode)
        assert np.array_equal(got["fired"], np.bincount(_rank_of(arrays, size), minlength=size))
        for u, v in graph.edges:
            assert end[u] <= start[v], (size, name, mode, u, v)


def test_the_ready_vertex_of_highest_priority_fires_first(runs):
    for size, name, mode, (graph, _, _, arrays), got in _cases(runs):
        if name != "priority":
            continue
        sequence = np.argsort(got["times"][:, 3], kind="stable")  # firing order on the one busy rank
        by_priority = lambda vs: sorted(vs, key=lambda v: (-arrays["priority"][v], v))  # noqa: E731
        if mode != "bsp":  # 0 first (highest), then everything else is ready at once
            expected = [0] + by_priority(range(1, 25))
        else:  # phase 0 (0 and the free vertices 13..24), then phase 1 (1..12)
            expected = by_priority([0, *range(13, 25)]) + by_priority(range(1, 13))
        assert sequence.tolist() == expected, (size, mode)


def test_one_message_per_source_and_remote_rank_with_the_known_bytes(runs):
    for size, name, mode, (graph, _, _, arrays), got in _cases(runs):
        rank = _rank_of(arrays, size)
        messages, elements = np.zeros(size), np.zeros(size)
        for u in graph:
            for r in {rank[v] for v in graph.successors(u)} - {rank[u]}:
                on_r = [v for v in graph.successors(u) if rank[v] == r]
                messages[rank[u]] += 1
                elements[rank[u]] += u % 4 if u % 3 == 0 else sum((u + 2 * v) % 5 for v in on_r)
        assert np.array_equal(got["messages_sent"], messages), (size, name, mode)
        assert np.array_equal(got["bytes_sent"], 4 * elements), (size, name, mode)
        assert got["messages_sent"].sum() == got["messages_received"].sum()
        assert got["bytes_sent"].sum() == got["bytes_received"].sum()
        if (size, name) == (2, "random"):  # the DAG has empty messages: they must arrive too
            assert any(u % 12 == 0 and {rank[v] for v in graph.successors(u)} - {rank[u]} for u in graph)
    wide = runs[2][3]
    assert wide["wide/dataflow/messages_sent"][0] == 1500 and wide["wide/dataflow/fired"][2] == 0


def test_dataflow_mode_does_not_wait_for_an_unrelated_slow_rank(runs):
    got = runs[2][2]
    dataflow = {key: got[f"slow/dataflow/{key}"] for key in ("elapsed_seconds", "wait_seconds")}
    bsp = {key: got[f"slow/bsp/{key}"] for key in ("elapsed_seconds", "wait_seconds")}
    slow = SLOW_SECONDS  # rank 0's sleep; half of it apart on either side, so a loaded machine cannot blur the two
    assert dataflow["elapsed_seconds"][0] >= slow and bsp["elapsed_seconds"][0] >= slow
    assert dataflow["elapsed_seconds"][1] < slow / 2 and dataflow["wait_seconds"][1] < slow / 2
    assert bsp["elapsed_seconds"][1] >= 0.95 * slow and bsp["wait_seconds"][1] >= 0.75 * slow  # at the barrier


@pytest.mark.parametrize("share,order", [(math.inf, [2, 1, 3]), (0.0, [2, 3, 1]), (1.0, [2, 3, 1]), (20.0, [2, 1, 3])])
def test_a_rank_with_nothing_to_fire_lets_a_held_vertex_go_after_its_share_of_a_fire(runs, share, order):
    """Rank 1 fires vertex 2 (sequence 0, HOLD_FIRE_SECONDS), then has nothing to fire: vertex 1 (sequence 1)
    waits for rank 0's vertex 0 (SLOW_SECONDS), vertex 3 (sequence 2) waits for vertex 1 to begin. With
    ``hold_share`` S it lets vertex 3 go after S x its mean fire (vertex 2's): at once (0) or after 0.2 s (1),
    long before vertex 1's input comes; after 4 s (20), long after it; never (inf)."""
    times = runs[2][2][f"hold/{share}/times"]
    mine = np.flatnonzero(times[:, 2] == 1)
    assert mine[np.argsort(times[mine, 3])].tolist() == order
    assert runs[2][2][f"hold/{share}/let_go"].tolist() == [0, int(order == [2, 3, 1])]  # vertex 3 let go, or none


def test_chrome_traces_have_one_thread_per_rank_and_ordered_spans_inside_the_run(runs):
    folder, graphs, results = runs
    _, _, _, arrays = graphs["random"]
    for size in SIZES:
        for mode in RUN_MODES:
            with open(folder / f"trace_{size}_{mode}.json") as f:
                events = json.load(f)["traceEvents"]
            names = {e["tid"]: e["args"]["name"] for e in events if e["ph"] == "M"}
            assert names == {r: f"rank {r}" for r in range(size)}
            elapsed = results[size][f"random/{mode}/elapsed_seconds"]
            for r in range(size):
                spans = sorted((e for e in events if e["ph"] == "X" and e["tid"] == r), key=lambda e: e["ts"])
                assert spans and spans[0]["ts"] >= 0
                assert spans[-1]["ts"] + spans[-1]["dur"] <= elapsed[r] * 1e6 + 1
                assert all(a["ts"] + a["dur"] <= b["ts"] + 1e-3 for a, b in zip(spans, spans[1:]))
                fired = [e["args"]["vertex"] for e in spans if e["cat"] == "compute"]
                assert sorted(fired) == np.flatnonzero(_rank_of(arrays, size) == r).tolist()
                assert all(e["args"].get("label") == f"v{e['args']['vertex']}"
                           for e in spans if e["args"]["vertex"] % 7 == 0)
                if mode == "bsp" and size > 1:
                    assert any(e["cat"] == "barrier" for e in spans)


@pytest.mark.parametrize("fail", ["fail", "fail-thread"])
def test_an_exception_in_fire_on_one_rank_ends_the_job(dags, fail):
    folder, _ = dags
    done = _launch(2, folder, fail)  # rank 0 would wait forever for the failed vertex's message
    assert done.returncode != 0
    assert "deliberate failure in fire of vertex 2 on rank 1" in done.stderr


# ---------------------------------------------------------------------- in one process

def test_depth_phases_are_networkx_topological_generations():
    random = nx.gnp_random_graph(200, 0.05, seed=3)
    graph, indptr, indices = _csr(200, [(min(u, v), max(u, v)) for u, v in random.edges])
    expected = {v: i for i, layer in enumerate(nx.topological_generations(graph)) for v in layer}
    assert depth_phases(GraphData(indptr, indices)).tolist() == [expected[v] for v in range(200)]
    with pytest.raises(ValueError, match="cycle"):
        depth_phases(GraphData(np.array([0, 1, 2, 2]), np.array([1, 0])))


class _Broken(DataflowProgram):
    def __init__(self, out=None, sizes=None):
        self.out, self.sizes = out, sizes

    def payload_size(self, src, dst):
        return np.asarray(self.sizes if self.sizes is not None else np.full(len(src), 2))

    def fire(self, ctx, vertex, inputs):
        return self.out


@pytest.mark.parametrize("phase,program,message", [
    ([0, 0, 1], _Broken(np.zeros(2, np.float32)), r"phase must increase along every edge, but edge 0 -> 1"),
    ([0, 1, 2], _Broken(sizes=[2, 3, 2]), "broadcasting vertex 0 has out-edges of different sizes"),
    ([0, 1, 2], _Broken(np.zeros(2, np.float64)), r"vertex 0: its broadcast payload must be a contiguous "
                                                  r"float32 array of shape \(2,\), got float64"),
    ([0, 1, 2], _Broken(np.zeros(4, np.float32)[::2]), "must be a contiguous float32"),
])
def test_bad_plans_and_bad_outputs_are_clear_errors(phase, program, message):
    plan = DataflowPlan(GraphData(np.array([0, 2, 3, 3]), np.array([1, 2, 2])), np.zeros(3, np.int64),
                        np.zeros(3), np.array(phase))
    with pytest.raises(ValueError, match=message):
        run_dataflow(Comm(), plan, program)


def test_per_edge_vertex_must_return_one_payload_per_out_neighbour():
    class PerEdge(_Broken):
        def broadcasts(self, vertices):
            return np.zeros(len(vertices), bool)

    plan = DataflowPlan(GraphData(np.array([0, 2, 2, 2]), np.array([1, 2])), np.zeros(3, np.int64),
                        np.zeros(3), np.arange(3))
    message = r"per-edge vertex 0 must return .* out-neighbours \[1, 2\], got \[1\]"
    with pytest.raises(ValueError, match=message):
        run_dataflow(Comm(), plan, PerEdge({1: np.zeros(2, np.float32)}))


class _Order(DataflowProgram):
    """Logs the order in which vertices fire (empty payloads)."""

    def __init__(self):
        self.log = []

    def fire(self, ctx, vertex, inputs):
        self.log.append(vertex)
        return np.zeros(0, np.float32)


@pytest.mark.parametrize("lookahead,order", [(None, [1, 2, 3, 0]), (0, [3, 0, 2, 1]), (1, [2, 3, 0, 1]),
                                             (2, [1, 2, 3, 0])])
def test_a_vertex_waits_for_the_earlier_ones_of_its_sequence(lookahead, order):
    """Vertices 0, 1, 2 are in sequences 0, 2, 1; 3 is free and feeds 0; priorities 1 > 2 > 3 > 0. Worked
    by hand: without a sequence the ready 1, 2, 3 fire by priority, then 0. With lookahead 0, 1 and 2 wait
    for 0 (sequence 0 not begun): 3 fires, then 0, which lets 2 go (sequence 1), which lets 1 go. With
    lookahead 1 only 1 waits (2 > 0 + 1): 2 and 3 fire, then 0, then 1. With 2 nothing waits."""
    graph = GraphData(np.array([0, 0, 0, 0, 1]), np.array([0]))
    sequence = None if lookahead is None else np.array([0, 2, 1, -1])
    plan = DataflowPlan(graph, np.zeros(4, np.int64), np.array([0.0, 3.0, 2.0, 1.0]), np.array([1, 0, 0, 0]),
                        sequence, lookahead or 0)
    program = _Order()
    assert run_dataflow(Comm(), plan, program).fired == 4
    assert program.log == order


@pytest.mark.parametrize("sequence,lookahead", [(np.zeros(3, np.int64), 0), (np.array([0, -2, 0, 0]), 0),
                                                (np.zeros(4, np.int64), -1)])
def test_a_bad_sequence_is_a_clear_error(sequence, lookahead):
    plan = DataflowPlan(GraphData(np.array([0, 0, 0, 0, 1]), np.array([0])), np.zeros(4, np.int64), np.zeros(4),
                        np.array([1, 0, 0, 0]), sequence, lookahead)
    with pytest.raises(ValueError, match=r"DataflowPlan.sequence must have shape \(4,\) with values >= -1"):
        run_dataflow(Comm(), plan, _Order())


@pytest.mark.parametrize("share", [-1.0, math.nan])
def test_a_bad_hold_share_is_a_clear_error(share):
    plan = DataflowPlan(GraphData(np.array([0, 0, 0, 0, 1]), np.array([0])), np.zeros(4, np.int64), np.zeros(4),
                        np.array([1, 0, 0, 0]), np.array([0, 2, 1, -1]), 0, share)
    with pytest.raises(ValueError, match=r"DataflowPlan.hold_share must be at least 0 \(math.inf: never\), got"):
        run_dataflow(Comm(), plan, _Order())


def test_a_held_vertex_goes_after_the_share_of_the_mean_sequenced_fire():
    """Rank 0 of two holds 1 and 4 (sequence 1) and 2 (sequence 2) back while 0 (sequence 0) waits for rank 1's
    3; 5 (sequence 0) is ready. Worked by hand with hold_share 0.5: 5 fires (2.0 s); idle from 10 s, the rank
    waits for messages until 10 + 0.5 x 2.0 = 11, then lets 4 go (4 before 1: priority 2 > 1, both sequence 1);
    with 4 timed at 4.0 s (mean 3.0) and idle from 20 s, 1 at 21.5; idle from 30 s, 2 at 31.5 (1 untimed);
    then nothing is held, and 3's message readies 0."""
    from pregel.dataflow import Firing, Routes

    graph = GraphData(np.array([0, 0, 0, 0, 1, 1, 1]), np.array([0]))  # 3 -> 0
    rank, priority = np.array([0, 0, 0, 1, 0, 0]), np.array([0.0, 1.0, 3.0, 0.0, 2.0, 5.0])

    def firing(share):
        plan = DataflowPlan(graph, rank, priority, np.array([1, 0, 0, 0, 0, 0]), np.array([0, 1, 2, -1, 1, 0]), 0,
                            share)
        return Firing(plan, DataflowProgram(), Routes(plan, DataflowProgram(), 2, 0), 0, 2, carry=False)

    f = firing(0.5)
    assert f.pop() == 5 and f.idle(5.0) is None and not f.ready  # no sequenced fire timed yet: wait for messages
    f.record(5, 2.0)
    f.idle_since = None  # (as a fire would leave it)
    assert f.idle(10.0) == 11.0 and f.idle(10.9) == 11.0 and not f.ready
    assert f.idle(11.0) is None and f.pop() == 4
    f.record(4, 4.0)
    assert f.idle(20.0) == 21.5 and f.idle(21.6) is None and f.pop() == 1
    assert f.idle(30.0) == 31.5 and f.idle(31.5) is None and f.pop() == 2
    assert f.idle(40.0) is None and not f.ready and f.counts["let_go"] == 3
    f.received(int(f.routes.incoming[0]), None)
    assert f.pop() == 0
    f = firing(math.inf)  # held until their turn
    f.record(f.pop(), 2.0)
    assert f.idle(10.0) is None and f.idle(1e9) is None and not f.ready


class _Serving(DataflowProgram):
    """Vertex 0 calls ``ctx.serve()`` part way; vertices 1 and 3 are servable (1 ready at the start,
    3 once 1 has fired); every fire is logged."""

    def __init__(self):
        self.log = []

    def servable(self, vertices):
        return np.isin(vertices, [1, 3])

    def fire(self, ctx, vertex, inputs):
        self.log.append(f"{vertex} begins")
        if vertex in (0, 2):
            ctx.serve()
        self.log.append(f"{vertex} ends")
        return np.zeros(0, np.float32)


@pytest.mark.parametrize("mode", MODES)
def test_a_fire_serves_the_ready_servable_vertices_at_its_serving_point(mode):
    """0 -> 2 and 1 -> 3, priorities 0 > 1 > 3 > 2. In dataflow mode 0's serving point fires 1, then 3
    (ready once 1 fired), inside 0's fire; 2's serves nothing; 0's compute is two spans. BSP mode
    serves nothing: phase by phase."""
    plan = DataflowPlan(GraphData(np.array([0, 1, 2, 2, 2]), np.array([2, 3])), np.zeros(4, np.int64),
                        np.array([10.0, 5.0, 0.0, 1.0]), np.array([0, 0, 1, 1]))
    program = _Serving()
    result = run_dataflow(Comm(), plan, program, mode, trace=True)
    if mode == "dataflow":
        assert program.log == ["0 begins", "1 begins", "1 ends", "3 begins", "3 ends", "0 ends", "2 begins", "2 ends"]
        spans = [(s.vertex, s.start, s.end) for s in result.spans if s.kind == "compute"]
        assert [v for v, _, _ in spans] == [0, 1, 3, 0, 2, 2]  # every serving point splits its span
        assert all(a[2] <= b[1] for a, b in zip(spans, spans[1:]))  # no compute span overlaps another
    else:
        assert program.log == ["0 begins", "0 ends", "1 begins", "1 ends", "3 begins", "3 ends", "2 begins", "2 ends"]
    assert result.fired == 4


def test_a_vertex_sends_to_its_most_urgent_readers_first():
    """Vertex 0 on rank 0 feeds 1 (rank 1, priority 1), 2 and 4 (rank 2, priorities 2 and 7) and 3 (rank 3,
    priority 5): its three messages go to rank 2 (a reader of priority 7), then 3 (5), then 1 (1), in
    the runtime's order of sends and in the simulator's, which both take ``Firing.route``'s."""
    from pregel.dataflow import Firing, Routes

    plan = DataflowPlan(GraphData(np.array([0, 4, 4, 4, 4, 4]), np.array([1, 2, 3, 4])),
                        np.array([0, 1, 2, 3, 2]), np.array([9.0, 1.0, 2.0, 5.0, 7.0]), np.array([0, 1, 1, 1, 1]))
    program = DataflowProgram()
    firing = Firing(plan, program, Routes(plan, program, 4, me=0), 0, 4, carry=False)
    routes = firing.routes
    assert [int(routes.group_rank[g]) for g, _ in firing.route(0, None)] == [2, 3, 1]


class _PerEdge(DataflowProgram):
    """Vertex 0 sends per-edge payloads to 1, 2, 3 (all on rank 1): views of one array laid out as
    ``layout`` gives ({destination: (start, stop)} into it), or separate arrays when ``layout`` is None."""

    def __init__(self, layout):
        self.layout = layout
        self.array = np.arange(12, dtype=np.float32)

    def payload_size(self, src, dst):
        if self.layout is None:
            return np.full(len(src), 4, np.int64)
        return np.array([b - a for a, b in (self.layout[v] for v in dst.tolist())], np.int64)

    def broadcasts(self, vertices):
        return np.asarray(vertices) != 0

    def fire(self, ctx, vertex, inputs):
        if self.layout is None:
            return {v: np.full(4, v, np.float32) for v in (1, 2, 3)}
        return {v: self.array[a:b] for v, (a, b) in self.layout.items()}


@pytest.mark.parametrize("layout, shared", [
    ({1: (0, 4), 2: (4, 6), 3: (6, 12)}, True),    # back to back, in destination order: sent as one view
    ({1: (4, 8), 2: (0, 4), 3: (8, 12)}, False),   # out of order: a copy
    ({1: (0, 4), 2: (5, 8), 3: (8, 12)}, False),   # a gap: a copy
    (None, False),                                 # separate arrays: a copy
])
def test_a_per_edge_vertex_sends_its_payloads_to_a_rank_as_their_concatenation(layout, shared):
    """The message of a per-edge vertex to one rank is the concatenation of its payloads in destination
    order (the oracle: ``np.concatenate``); when they already lie back to back in one array it is a view
    of that array, not a copy."""
    from pregel.dataflow import Firing, Routes

    plan = DataflowPlan(GraphData(np.array([0, 3, 3, 3, 3]), np.array([1, 2, 3])), np.array([0, 1, 1, 1]),
                        np.zeros(4), np.array([0, 1, 1, 1]))
    program = _PerEdge(layout)
    firing = Firing(plan, program, Routes(plan, program, 2, me=0), 0, 2)
    out = program.fire(None, 0, {})
    [(_, payload)] = firing.route(0, out)
    np.testing.assert_array_equal(payload, np.concatenate([out[v] for v in (1, 2, 3)]))
    assert np.shares_memory(payload, program.array) == shared


@pytest.mark.parametrize("mode", MODES)
def test_a_finished_run_is_freed_by_reference_counting_alone(mode):
    """Once ``run_dataflow`` returns and the caller lets go of its program, the program (and with it
    whatever the run held: payloads, buffers) is freed at once, with the cyclic collector off: no
    reference cycle keeps a run's memory until a later collection."""
    import gc
    import weakref

    plan = DataflowPlan(GraphData(np.array([0, 1, 2, 2, 2]), np.array([2, 3])), np.zeros(4, np.int64),
                        np.array([10.0, 5.0, 0.0, 1.0]), np.array([0, 0, 1, 1]))
    program = _Serving()
    freed = weakref.ref(program)
    gc.disable()
    try:
        run_dataflow(Comm(), plan, program, mode)
        del program
        assert freed() is None
    finally:
        gc.enable()


def test_joining_a_strided_view_copies_it():
    """A strided view's bytes do not hold its elements back to back, even when the next part starts
    where its last element's bytes would end: the payload is their concatenation (``np.concatenate``)."""
    from pregel.dataflow.firing import _joined

    array = np.arange(12, dtype=np.float32)
    parts = [array[0:4:2], array[2:6]]  # elements 0, 2 then 2..5; as bytes, [0, 8) then [8, 24)
    np.testing.assert_array_equal(_joined(parts), np.concatenate(parts))
