"""The model file: a trained GNN as plain data that ``torch.load(path, weights_only=True)`` reads.

``save_model`` writes it with ``torch.save``; ``load_model`` reads it without torch
(``torch_file.read_torch_file``: only plain data, tensors as NumPy arrays), so ``pregel infer``
never imports torch. Layout (a dict; tensors are float32, nothing is pickled code)::

    {"format": "pregel-gnn-model", "version": 1, "activation": "relu",
     "layers": [{"kind": "sage", <options>, "weights": {"lin_l.weight": [out, in], ...}}, ...]}

Layer kinds and their records: see ``GCNLayer``, ``SAGELayer``, ``GINLayer`` and ``GATLayer``
(``record`` / ``from_record``). ``load_model`` validates everything (kind, options, every
weight's presence, dtype and shape, widths that chain) and reports the first problem as one
``InputError`` line naming the file.
"""

import re
from pathlib import Path

import numpy as np

from pregel.atomic import atomic_output
from pregel.errors import InputError
from vertex_programs.gnn.base import ACTIVATIONS, GNNLayer, RecordReader
from vertex_programs.gnn.gat import GATLayer
from vertex_programs.gnn.gcn import GCNLayer
from vertex_programs.gnn.gin import GINLayer
from vertex_programs.gnn.model import GNNModel, chain_problem
from vertex_programs.gnn.sage import SAGELayer
from vertex_programs.gnn.torch_file import NotPlainData, read_torch_file

FORMAT = "pregel-gnn-model"
VERSION = 1
LAYER_KINDS = {cls.kind: cls for cls in (GCNLayer, SAGELayer, GINLayer, GATLayer)}


def save_model(path, layers, activation: str = "relu") -> None:
    """Write ``layers`` (PyG conv modules or our layers, in order) with ``activation`` between
    them to ``path`` (atomically: a temporary file in the same folder, then renamed)."""
    import torch  # writing needs torch; reading (load_model) does not

    model = GNNModel(layers, activation)
    data = {"format": FORMAT, "version": VERSION, "activation": activation,
            "layers": [layer.record() for layer in model.layers]}
    with atomic_output(path, ".pt") as temp:
        torch.save(_as_tensors(data, torch), temp)


def load_model(path, keep_hidden: bool = False) -> GNNModel:
    """Read and validate a model file; returns the ``GNNModel`` (see ``GNNModel`` for
    ``keep_hidden``). Any problem is an ``InputError``: '<path>: <what is wrong>'."""
    if not Path(path).is_file():
        raise InputError.at(path, None, "is a directory, not a model file" if Path(path).is_dir()
                            else "model file does not exist")
    try:
        data = read_torch_file(path)
    except NotPlainData as err:
        raise InputError.at(path, None, f"not a readable model file (it holds pickled objects, not "
                                        f"plain data: {err}; write it with vertex_programs.gnn.save_model)") from None
    except Exception as err:  # zipfile, pickle and the reader raise many types for truncated or foreign files
        raise InputError.at(path, None, f"not a readable model file (truncated or corrupt: "
                                        f"{_first_sentence(err)})") from None
    top = RecordReader(path, "model", data)
    if data.get("format") != FORMAT:
        raise InputError.at(path, None, f"not a {FORMAT} file (format {data.get('format')!r})")
    if data.get("version") != VERSION:
        raise InputError.at(path, None, f"unsupported {FORMAT} version {data.get('version')!r} "
                                        f"(this reads version {VERSION})")
    activation = top.option("activation", str, tuple(ACTIVATIONS))
    records = top.option("layers", list)
    if not records:
        raise top.error("has no layers")
    layers = [_read_layer(path, i, record) for i, record in enumerate(records)]
    problem = chain_problem(layers)
    if problem:
        raise InputError.at(path, None, problem)
    return GNNModel(layers, activation, keep_hidden)


def _as_tensors(value, torch):
    """``value`` with every NumPy array in it (inside dicts and lists too) as a torch tensor."""
    if isinstance(value, np.ndarray):
        return torch.from_numpy(np.ascontiguousarray(value))
    if isinstance(value, dict):
        return {key: _as_tensors(item, torch) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_as_tensors(item, torch) for item in value]
    return value


def _first_sentence(err: Exception) -> str:
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(err)).strip()
    return re.split(r"\.\s|\n", text, maxsplit=1)[0][:160] or type(err).__name__


def _read_layer(path, index: int, record) -> GNNLayer:
    reader = RecordReader(path, f"layer {index}", record)
    kind = record.get("kind")
    if kind not in LAYER_KINDS:
        raise reader.error(f"unknown layer kind {kind!r} (known: {sorted(LAYER_KINDS)})")
    reader.where = f"layer {index} ({kind})"
    return LAYER_KINDS[kind].from_record(reader)
