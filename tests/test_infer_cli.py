"""`pregel infer` end to end: a model saved from PyG conv modules, run by the command on 2 ranks
(hash partition, hubs on at a low threshold) and on 1 rank without mpiexec (hubs off), against
PyG's own full-graph forward pass in this process; the result file's datasets and attributes;
bad inputs ending every rank with one line and exit status 2."""

import os
import pickle
import re
import shutil
import subprocess
import sys
import zipfile

import h5py
import numpy as np
import pytest
import torch
from torch_geometric.nn import SAGEConv

from pregel.generate import edges_to_csr, generate_graph, random_features
from pregel.graph_io import GraphData, write_graph
from vertex_programs.gnn import save_model

BIN = os.path.dirname(sys.executable)
MPIEXEC = shutil.which("mpiexec", path=BIN) or "mpiexec"
PREGEL = shutil.which("pregel", path=BIN) or "pregel"
ENV = dict(os.environ, OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1")
N, F = 300, 6
HUB_THRESHOLD = 8


def _graph():
    """A power-law graph plus an out-hub (0), an in-hub (1), a self-loop (2) and isolated vertices."""
    indptr, indices = generate_graph("powerlaw", N, 3, seed=5)
    src = np.repeat(np.arange(N), np.diff(indptr))
    others = np.arange(10, N, 2)
    src = np.concatenate([src, np.zeros(len(others), np.int64), others, [2]])
    dst = np.concatenate([indices, others, np.ones(len(others), np.int64), [2]])
    keep = (src < N - 5) & (dst < N - 5)  # the last five vertices are isolated
    pairs = np.unique(np.stack([src[keep], dst[keep]], axis=1), axis=0)
    indptr, indices = edges_to_csr(N, pairs[:, 0], pairs[:, 1])
    return indptr, indices, random_features(None, N, F, np.random.default_rng(5))


def _pyg_forward(layers, indptr, indices, features):
    """Every layer's output of PyG's full-graph forward (relu between layers)."""
    edge_index = torch.from_numpy(np.stack([np.repeat(np.arange(N), np.diff(indptr)), indices]))
    x, outputs = torch.from_numpy(features), []
    with torch.no_grad():
        for i, conv in enumerate(layers):
            x = conv(x, edge_index)
            if i < len(layers) - 1:
                x = x.relu()
            outputs.append(x.numpy())
    return outputs


def _infer(*args, ranks=None):
    command = [PREGEL, "infer", *map(str, args)]
    if ranks is not None:
        command = [MPIEXEC, "-n", str(ranks)] + command
    return subprocess.run(command, capture_output=True, text=True, timeout=120, env=ENV)


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    folder = tmp_path_factory.mktemp("infer")
    indptr, indices, features = _graph()
    write_graph(folder / "g.h5", GraphData(indptr, indices, features=features))
    torch.manual_seed(3)
    layers = [SAGEConv(F, 8), SAGEConv(8, 5, aggr="max"), SAGEConv(5, 3)]
    save_model(folder / "m.pt", layers)
    expected = _pyg_forward(layers, indptr, indices, features)
    hubs_on = _infer("--graph", folder / "g.h5", "--model", folder / "m.pt", "--out", folder / "on.h5",
                     "--layer-outputs", "--partition", "hash", "--hub-threshold", HUB_THRESHOLD, "--stats",
                     ranks=2)
    assert hubs_on.returncode == 0, hubs_on.stderr
    hubs_off = _infer("--graph", folder / "g.h5", "--model", folder / "m.pt", "--out", folder / "off.h5",
                      "--no-partial-gather", "--no-shadow-nodes", "--quiet")
    assert hubs_off.returncode == 0, hubs_off.stderr
    return folder, expected, hubs_on.stdout, hubs_off.stdout


def test_values_equal_pyg_forward(case):
    folder, expected, _, _ = case
    for name in ("on.h5", "off.h5"):
        with h5py.File(folder / name) as f:
            values = f["values"][:]
            assert values.dtype == np.float32 and values.shape == (N, 3)
            assert np.abs(values - expected[-1]).max() <= 1e-4, name


def test_layer_outputs_are_the_hidden_layers(case):
    folder, expected, _, _ = case
    with h5py.File(folder / "on.h5") as f:
        assert sorted(f["layers"]) == ["0", "1"]
        for i in range(2):
            assert f[f"layers/{i}"].shape == expected[i].shape
            assert np.abs(f[f"layers/{i}"][:] - expected[i]).max() <= 1e-4
    with h5py.File(folder / "off.h5") as f:
        assert "layers" not in f


def test_attributes_and_statistics(case):
    folder, _, stdout, quiet_stdout = case
    with h5py.File(folder / "on.h5") as f:
        attrs = dict(f.attrs)
        table = f["stats/per_superstep"][:]
        fields = list(f["stats/per_superstep"].attrs["fields"])
    assert attrs["algorithm"] == "gnn" and attrs["ranks"] == 2 and attrs["partitioner"] == "hash"
    assert attrs["supersteps"] == 3 and table.shape[:2] == (2, 3)
    assert attrs["in_features"] == F and attrs["out_features"] == 3
    assert attrs["layers"] == "sage 6->8, relu, sage 8->5, relu, sage 5->3"
    assert attrs["hub_partial_gather"] and attrs["hub_shadow_nodes"]
    assert attrs["hub_threshold"] == HUB_THRESHOLD
    assert attrs["hub_in_hubs"] >= 1  # vertex 1 has about N / 2 in-edges
    np.testing.assert_array_equal(attrs["layer_bytes_sent"],
                                  table[:, :, fields.index("bytes_sent")].sum(axis=0))
    np.testing.assert_array_equal(attrs["layer_compute_seconds"],
                                  table[:, :, fields.index("compute_seconds")].max(axis=0))
    assert attrs["layer_bytes_sent"].min() > 0 and attrs["load_seconds"] > 0
    edges = table[:, :, fields.index("edges_processed")]
    assert (edges.sum(axis=0) == edges[:, 0].sum()).all()
    with h5py.File(folder / "off.h5") as f:
        assert f.attrs["ranks"] == 1 and not f.attrs["hub_partial_gather"] and not f.attrs["hub_shadow_nodes"]
        assert f.attrs["hub_in_hubs"] == 0
    assert [line.split(" (")[0] for line in stdout.splitlines() if "applied" in line] == [
        f"layer {i}/3 applied" for i in (1, 2, 3)]  # progress on rank 0 only, one line per layer
    assert "applied" not in quiet_stdout and "layer 3/3: compute" in quiet_stdout
    per_rank = [line.split() for line in stdout.splitlines() if line.split()[:2] in (["1", "0"], ["1", "1"])]
    assert [int(row[2].replace(",", "")) for row in per_rank] == edges[:, 0].tolist()
    assert stdout.count("max/mean") == 4  # one per layer, one for the totals


class _Payload:
    """Pickles as a call of os.system (which must never run): touches ``marker``."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def _with_pickle(source, target, data):
    """A copy of the torch.save zip ``source`` at ``target`` whose pickle is ``data``'s."""
    with zipfile.ZipFile(source) as src, zipfile.ZipFile(target, "w") as dst:
        for name in src.namelist():
            dst.writestr(name, pickle.dumps(data, protocol=2) if name.endswith("data.pkl") else src.read(name))
    return target


@pytest.mark.parametrize("problem", ["no features", "width mismatch", "truncated model", "forbidden global"])
def test_bad_input_is_one_line_and_exit_2(case, problem):
    folder = case[0]
    graph, model = folder / "g.h5", folder / "m.pt"
    if problem == "no features":
        indptr, indices, _ = _graph()
        graph = folder / "plain.h5"
        write_graph(graph, GraphData(indptr, indices))
    elif problem == "width mismatch":
        indptr, indices, features = _graph()
        graph = folder / "wide.h5"
        write_graph(graph, GraphData(indptr, indices, features=np.hstack([features, features])))
    elif problem == "truncated model":
        model = folder / "truncated.pt"
        model.write_bytes((folder / "m.pt").read_bytes()[:200])
    else:
        model = _with_pickle(folder / "m.pt", folder / "evil.pt", {"format": _Payload(folder / "ran")})
    out = folder / f"{problem.replace(' ', '_')}.h5"
    result = _infer("--graph", graph, "--model", model, "--out", out, "--quiet", ranks=2)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pregel infer: error: "), result.stderr
    assert str(model if "model" in problem or "global" in problem else graph) in lines[0]
    assert {"no features": "/nodes/features", "width mismatch": "12 columns",
            "truncated model": "not a readable model file",
            "forbidden global": "it holds pickled objects, not plain data: posix.system"}[problem] in lines[0]
    assert not out.exists() and not (folder / "ran").exists()


def test_ghost_memory_slices_the_layers_with_the_same_values_and_refuses_what_it_cannot_bound(case):
    """``--ghost-memory`` small enough that every layer goes a column at a time (its ghost rows are a
    few kB): the values and hidden layers of PyG's forward, and of the whole-row run bit for bit; 0, and a
    GPU run, are one line, exit 2."""
    folder, expected = case[0], case[1]
    args = ("--graph", folder / "g.h5", "--model", folder / "m.pt", "--layer-outputs", "--partition", "hash",
            "--hub-threshold", HUB_THRESHOLD, "--quiet")
    done = _infer(*args, "--out", folder / "sliced.h5", "--ghost-memory", "0.0001", ranks=2)
    assert done.returncode == 0, done.stderr
    with h5py.File(folder / "on.h5") as whole, h5py.File(folder / "sliced.h5") as sliced:
        for name, want in zip(("layers/0", "layers/1", "values"), expected):
            assert np.abs(sliced[name][:] - want).max() <= 1e-4, name  # PyG's forward
            assert np.array_equal(sliced[name][:], whole[name][:]), name
    refused = folder / "refused.h5"
    done = _infer(*args, "--out", refused, "--ghost-memory", "0", ranks=2)
    assert done.returncode == 2 and done.stderr.strip().count("\n") == 0, done.stderr
    assert "--ghost-memory must be a positive number of MiB, got 0" in done.stderr and not refused.exists()
    done = _infer(*args, "--out", refused, "--ghost-memory", "64", "--device", "cuda", ranks=2)
    assert done.returncode == 2 and done.stderr.strip().count("\n") == 0, done.stderr
    assert "--ghost-memory applies to --device cpu" in done.stderr and not refused.exists()


def test_infer_does_not_import_torch(case, tmp_path):
    """``pregel infer`` reads the model file and runs every layer without torch (NumPy and numba)."""
    folder, expected = case[0], case[1]
    child = ("import atexit, sys; from pregel.cli import main; "
             "atexit.register(lambda: print('torch' in sys.modules, 'torch_geometric' in sys.modules)); "
             "sys.argv = ['pregel'] + sys.argv[1:]; sys.exit(main())")
    result = subprocess.run([sys.executable, "-c", child, "infer", "--graph", folder / "g.h5", "--model",
                             folder / "m.pt", "--out", tmp_path / "out.h5", "--quiet"],
                            capture_output=True, text=True, timeout=120, env=ENV)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "False False"
    with h5py.File(tmp_path / "out.h5") as f:
        assert np.abs(f["values"][:] - expected[-1]).max() <= 1e-4


def test_train_sage_example_end_to_end(tmp_path):
    """examples/train_sage.py as the demo runs it: train, `pregel infer` (one rank), check."""
    example = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples",
                           "train_sage.py")
    graph, model, scores = tmp_path / "g.h5", tmp_path / "sage.pt", tmp_path / "scores.h5"
    subprocess.run([PREGEL, "generate", "--nodes", "600", "--avg-degree", "5", "--features", "8",
                    "--labels", "3", "--seed", "2", "--out", graph], check=True, capture_output=True, env=ENV)
    trained = subprocess.run([sys.executable, example, "train", "--graph", graph, "--out", model,
                              "--epochs", "40"], capture_output=True, text=True, timeout=120, env=ENV)
    assert trained.returncode == 0, trained.stderr
    assert _infer("--graph", graph, "--model", model, "--out", scores, "--quiet").returncode == 0
    checked = subprocess.run([sys.executable, example, "check", "--graph", graph, "--model", model,
                              "--scores", scores], capture_output=True, text=True, timeout=120, env=ENV)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    with h5py.File(graph) as f:
        labels = f["nodes/labels"][:]
    with h5py.File(scores) as f:
        predicted = f["values"][:].argmax(axis=1)
    accuracy = (predicted == labels).mean()
    assert accuracy > 0.8  # the generator's labels are learnable from the features
    assert f"all vertices {accuracy:.4f}" in checked.stdout.splitlines()[0]
    # the check fails when the scores are not the model's
    with h5py.File(scores, "r+") as f:
        f["values"][0, 0] += 1e-3
    tampered = subprocess.run([sys.executable, example, "check", "--graph", graph, "--model", model,
                               "--scores", scores], capture_output=True, text=True, timeout=120, env=ENV)
    assert tampered.returncode == 1, tampered.stdout
    # the untampered scores were within the check's tolerance of PyG's, so the largest difference now is
    # 1e-3 give or take that tolerance
    largest, tolerance = re.search(r"= ([0-9.e+-]+) over .*\(tolerance ([0-9.e+-]+)\)", tampered.stdout).groups()
    assert abs(float(largest) - 1e-3) <= float(tolerance)
