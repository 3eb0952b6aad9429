"""Full-graph GNN inference as a job: a saved model over a graph file, one superstep per layer.

``infer`` is what ``pregel infer`` runs on every rank: it checks the model file and the graph's
``/nodes/features`` together (a bad input on any rank ends every rank with the same one-line
``InputError``), loads the graph with the chosen hub strategies, runs the model and writes
``/values`` float32 [N, C] in global vertex order (with ``layer_outputs``, also ``/layers/0`` …
``/layers/{L-2}``, the hidden layers' outputs after their activation) through ``pregel.job``.

Besides the attributes every job writes (``pregel.job``; ``algorithm`` is ``gnn``), the result
file has ``model`` (the path), ``layers`` (see ``describe``), ``in_features``, ``out_features``;
per layer (= per superstep) ``layer_compute_seconds`` and ``layer_comm_seconds`` (max over
ranks), ``layer_bytes_sent`` and ``layer_messages_sent`` (sum over ranks).
"""

import time

import numpy as np

from pregel.dgraph import HubOptions
from pregel.errors import InputError
from pregel.graph_io import read_header
from pregel.job import JobReport, run_job
from pregel.stats import FIELDS
from vertex_programs.gnn import GNNModel, load_model

_COMPUTE, _COMM = FIELDS.index("compute_seconds"), FIELDS.index("comm_seconds")
_MESSAGES, _BYTES = FIELDS.index("messages_sent"), FIELDS.index("bytes_sent")
_EDGES = FIELDS.index("edges_processed")


def load_checked(comm, graph_path, model_path, keep_hidden: bool = False):
    """The model of ``model_path`` (a ``GNNModel``) after checking, collectively, that it loads
    and that ``graph_path`` has node features of the model's input width."""
    model, problem = None, None
    try:
        model = load_model(model_path, keep_hidden=keep_hidden)
        width = read_header(graph_path).num_features
        if width == 0:
            raise InputError.at(graph_path, "/nodes/features", "dataset is missing: the model "
                                f"{model_path} needs {model.in_features} input features per vertex")
        if width != model.in_features:
            raise InputError.at(graph_path, "/nodes/features", f"has {width} columns but the model "
                                f"{model_path} expects {model.in_features} input features")
    except InputError as err:
        problem = err
    comm.agree(problem)
    return model


def infer(comm, graph_path, model_path, out_path, *, layer_outputs: bool = False,
          partitioner: str = "range", hubs: HubOptions | None = None,
          progress: bool = False, checkpoint=None, device: str = "cpu",
          ghost_memory: int | None = None) -> JobReport:
    """Run the saved model ``model_path`` over ``graph_path`` on every rank of ``comm`` and write
    ``out_path`` (see the module docstring); ``progress`` prints a line on rank 0 per layer;
    ``checkpoint``: a ``pregel.checkpoint.Checkpointer`` (a checkpoint per completed layer).
    ``device``: ``'cpu'``, or ``'cuda'``: features, weights, dense transforms and gathers on each
    rank's GPU (``pregel.job.run_job``; partial gather off by default there, and layers the GPU
    path does not support yet, GAT's softmax, refused with one ``InputError`` before any work).
    ``ghost_memory``: bytes of other ranks' rows a rank may hold at once (``pregel.engine.run``'s).
    Returns the job's report (``values`` [N, C] float32 and ``stats_table`` [ranks, layers,
    fields] on rank 0)."""
    hubs = hubs or HubOptions(partial_gather=device != "cuda")
    model = load_checked(comm, graph_path, model_path, keep_hidden=layer_outputs)
    model = (ProgressModel if progress else GNNModel)(model.layers, model.activation, model.keep_hidden,
                                                      release_features=True)  # the job's own graph

    def outputs(report: JobReport):
        attrs = {"model": str(model_path), "layers": describe(model), "in_features": model.in_features,
                 "out_features": model.out_features}
        if report.stats_table is not None:
            attrs.update(layer_attrs(report.stats_table))
        datasets = {}
        if layer_outputs:
            datasets = {f"layers/{i}": rows
                        for i, rows in enumerate(model.hidden_outputs(report.result.state))}
        return attrs, datasets

    return run_job(comm, graph_path, model, out_path, algorithm="gnn", partitioner=partitioner,
                   hubs=hubs, outputs=outputs, checkpoint=checkpoint, device=device, ghost_memory=ghost_memory)


class ProgressModel(GNNModel):
    """A ``GNNModel`` that prints one line on rank 0 as each layer is applied (messages from every
    rank have arrived by then), with the seconds since the first layer started."""

    def init(self, ctx):
        self._started = time.perf_counter()
        return super().init(ctx)

    def apply(self, ctx, state, gathered):
        result = super().apply(ctx, state, gathered)
        if ctx.rank == 0:
            print(f"layer {ctx.superstep + 1}/{self.num_layers} applied "
                  f"({time.perf_counter() - self._started:.2f} s)", flush=True)
        return result


def describe(model) -> str:
    """The model in one line, e.g. ``sage 16->32, relu, sage 32->4``."""
    return f", {model.activation}, ".join(f"{layer.kind} {layer.in_features}->{layer.out_features}"
                                          for layer in model.layers)


def layer_attrs(table: np.ndarray) -> dict:
    """Per-layer attributes [L] from a [ranks, layers, fields] statistics table: compute and
    communication seconds (max over ranks), bytes and messages sent (sum over ranks)."""
    return {"layer_compute_seconds": table[:, :, _COMPUTE].max(axis=0),
            "layer_comm_seconds": table[:, :, _COMM].max(axis=0),
            "layer_bytes_sent": table[:, :, _BYTES].sum(axis=0).astype(np.int64),
            "layer_messages_sent": table[:, :, _MESSAGES].sum(axis=0).astype(np.int64)}


def format_layers(table: np.ndarray) -> str:
    """One line per layer of ``table`` [ranks, layers, fields] (``pregel.stats.FIELDS``): compute and
    communication seconds (max over ranks) and MB sent."""
    per_layer = layer_attrs(table)
    return "\n".join(
        f"layer {i + 1}/{table.shape[1]}: compute {per_layer['layer_compute_seconds'][i]:.3f} s, "
        f"communication {per_layer['layer_comm_seconds'][i]:.3f} s, "
        f"{per_layer['layer_bytes_sent'][i] / 2**20:.2f} MB sent"
        for i in range(table.shape[1]))


def format_per_rank(table: np.ndarray) -> str:
    """Per layer and rank of ``table`` [ranks, layers, fields] (``pregel.stats.FIELDS``): edges processed,
    messages and bytes sent, compute and communication seconds; after each layer the imbalance max/mean
    of every column; then the totals' imbalance."""
    columns = (("edges", _EDGES, "{:>12,.0f}"), ("messages", _MESSAGES, "{:>12,.0f}"),
               ("bytes", _BYTES, "{:>14,.0f}"), ("compute_s", _COMPUTE, "{:>10.4f}"),
               ("comm_s", _COMM, "{:>10.4f}"))
    widths = [12, 12, 14, 10, 10]
    header = f"{'layer':>5} {'rank':>8}" + "".join(f"{name:>{w}}" for (name, _, _), w in zip(columns, widths))
    lines = [header]

    def imbalance_line(label, rows):  # rows: [ranks, fields]
        cells = []
        for (_, field, _), w in zip(columns, widths):
            mean = rows[:, field].mean()
            cells.append(f"{rows[:, field].max() / mean if mean > 0 else 1.0:>{w}.3f}")
        return f"{label:>5} {'max/mean':>8}" + "".join(cells)

    for layer in range(table.shape[1]):
        for rank in range(table.shape[0]):
            lines.append(f"{layer + 1:>5} {rank:>8}" + "".join(
                fmt.format(table[rank, layer, field]) for _, field, fmt in columns))
        lines.append(imbalance_line(layer + 1, table[:, layer, :]))
    lines.append(imbalance_line("all", table.sum(axis=1)))
    return "\n".join(lines)
