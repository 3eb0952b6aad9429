"""Reading other vertices' rows: each rank asks the owners of the ids it needs, once per distinct id.

A vertex program whose vertices need the state of vertices that are not their neighbours (pointer
jumping: a vertex reads its parent's label) cannot get it by messages, which are combined on arrival;
``Context.fetch`` reads it from the owners instead, in two ``Alltoallv``: the distinct remote ids to
their owners, their rows back. Rows of ids this rank owns are read in place.
"""

import numpy as np

from pregel.edge_order import stable_order
from pregel.id_table import unique_inverse


def fetch_rows(graph, ids: np.ndarray, values: np.ndarray) -> np.ndarray:
    """[k] / [k, F] the rows of ``values`` at the global vertex ids ``ids`` [k] int, each read on the
    rank that owns it, where ``values`` is [n] / [n, F] (that rank's owned rows, in local order).
    Collective over ``graph.comm``: every rank calls it, with its own ids (possibly none)."""
    comm, partition = graph.comm, graph.partition
    ids = np.asarray(ids, dtype=np.int64)
    if len(values) != graph.num_local:
        raise ValueError(f"fetch: values must have one row per owned vertex ({graph.num_local}), got {len(values)}")
    if len(ids) and (ids.min() < 0 or ids.max() >= graph.num_nodes):
        raise ValueError(f"fetch: ids must lie in [0, {graph.num_nodes})")
    out = np.empty((len(ids),) + values.shape[1:], values.dtype)
    owner = partition.owner(ids)
    mine = owner == comm.rank
    out[mine] = values[graph.local_index(ids[mine])]
    if comm.size == 1:
        return out
    remote, inverse = unique_inverse(ids[~mine])  # each distinct id asked once
    order, counts = stable_order(partition.owner(remote), comm.size)
    asked, asked_counts = comm.alltoallv(remote[order], counts)
    answers = comm.alltoallv_known(values[graph.local_index(asked)], asked_counts, counts)
    rows = np.empty_like(answers)
    rows[order] = answers
    out[~mine] = rows[inverse]
    return out
