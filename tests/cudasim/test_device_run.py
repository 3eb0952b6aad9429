"""``pregel run ... --device cuda`` under Numba's simulator (or on a GPU, as this process) against the same
command on the host (and against networkx / NumPy oracles) at P = 1, 2 and 3: the state, in-edge CSR,
ghost exchange and gather on "device" arrays, ghost rows staged through host buffers (the PyPI MPI is not
CUDA-aware). The graph has an in-hub above the hub threshold, so the host run gathers it partially while
the GPU run (partial gather off) gathers it whole on its owner."""
import os
import shutil
import subprocess
import sys

import h5py
import networkx as nx
import numpy as np
import pytest

from pregel.convert import to_networkx
from pregel.generate import generate_graph
from pregel.graph_io import GraphData, read_graph, write_graph

HERE = os.path.dirname(__file__)
SCRIPT = os.path.join(os.path.dirname(HERE), "mpi_scripts", "run_device_programs.py")
PROGRAMS = os.path.join(HERE, "device_programs.py")
BIN = os.path.dirname(sys.executable)
MPIEXEC = shutil.which("mpiexec", path=BIN) or "mpiexec"
ALGORITHMS = ("pagerank", "sssp", "wcc", "bfs", f"{PROGRAMS}:EvenWeightedMean", f"{PROGRAMS}:EdgeIdSums")
SOURCE = 3  # the script's --source
TIMEOUT = 300  # seconds; a hang fails the test instead of the suite
# the launched ranks run on the simulator or the GPU as this process does (NUMBA_ENABLE_CUDASIM inherited)
ENV = dict(os.environ, OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1")


@pytest.fixture(scope="module")
def graph_file(tmp_path_factory):
    """300 vertices, 1,800 weighted edges, largest in-degree 117 (above the hub threshold of 100)."""
    path = tmp_path_factory.mktemp("device") / "g.h5"
    indptr, indices = generate_graph("powerlaw", 300, 6, seed=3, exponent=2.1)
    weights = np.random.default_rng(3).uniform(0.1, 2.0, len(indices)).astype(np.float32)
    write_graph(path, GraphData(indptr, indices, weights))
    assert np.bincount(indices).max() > 100
    return path


@pytest.fixture(scope="module", params=[1, 2, 3])
def runs(request, graph_file, tmp_path_factory):
    """Every algorithm on the host and with --device cuda at P ranks: [(cpu file, cuda file)]."""
    folder = tmp_path_factory.mktemp(f"runs{request.param}")
    subprocess.run([MPIEXEC, "-n", str(request.param), sys.executable, "-m", "mpi4py", SCRIPT, str(graph_file),
                    str(folder), *ALGORITHMS], check=True, timeout=TIMEOUT, env=ENV)
    return request.param, [(h5py.File(folder / f"{i}-cpu.h5"), h5py.File(folder / f"{i}-cuda.h5"))
                           for i in range(len(ALGORITHMS))]


def expected(graph_file, algorithm):
    """The networkx / NumPy oracle of each algorithm on the graph file."""
    data = read_graph(graph_file)
    graph = to_networkx(data)
    n = data.num_nodes
    if algorithm == "pagerank":
        ranks = nx.pagerank(graph, alpha=0.85, tol=1e-6, weight=None)
        return np.array([ranks[v] for v in range(n)])
    if algorithm == "sssp":
        lengths = nx.single_source_dijkstra_path_length(graph, SOURCE, weight="weight")
        return np.array([lengths.get(v, np.inf) for v in range(n)])
    if algorithm == "bfs":
        hops = nx.single_source_shortest_path_length(graph, SOURCE)
        return np.array([hops.get(v, -1) for v in range(n)])
    if algorithm == "wcc":
        labels = np.empty(n, np.int64)
        for part in nx.weakly_connected_components(graph):
            labels[list(part)] = min(part)
        return labels
    src = np.repeat(np.arange(n), np.diff(data.indptr))
    if algorithm.endswith("EdgeIdSums"):
        return np.bincount(data.indices, weights=src + 1000.0 * data.indices, minlength=n)
    even = src % 2 == 0
    dst, terms = data.indices[even], data.weights[even].astype(np.float64) * src[even]
    counts = np.bincount(dst, minlength=n)
    return np.bincount(dst, weights=terms, minlength=n) / np.maximum(counts, 1)


@pytest.mark.parametrize("index", range(len(ALGORITHMS)))
def test_device_run_equals_the_host_run_and_the_oracle(runs, graph_file, index):
    size, files = runs
    cpu, gpu = files[index]
    host, device = cpu["values"][:], gpu["values"][:]
    assert device.dtype == host.dtype and device.shape == host.shape
    if host.dtype.kind == "i" or index == 1:  # integers, and sssp (sums of the same weights): exactly
        np.testing.assert_array_equal(device, host)
    else:
        np.testing.assert_allclose(device, host, rtol=1e-5, atol=0)
    oracle = expected(graph_file, ALGORITHMS[index])
    if ALGORITHMS[index] == "pagerank":
        assert np.abs(device - oracle).sum() < 1e-8
    else:
        np.testing.assert_allclose(device, oracle, rtol=1e-6, atol=0)
    assert cpu.attrs["device"] == "cpu" and "cuda_aware_mpi" not in cpu.attrs
    assert gpu.attrs["device"] == "cuda" and not gpu.attrs["cuda_aware_mpi"]
    assert (gpu.attrs["bytes_staged"] > 0) == (size > 1)
    assert gpu.attrs["ranks"] == size
    if ALGORITHMS[index] != "wcc":  # on the host wcc merges each rank's own block first: fewer supersteps
        assert gpu.attrs["supersteps"] == cpu.attrs["supersteps"]
    else:
        assert cpu.attrs["supersteps"] <= gpu.attrs["supersteps"]


def run_cli(size, *args):
    return subprocess.run([MPIEXEC, "-n", str(size), shutil.which("pregel", path=BIN), "run", *args],
                          capture_output=True, text=True, timeout=TIMEOUT, env=ENV)


@pytest.mark.parametrize("size, program, extra, problem", [
    (1, "NoCombiner", [], "--device cuda: NoCombiner uses combiner None; only sum, min, max, mean are "
                          "supported on the GPU yet"),
    (2, "SendsDirect", [], "--device cuda: ctx.send_to (messages to arbitrary vertices) is not supported "
                           "on the GPU yet"),
    (1, "EvenWeightedMean", ["--checkpoint-dir", "CHECKPOINTS"],
     "--device cuda: checkpoints (--checkpoint-dir, --resume) are not supported on the GPU yet")])
def test_what_the_gpu_does_not_support_yet_is_one_line_and_exit_2(graph_file, tmp_path, size, program,
                                                                   extra, problem):
    out = tmp_path / "out.h5"
    extra = [str(tmp_path / "ck") if a == "CHECKPOINTS" else a for a in extra]
    result = run_cli(size, f"{PROGRAMS}:{program}", "--graph", str(graph_file), "--out", str(out), "--quiet",
                     "--device", "cuda", *extra)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [f"pregel run: error: {problem}"]
    assert not out.exists()
