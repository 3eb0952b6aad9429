"""Run by tests/test_load_layout.py under ``mpiexec -n P``: load the graph file given first with each
layout of ``LAYOUTS`` and save every rank's loaded arrays to ``layout_{P}_{rank}.npz`` in its folder."""

import dataclasses
import os
import sys

import numpy as np

from pregel.comm import Comm
from pregel.dgraph import HubOptions, load_graph

#: name -> (partitioner, hub options, symmetric); threshold 5 makes hubs of the test graph's high-degree
#: vertices. The symmetric layouts keep the reverse edges as rows (each rank's own on a range, sent to
#: their owners on a hash), but for those into in-hubs, which go to their sources' owners; without shadow
#: nodes they send them all as edges.
LAYOUTS = {
    "range": ("range", HubOptions(threshold=5), False),
    "hash": ("hash", HubOptions(threshold=5), False),
    "noshadow": ("hash", HubOptions(threshold=5, shadow_nodes=False), False),
    "nogather": ("range", HubOptions(threshold=5, partial_gather=False, shadow_nodes=False), False),
    "automatic": ("range", HubOptions(), False),
    "symmetric": ("range", HubOptions(), True),
    "symmetric-hubs": ("range", HubOptions(threshold=5), True),
    "symmetric-hash": ("hash", HubOptions(), True),
    "symmetric-hash-hubs": ("hash", HubOptions(threshold=5), True),
    "symmetric-noshadow": ("range", HubOptions(threshold=5, shadow_nodes=False), True),
}


def main(path):
    comm = Comm()
    arrays = {}
    for name, (partitioner, hubs, symmetric) in LAYOUTS.items():
        graph = load_graph(comm, path, partitioner=partitioner, symmetric=symmetric, hubs=hubs)
        for field in dataclasses.fields(graph):
            value = getattr(graph, field.name)
            if isinstance(value, np.ndarray):
                arrays[f"{name}/{field.name}"] = value
    np.savez(os.path.join(os.path.dirname(path), f"layout_{comm.size}_{comm.rank}.npz"), **arrays)


if __name__ == "__main__":
    main(sys.argv[1])
