"""Full-graph GNN inference at P = 1, 2 and 3 against PyG's own full-graph forward pass.

One module-scoped fixture writes two graphs (a hand-built one with isolated vertices, self-loops
and a hub; a generated power-law one) and one model file per model of ``gnn_cases.MODELS`` (every
layer kind and a mixed 3-layer model), then runs tests/mpi_scripts/run_gnn.py once per P under
mpiexec; each run covers every graph, hub layout and model. The expected values come from PyG in
this process.
"""

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
from gnn_cases import (MODELS, build_model, edgeless_graph, mixed_graph, powerlaw_graph, pyg_forward,
                       tiny_graph)

from pregel.graph_io import write_graph
from vertex_programs.gnn import save_model

SIZES = (1, 2, 3)
LAYOUTS = ("off", "default", "hubs", "hash_noshadow", "hub0", "sliced", "hubs_sliced")  # see tests/mpi_scripts/run_gnn.py
HUB_GRAPHS = ("mixed", "powerlaw")
GRAPHS = HUB_GRAPHS + ("tiny", "edgeless")  # tiny and edgeless leave ranks with empty parts
SCRIPT = os.path.join(os.path.dirname(__file__), "mpi_scripts", "run_gnn.py")
MPIEXEC = shutil.which("mpiexec", path=os.path.dirname(sys.executable)) or "mpiexec"
TOLERANCE = 1e-4     # against PyG, float32
ACROSS_P = 1e-5      # between any two runs of the engine


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("gnn")
    graphs = {"mixed": mixed_graph(), "powerlaw": powerlaw_graph(), "tiny": tiny_graph(),
              "edgeless": edgeless_graph()}
    for name, graph in graphs.items():
        write_graph(folder / f"{name}.h5", graph)
    expected = {}
    for name in MODELS:
        layers, activation = build_model(name)
        save_model(folder / f"{name}.pt", layers, activation)
        for graph_name, graph in graphs.items():
            expected[graph_name, name] = pyg_forward(layers, activation, graph)
    env = dict(os.environ, OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1")
    for size in SIZES:
        subprocess.run([MPIEXEC, "-n", str(size), sys.executable, "-m", "mpi4py", SCRIPT, str(folder)],
                       check=True, timeout=600, env=env)
    results = {size: dict(np.load(folder / f"gnn_{size}.npz")) for size in SIZES}
    return expected, results


def _each(results, graph, model, suffix=""):
    for size in SIZES:
        for layout in LAYOUTS:
            yield size, layout, results[size][f"{graph}/{layout}/{model}{suffix}"]


@pytest.mark.parametrize("graph", GRAPHS)
@pytest.mark.parametrize("model", sorted(MODELS))
def test_matches_pyg_at_every_size_and_layout(runs, graph, model):
    expected, results = runs
    want, _ = expected[graph, model]
    for size, layout, values in _each(results, graph, model):
        assert values.dtype == np.float32 and values.shape == want.shape, (size, layout)
        difference = np.abs(values - want).max()
        assert difference <= TOLERANCE, (size, layout, difference)


@pytest.mark.parametrize("graph", GRAPHS)
@pytest.mark.parametrize("model", sorted(MODELS))
def test_layers_a_column_at_a_time_equal_whole_rows_bit_for_bit(runs, graph, model):
    """Every layer's ghost rows exchanged and gathered a column at a time (``pregel.column_slices``)
    give the outputs and hidden layers of whole rows, bit for bit, at every P."""
    _, results = runs
    for size in SIZES:
        for whole, sliced in (("default", "sliced"), ("hubs", "hubs_sliced")):
            keys = [k for k in results[size] if k.startswith(f"{graph}/{whole}/{model}")
                    and not k.endswith("sliced_supersteps")]
            assert keys
            for key in keys:
                twin = key.replace(f"/{whole}/", f"/{sliced}/", 1)
                assert np.array_equal(results[size][twin], results[size][key]), (size, twin)
            assert results[size][f"{graph}/{whole}/{model}/sliced_supersteps"] == 0
            if size > 1 and graph == "powerlaw" and not model.startswith("gat"):  # a layer of sum, mean or max
                assert results[size][f"{graph}/{sliced}/{model}/sliced_supersteps"] >= 1, (size, sliced)


@pytest.mark.parametrize("graph", GRAPHS)
@pytest.mark.parametrize("model", sorted(MODELS))
def test_identical_across_sizes_and_layouts(runs, graph, model):
    _, results = runs
    reference = results[1][f"{graph}/off/{model}"]
    for size, layout, values in _each(results, graph, model):
        assert np.abs(values - reference).max() <= ACROSS_P, (size, layout)
        assert results[size][f"{graph}/{layout}/{model}/supersteps"] == len(build_model(model)[0])


@pytest.mark.parametrize("graph", GRAPHS)
def test_hidden_layers_match_pyg(runs, graph):
    expected, results = runs
    _, hidden = expected[graph, "mixed"]
    for layer, want in enumerate(hidden):
        for size, layout, values in _each(results, graph, "mixed", f"/hidden{layer}"):
            assert values.shape == want.shape and np.abs(values - want).max() <= TOLERANCE, (size, layout)


def test_layouts_have_hubs_where_intended(runs):
    """The hub layouts split in-edges at P > 1 (so partial gather and shadow nodes really ran),
    and the default threshold picks the hand-built graph's hub (in-degree 121 > 100)."""
    _, results = runs
    for size in (2, 3):
        for graph in HUB_GRAPHS:
            assert results[size][f"{graph}/off/in_hubs"] == 0
            assert results[size][f"{graph}/hubs/in_hubs"] > 10
        assert results[size]["mixed/default/in_hubs"] >= 1
