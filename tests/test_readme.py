"""The README's vertex-program example runs as written and computes what it says."""
import os
import re

import networkx as nx
import numpy as np

from pregel.comm import Comm
from pregel.convert import from_networkx
from pregel.job import run_job

README = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "README.md")


def test_max_value_example_from_the_readme():
    text = open(README, encoding="utf-8").read()
    block = next(b for b in re.findall(r"```python\n(.*?)```", text, re.S) if "class MaxValue" in b)
    namespace = {}
    exec(block, namespace)  # noqa: S102 - the documented example itself
    graph = nx.gnp_random_graph(60, 0.04, seed=5, directed=True)
    report = run_job(Comm(), from_networkx(graph), namespace["MaxValue"](), None, algorithm="max")
    expected = [max({v} | nx.ancestors(graph, v)) for v in range(60)]
    assert np.array_equal(report.values, expected)
