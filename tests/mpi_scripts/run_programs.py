"""Run every test program on every graph file of a folder, at this job's size, in every layout.

Usage: mpiexec -n P python -m mpi4py tests/mpi_scripts/run_programs.py FOLDER
Writes FOLDER/results_P.npz on rank 0 with one entry per (graph, layout, program): the values
in global order, and the number of supersteps (``WideMessages`` on two graphs also with every
superstep a column at a time, ``..._sliced``). Layouts: the two partitioners, and the range
partitioner with a hub threshold of 3 so that most vertices are hubs (partial gather on, with
shadow nodes on and off).
"""

import glob
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))

import engine_programs as ep  # noqa: E402
from pregel.comm import Comm  # noqa: E402
from pregel.dgraph import HubOptions  # noqa: E402
from pregel.graph_io import GraphData, read_graph  # noqa: E402
from pregel.job import run_job  # noqa: E402
from vertex_programs import BreadthFirst, PageRank, ShortestPaths, WeakComponents  # noqa: E402

LAYOUTS = {
    "range": ("range", HubOptions()),
    "hash": ("hash", HubOptions()),
    "hubs": ("range", HubOptions(threshold=3)),
    "noshadow": ("hash", HubOptions(threshold=3, shadow_nodes=False)),
}

NEVER = 10 ** 9  # supersteps

PROGRAMS = {
    "pagerank": lambda: PageRank(tol=1e-12, max_iter=300),
    "pagerank_nocombiner": lambda: ep.PageRankNoCombiner(tol=1e-12, max_iter=300),
    "sssp": lambda: ShortestPaths(0),
    # supersteps alone (no switch to local relaxation), so that they are the same in every layout and P
    "sssp_bellman_ford": lambda: ShortestPaths(0, delta=np.inf, local_after=NEVER),
    "sssp_narrow": lambda: ShortestPaths(0, delta=0.3, local_after=NEVER),  # weights in [0.1, 2]: most wait
    "sssp_per_edge": lambda: ep.ShortestPathsPerEdge(0, delta=0.3, local_after=NEVER),
    "sssp_local": lambda: ShortestPaths(0, local_after=2),
    "bfs": lambda: BreadthFirst(0),
    "bfs_local": lambda: BreadthFirst(0, local_after=2),
    "wcc": WeakComponents,
    "wcc_nocombiner": ep.MinLabelNoCombiner,
    "compute_counter": lambda: ep.ComputeCounter(0),
    "senders_edge_ids": ep.SendersEdgeIds,
    "aggregates": ep.Aggregates,
    "send_sum": lambda: ep.SendTo("sum"),
    "send_min": lambda: ep.SendTo("min"),
    "send_max": lambda: ep.SendTo("max"),
    "send_mean": lambda: ep.SendTo("mean"),
    "send_none": lambda: ep.SendTo(None),
    "mean_neighbours": ep.MeanOfNeighbours,
    "fetch": ep.Fetch,
}


def main(folder):
    comm = Comm()
    results = {}
    for path in sorted(glob.glob(os.path.join(folder, "*.h5"))):
        name = os.path.basename(path)[:-3]
        for layout, (partitioner, hubs) in LAYOUTS.items():
            programs = dict(PROGRAMS)
            if name == "features":
                programs = {"feature_sum": ep.FeatureSum, "attention": ep.Attention}
            for key, make in programs.items():
                report = run_job(comm, path, make(), None, algorithm=key, partitioner=partitioner, hubs=hubs)
                if comm.rank == 0:
                    results[f"{name}/{layout}/{key}"] = report.values
                    results[f"{name}/{layout}/{key}/supersteps"] = report.result.supersteps
        if name in ("hub", "powerlaw"):  # [n, 5] rows whole and a column at a time (pregel.column_slices)
            for layout, (partitioner, hubs) in LAYOUTS.items():
                for combiner in ("sum", "mean", "max", "min"):
                    for suffix, ghost_memory in (("", None), ("_sliced", 1)):
                        report = run_job(comm, path, ep.WideMessages(combiner), None, algorithm="wide",
                                         partitioner=partitioner, hubs=hubs, ghost_memory=ghost_memory)
                        if comm.rank == 0:
                            results[f"{name}/{layout}/wide_{combiner}{suffix}"] = report.values
        if name in ("hub", "powerlaw", "ladder"):  # sssp on the graph without its weights: every edge adds 1
            whole = read_graph(path)
            unweighted = GraphData(whole.indptr, whole.indices, directed=whole.directed)
            for layout, (partitioner, hubs) in LAYOUTS.items():
                report = run_job(comm, unweighted, ShortestPaths(0), None, algorithm="sssp",
                                 partitioner=partitioner, hubs=hubs)
                if comm.rank == 0:
                    results[f"{name}/{layout}/sssp_unweighted"] = report.values
        if name == "hub":  # the same graph built in memory instead of read from the file
            report = run_job(comm, read_graph(path), PageRank(tol=1e-12, max_iter=300), None,
                             algorithm="pagerank")
            if comm.rank == 0:
                results[f"{name}/memory/pagerank"] = report.values
    if comm.rank == 0:
        np.savez(os.path.join(folder, f"results_{comm.size}.npz"), **results)


if __name__ == "__main__":
    main(sys.argv[1])
