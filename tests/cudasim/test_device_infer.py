"""``pregel infer --device cuda`` under Numba's simulator (or on a GPU, as this process) against the same
command on the host and against PyTorch Geometric's full-graph forward pass, at P = 1, 2 and 3: features,
weights and dense transforms in torch on the run's device, each layer's gather on the device path, ghost
rows staged through host buffers (the PyPI MPI is not CUDA-aware). The graph (``gnn_cases.mixed_graph``)
has an in-hub above the hub threshold, self-loops, a parallel edge and isolated vertices; the host run
gathers the hub partially, the GPU run whole on its owner."""
import os
import shutil
import subprocess
import sys

import h5py
import numpy as np
import pytest
from gnn_cases import build_model, mixed_graph, pyg_forward, randomize
from torch_geometric.nn import GATConv, SAGEConv

from pregel.graph_io import write_graph
from vertex_programs.gnn import save_model

HERE = os.path.dirname(__file__)
SCRIPT = os.path.join(os.path.dirname(HERE), "mpi_scripts", "run_device_infer.py")
BIN = os.path.dirname(sys.executable)
MPIEXEC = shutil.which("mpiexec", path=BIN) or "mpiexec"
MODELS = ("sage_mean", "sage_max", "gcn", "gin")  # combiners mean, max, sum (GCN-normalised), sum
TIMEOUT = 300  # seconds; a hang fails the test instead of the suite
# the launched ranks run on the simulator or the GPU as this process does (NUMBA_ENABLE_CUDASIM inherited)
ENV = dict(os.environ, OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1")
TO_PYG = 1e-4  # float32 against PyG, as tests/test_gnn_distributed.py


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """The graph file, one model file per model and PyG's (output, hidden outputs) of each."""
    folder = tmp_path_factory.mktemp("device_infer")
    graph = mixed_graph()
    write_graph(folder / "g.h5", graph)
    expected = []
    for name in MODELS:
        layers, activation = build_model(name)
        save_model(folder / f"{name}.pt", layers, activation)
        expected.append(pyg_forward(layers, activation, graph))
    return folder, expected


@pytest.fixture(scope="module", params=[1, 2, 3])
def runs(request, inputs):
    """Every model on the host and with --device cuda at P ranks: [(cpu file, cuda file)]."""
    folder, _ = inputs
    out = folder / f"runs{request.param}"
    out.mkdir()
    subprocess.run([MPIEXEC, "-n", str(request.param), sys.executable, "-m", "mpi4py", SCRIPT, str(folder / "g.h5"),
                    str(out), *(str(folder / f"{name}.pt") for name in MODELS)],
                   check=True, timeout=TIMEOUT, env=ENV)
    return request.param, [(h5py.File(out / f"{i}-cpu.h5"), h5py.File(out / f"{i}-cuda.h5"))
                           for i in range(len(MODELS))]


@pytest.mark.parametrize("index", range(len(MODELS)))
def test_device_infer_equals_the_host_and_pyg(runs, inputs, index):
    size, files = runs
    cpu, gpu = files[index]
    want, want_hidden = inputs[1][index]
    for name, oracle in [("values", want)] + [(f"layers/{i}", h) for i, h in enumerate(want_hidden)]:
        host, device = cpu[name][:], gpu[name][:]
        assert device.dtype == np.float32 and device.shape == host.shape == oracle.shape, name
        np.testing.assert_allclose(device, host, rtol=1e-5, atol=1e-5 * np.abs(host).max(), err_msg=name)
        assert np.abs(device - oracle).max() <= TO_PYG, name
    assert cpu.attrs["device"] == "cpu" and "cuda_aware_mpi" not in cpu.attrs
    assert gpu.attrs["device"] == "cuda" and not gpu.attrs["cuda_aware_mpi"]
    assert (gpu.attrs["bytes_staged"] > 0) == (size > 1)
    assert not gpu.attrs["hub_partial_gather"] and gpu.attrs["hub_in_hubs"] == 0
    if size > 1:  # the host run did gather the hub partially
        assert cpu.attrs["hub_partial_gather"] and cpu.attrs["hub_in_hubs"] >= 1
    assert gpu.attrs["supersteps"] == cpu.attrs["supersteps"] == 2 and gpu.attrs["ranks"] == size


def run_cli(size, *args):
    return subprocess.run([MPIEXEC, "-n", str(size), shutil.which("pregel", path=BIN), "infer", *args],
                          capture_output=True, text=True, timeout=TIMEOUT, env=ENV)


@pytest.mark.parametrize("size, extra, problem", [
    (2, [], "--device cuda: layer 1 (gat) uses combiner 'softmax'; only sum, min, max, mean are supported "
            "on the GPU yet"),
    (1, ["--checkpoint-dir", "CHECKPOINTS"],
     "--device cuda: checkpoints (--checkpoint-dir, --resume) are not supported on the GPU yet")])
def test_what_the_gpu_does_not_support_yet_is_one_line_and_exit_2(inputs, tmp_path, size, extra, problem):
    """A GAT layer (even after a supported one) and checkpoints are refused before any work."""
    folder, _ = inputs
    model = tmp_path / "m.pt"
    layers = [randomize(SAGEConv(6, 4)), randomize(GATConv(4, 3, heads=2))] if not extra else build_model("gcn")[0]
    save_model(model, layers, "relu")
    out = tmp_path / "out.h5"
    extra = [str(tmp_path / "ck") if a == "CHECKPOINTS" else a for a in extra]
    result = run_cli(size, "--graph", str(folder / "g.h5"), "--model", str(model), "--out", str(out), "--quiet",
                     "--device", "cuda", *extra)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [f"pregel infer: error: {problem}"]
    assert not out.exists()
