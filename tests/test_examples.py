"""The examples run as users run them and compute what they claim (independent oracles)."""
import collections
import os
import shutil
import subprocess
import sys

import h5py
import networkx as nx
import numpy as np

from pregel.convert import from_networkx
from pregel.graph_io import write_graph

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.dirname(sys.executable)


def _label_propagation_oracle(graph: nx.DiGraph, max_steps: int = 20) -> np.ndarray:
    """Synchronous label propagation with Python counters: mode of in- and out-neighbour labels,
    smallest label on ties; vertices without neighbours keep theirs."""
    labels = {v: v for v in graph}
    for _ in range(max_steps):
        new = {}
        for v in graph:
            around = [labels[u] for u in graph.predecessors(v)] + [labels[u] for u in graph.successors(v)]
            if not around:
                new[v] = labels[v]
                continue
            counts = collections.Counter(around)
            top = max(counts.values())
            new[v] = min(label for label, c in counts.items() if c == top)
        if new == labels:
            break
        labels = new
    return np.array([labels[v] for v in sorted(graph)])


def test_label_propagation_example_matches_oracle_on_three_ranks(tmp_path):
    graph = nx.DiGraph(nx.planted_partition_graph(4, 15, 0.5, 0.02, seed=3))
    graph.add_node(60)  # an isolated vertex keeps its own label
    write_graph(tmp_path / "g.h5", from_networkx(graph))
    result = subprocess.run(
        [shutil.which("mpiexec", path=BIN), "-n", "3", shutil.which("pregel", path=BIN), "run",
         os.path.join(ROOT, "examples", "label_propagation.py") + ":LabelPropagation",
         "--graph", tmp_path / "g.h5", "--out", tmp_path / "out.h5", "--partition", "hash"],
        capture_output=True, text=True, timeout=120,
        env=dict(os.environ, OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1"))
    assert result.returncode == 0, result.stderr
    with h5py.File(tmp_path / "out.h5") as f:
        values = f["values"][:]
    assert np.array_equal(values, _label_propagation_oracle(graph))
    assert 2 <= len(np.unique(values[:60])) <= 8, "the planted communities are found"
