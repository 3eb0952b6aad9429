"""Run every GNN model file of a folder on every graph file of it, at this job's size, in every layout.

Usage: mpiexec -n P python -m mpi4py tests/mpi_scripts/run_gnn.py FOLDER
Each graph is loaded once per layout and every model (FOLDER/*.pt, loaded with
``load_model(keep_hidden=True)``) runs on it. Rank 0 writes FOLDER/gnn_P.npz with, per
(graph, layout, model), the output in global order (key ``graph/layout/model``), each hidden
layer's output (``.../hidden<l>``) and the number of supersteps (``.../supersteps``). Layouts:
hub strategies off, the defaults (automatic threshold), and a threshold of 3 so that most
vertices are hubs (range partitioner; hash partitioner with shadow nodes off), and a threshold of
0 (every vertex with an in-edge is a hub, so ranks may have no destination-side edges at all).
Two layouts run again with a bound of 1 byte on the ghost rows, so that every superstep whose
combiner allows it goes a column at a time (``sliced``, ``hubs_sliced``); ``.../sliced_supersteps``
counts the supersteps of each run that did.
"""

import glob
import os
import sys

import numpy as np
import torch

from pregel import superstep
from pregel.column_slices import column_slices
from pregel.comm import Comm
from pregel.dgraph import HubOptions, load_graph
from pregel.engine import run
from pregel.job import gather_values
from vertex_programs.gnn import load_model

LAYOUTS = {
    "off": ("range", HubOptions(partial_gather=False, shadow_nodes=False)),
    "default": ("range", HubOptions()),
    "hubs": ("range", HubOptions(threshold=3)),
    "hash_noshadow": ("hash", HubOptions(threshold=3, shadow_nodes=False)),
    "hub0": ("range", HubOptions(threshold=0)),
}
#: layouts run again with every superstep's ghost rows a column at a time (``pregel.column_slices``)
SLICED = {"default": "sliced", "hubs": "hubs_sliced"}
SLICED_SUPERSTEPS = [0]  # supersteps that went in slices of columns, counted by ``counting_plan``


def counting_plan(*args):
    """``pregel.column_slices.column_slices``, counting the supersteps it slices."""
    columns = column_slices(*args)
    SLICED_SUPERSTEPS[0] += columns is not None
    return columns


superstep.column_slices = counting_plan


def main(folder):
    torch.set_num_threads(1)
    comm = Comm()
    models = {os.path.basename(p)[:-3]: load_model(p, keep_hidden=True)
              for p in sorted(glob.glob(os.path.join(folder, "*.pt")))}
    results = {}
    for path in sorted(glob.glob(os.path.join(folder, "*.h5"))):
        name = os.path.basename(path)[:-3]
        for layout, (partitioner, hubs) in LAYOUTS.items():
            graph = load_graph(comm, path, partitioner, hubs=hubs)
            runs = [(layout, None)] + ([(SLICED[layout], 1)] if layout in SLICED else [])
            for key, model in models.items():
                for label, ghost_memory in runs:
                    before = SLICED_SUPERSTEPS[0]
                    result = run(graph, model, ghost_memory=ghost_memory)
                    outputs = [result.values] + model.hidden_outputs(result.state)
                    gathered = [gather_values(graph, np.ascontiguousarray(v)) for v in outputs]
                    if comm.rank == 0:
                        prefix = f"{name}/{label}/{key}"
                        results[prefix] = gathered[0]
                        results.update({f"{prefix}/hidden{i}": h for i, h in enumerate(gathered[1:])})
                        results[f"{prefix}/supersteps"] = result.supersteps
                        results[f"{prefix}/sliced_supersteps"] = SLICED_SUPERSTEPS[0] - before
            if comm.rank == 0:
                results[f"{name}/{layout}/in_hubs"] = len(graph.in_hubs)
    if comm.rank == 0:
        np.savez(os.path.join(folder, f"gnn_{comm.size}.npz"), **results)


if __name__ == "__main__":
    main(sys.argv[1])
