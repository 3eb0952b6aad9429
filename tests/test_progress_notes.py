"""The progress line's note from ``VertexProgram.progress``: what tells how far a run is from stopping
when its active count does not (every vertex computes every superstep in PageRank and wcc), checked
against each program's stopping rule and, for sssp, Dijkstra's distances (networkx)."""

import re

import networkx as nx
import numpy as np
import pytest

from pregel.comm import Comm
from pregel.convert import from_networkx
from pregel.job import run_job
from pregel.progress import Progress
from vertex_programs import BreadthFirst, PageRank, ShortestPaths, WeakComponents


def _notes(capsys, monkeypatch, graph, program, tmp_path) -> list[str]:
    """The progress lines of a run of ``program`` on ``graph`` (a line at every superstep)."""
    monkeypatch.setattr(Progress, "LINE_SECONDS", 0.0)
    capsys.readouterr()
    report = run_job(Comm(), from_networkx(graph), program, tmp_path / "out.h5", algorithm="x", progress=True)
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("superstep ")]
    assert len(lines) == report.result.supersteps
    return lines


def test_wcc_reports_the_labels_that_changed_until_none_did(capsys, monkeypatch, tmp_path):
    graph = nx.disjoint_union(nx.path_graph(300), nx.cycle_graph(50))
    lines = _notes(capsys, monkeypatch, graph, WeakComponents(), tmp_path)
    changed = [int(re.search(r"([\d,]+) labels changed", line)[1].replace(",", "")) for line in lines]
    assert changed[-1] == 0 and all(c > 0 for c in changed[:-1]), lines


def test_pagerank_reports_its_l1_change_against_the_threshold_it_stops_below(capsys, monkeypatch, tmp_path):
    graph = nx.karate_club_graph()
    lines = _notes(capsys, monkeypatch, graph, PageRank(tol=1e-8), tmp_path)
    found = [re.search(r"L1 change ([\d.e+-]+), stops below ([\d.e+-]+)", line) for line in lines]
    changes, threshold = [float(m[1]) for m in found], float(found[0][2])
    assert threshold == pytest.approx(34 * 1e-8, rel=1e-2)
    assert changes[-1] < threshold <= min(changes[:-1]), lines


def test_sssp_reports_the_nearest_pending_distance_which_is_a_final_one(capsys, monkeypatch, tmp_path):
    rng = np.random.default_rng(3)
    graph = nx.grid_2d_graph(15, 15)
    graph = nx.convert_node_labels_to_integers(graph)
    for u, v in graph.edges:
        graph[u][v]["weight"] = float(np.float32(rng.uniform(0.1, 2.0)))
    lines = _notes(capsys, monkeypatch, graph, ShortestPaths(0, delta=0.5), tmp_path)
    nearest = [float(m[1]) for m in (re.search(r"nearest pending distance ([\d.e+-]+)", line) for line in lines) if m]
    final = {f"{d:.6g}" for d in nx.single_source_dijkstra_path_length(graph, 0).values()}
    assert len(nearest) == len(lines) - 1 and nearest == sorted(nearest)  # the last superstep leaves none pending
    assert all(f"{d:.6g}" in final for d in nearest), (nearest, final)


@pytest.mark.parametrize("program", [ShortestPaths(0, local_after=5), BreadthFirst(0, local_after=5)],
                         ids=["sssp", "bfs"])
def test_a_search_says_from_which_superstep_it_relaxes_each_ranks_own_edges(capsys, monkeypatch, tmp_path, program):
    """Supersteps 1 to 5 run on their own; the 6th relaxes the rest of the grid (one rank owns every edge),
    so the last line says so and the run ends there, where networkx's search from the corner needs 28 hops."""
    graph = nx.convert_node_labels_to_integers(nx.grid_2d_graph(15, 15))
    lines = _notes(capsys, monkeypatch, graph, program, tmp_path)
    relaxed = ["own edges relaxed locally" in line for line in lines]
    assert relaxed == [False] * 5 + [True], lines
    assert max(nx.single_source_shortest_path_length(graph, 0).values()) == 28
