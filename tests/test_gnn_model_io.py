"""The GNN model file: round trip, plain data for ``torch.load(weights_only=True)``, and one
clear ``InputError`` for every kind of bad file."""

import os

import numpy as np
import pytest
import torch
from gnn_cases import MODELS, build_model, mixed_graph, pyg_forward

from pregel.comm import Comm
from pregel.dgraph import load_graph
from pregel.engine import run
from pregel.errors import InputError
from vertex_programs.gnn import FORMAT, VERSION, GNNModel, load_model, save_model


@pytest.fixture(scope="module")
def graph():
    return mixed_graph()


@pytest.mark.parametrize("name", sorted(MODELS))
def test_round_trip_gives_pyg_outputs(tmp_path, graph, name):
    layers, activation = build_model(name)
    path = tmp_path / "model.pt"
    save_model(path, layers, activation)
    model = load_model(path)
    assert model.activation == activation and model.num_layers == len(layers)
    expected, _ = pyg_forward(layers, activation, graph)
    values = run(load_graph(Comm(), graph), model).values
    assert np.abs(values - expected).max() <= 1e-4
    again = tmp_path / "again.pt"  # saving the loaded layers writes the same records
    save_model(again, model.layers, model.activation)
    _assert_same(torch.load(path, weights_only=True), torch.load(again, weights_only=True))


def _assert_same(a, b):
    assert type(a) is type(b)
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        for key in a:
            _assert_same(a[key], b[key])
    elif isinstance(a, list):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _assert_same(x, y)
    elif isinstance(a, torch.Tensor):
        assert torch.equal(a, b)
    else:
        assert a == b


def _plain(value) -> bool:
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v) for k, v in value.items())
    if isinstance(value, list):
        return all(_plain(v) for v in value)
    if isinstance(value, torch.Tensor):
        return value.dtype == torch.float32
    return isinstance(value, (str, int, float, bool))


def test_file_is_plain_data(tmp_path):
    layers, activation = build_model("mixed")
    path = tmp_path / "m.pt"
    save_model(path, layers, activation)
    data = torch.load(path, weights_only=True)
    assert data["format"] == FORMAT and data["version"] == VERSION and data["activation"] == "elu"
    assert [layer["kind"] for layer in data["layers"]] == ["gat", "sage", "gcn"]
    assert _plain(data)
    gat = data["layers"][0]
    assert (gat["heads"], gat["out_channels"], gat["concat"]) == (2, 4, True)
    assert torch.equal(gat["weights"]["lin.weight"], layers[0].lin.weight.detach())
    gin = torch.load(_saved(tmp_path, "gin"), weights_only=True)
    assert _plain(gin) and [op["op"] for op in gin["layers"][1]["mlp"]] == [
        "linear", "batch_norm", "tanh", "linear"]  # Dropout is left out


def test_save_is_atomic_and_leaves_no_temporary(tmp_path):
    path = _saved(tmp_path, "sage_mean")
    with pytest.raises(ValueError):  # a failing save keeps the old file
        save_model(path, [torch.nn.Linear(6, 3)])
    assert load_model(path).num_layers == 2
    assert os.listdir(tmp_path) == ["sage_mean.pt"]


def test_save_rejects_shapes_that_do_not_chain(tmp_path):
    from torch_geometric.nn import GCNConv, SAGEConv

    with pytest.raises(ValueError, match="outputs 4 features but layer 1 \\(gcn\\) expects 5"):
        save_model(tmp_path / "m.pt", [SAGEConv(6, 4), GCNConv(5, 2)])
    assert not os.listdir(tmp_path)


def _saved(folder, name="sage_mean"):
    layers, activation = build_model(name)
    path = folder / f"{name}.pt"
    save_model(path, layers, activation)
    return path


def _edited(folder, edit, name="sage_mean"):
    """A model file of ``name`` whose loaded dict was changed by ``edit(data)``."""
    data = torch.load(_saved(folder, name), weights_only=True)
    edit(data)
    path = folder / "edited.pt"
    torch.save(data, path)
    return path


def _set(path, value):
    def edit(data):
        *keys, last = path
        target = data
        for key in keys:
            target = target[key]
        target[last] = value
    return edit


def _delete(path):
    def edit(data):
        *keys, last = path
        target = data
        for key in keys:
            target = target[key]
        del target[last]
    return edit


BAD_EDITS = {
    "wrong format": (_set(["format"], "something-else"), "not a pregel-gnn-model file"),
    "wrong version": (_set(["version"], 99), "unsupported pregel-gnn-model version 99"),
    "unknown kind": (_set(["layers", 0, "kind"], "transformer"), "layer 0: unknown layer kind 'transformer'"),
    "unknown activation": (_set(["activation"], "swish"), "model: option 'activation' must be one of"),
    "no layers": (_set(["layers"], []), "model: has no layers"),
    "layer not a dict": (_set(["layers", 1], [1, 2]), "layer 1: must be a dict, got list"),
    "missing weight": (_delete(["layers", 0, "weights", "lin_r.weight"]),
                       "layer 0 \\(sage\\): missing weight 'lin_r.weight'"),
    "wrong weight shape": (_set(["layers", 0, "weights", "lin_l.bias"], torch.zeros(4)),
                           "layer 0 \\(sage\\): weight 'lin_l.bias' has shape \\(4,\\), expected \\(9\\)"),
    "integer weight": (_set(["layers", 0, "weights", "lin_l.weight"], torch.zeros(9, 6, dtype=torch.int64)),
                       "weight 'lin_l.weight' must be a float tensor"),
    "nan weight": (_set(["layers", 1, "weights", "lin_r.weight"], torch.full((3, 9), float("nan"))),
                   "layer 1 \\(sage\\): weight 'lin_r.weight' holds NaN"),
    "unexpected weight": (_set(["layers", 0, "root_weight"], False),
                          "unexpected weight\\(s\\) \\['lin_r.weight'\\]"),
    "bad option type": (_set(["layers", 0, "normalize"], "yes"), "option 'normalize' must be bool"),
    "bad aggr": (_set(["layers", 0, "aggr"], "lstm"), "option 'aggr' must be one of \\['mean', 'max'\\]"),
}


@pytest.mark.parametrize("case", sorted(BAD_EDITS))
def test_bad_model_file_is_one_clear_input_error(tmp_path, case):
    edit, message = BAD_EDITS[case]
    path = _edited(tmp_path, edit)
    with pytest.raises(InputError, match=message) as err:
        load_model(path)
    text = str(err.value)
    assert text.startswith(f"{path}: ") and "\n" not in text


@pytest.mark.parametrize("name, edit, message", [
    ("gat_concat", _set(["layers", 0, "weights", "att_src"], torch.zeros(2, 3)),
     "layer 0 \\(gat\\): weight 'att_src' has shape \\(2, 3\\), expected \\(3, 3\\)"),
    ("gat_mean", _set(["layers", 0, "weights", "bias"], torch.zeros(8)),
     "weight 'bias' has shape \\(8,\\), expected \\(4\\)"),
    ("gin", _set(["layers", 1, "mlp", 1, "weights", "running_var"], -torch.ones(3)),
     "layer 1 \\(gin\\) mlp\\[1\\]: running_var has negative entries"),
    ("gin", _set(["layers", 0, "mlp", 2, "weights", "weight"], torch.zeros(9, 8)),
     "layer 0 \\(gin\\): MLP op 2 \\(linear\\) expects 8 features but gets 9"),
    ("gin", _set(["layers", 0, "mlp", 1, "op"], "softmax"), "mlp\\[1\\]: option 'op' must be one of"),
    ("gcn", _delete(["layers", 1, "bias"]), "layer 1 \\(gcn\\): missing option 'bias'"),
    ("gcn", _set(["layers", 1, "weights", "weight"], torch.zeros(3, 7)),
     "layer 0 \\(gcn\\) outputs 9 features but layer 1 \\(gcn\\) expects 7"),
])
def test_bad_layer_records(tmp_path, name, edit, message):
    with pytest.raises(InputError, match=message):
        load_model(_edited(tmp_path, edit, name))


def test_truncated_file(tmp_path):
    path = _saved(tmp_path)
    data = path.read_bytes()
    path.write_bytes(data[:len(data) // 2])
    with pytest.raises(InputError, match="not a readable model file \\(truncated or corrupt") as err:
        load_model(path)
    assert str(err.value).startswith(f"{path}: ") and "\n" not in str(err.value)


def test_not_a_torch_file_and_missing_file(tmp_path):
    junk = tmp_path / "junk.pt"
    junk.write_text("hello")
    with pytest.raises(InputError, match="junk.pt: not a readable model file"):
        load_model(junk)
    with pytest.raises(InputError, match="missing.pt: model file does not exist"):
        load_model(tmp_path / "missing.pt")


def test_pickled_code_is_refused(tmp_path):
    """A file holding a pickled object (here a whole nn.Module) is not loaded as code."""
    path = tmp_path / "module.pt"
    torch.save(torch.nn.Linear(2, 2), path)
    with pytest.raises(InputError, match="not a readable model file \\(it holds pickled objects"):
        load_model(path)


def test_top_level_not_a_dict(tmp_path):
    path = tmp_path / "list.pt"
    torch.save([1, 2], path)
    with pytest.raises(InputError, match="model: must be a dict, got list"):
        load_model(path)


def test_load_keep_hidden(tmp_path, graph):
    model = load_model(_saved(tmp_path, "mixed"), keep_hidden=True)
    assert isinstance(model, GNNModel) and model.keep_hidden
    result = run(load_graph(Comm(), graph), model)
    assert [h.shape[1] for h in model.hidden_outputs(result.state)] == [8, 5]
