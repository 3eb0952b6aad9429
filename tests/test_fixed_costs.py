"""What a command pays for besides its work: the modules it imports, whether it starts MPI, numba's
set-up, the garbage collection at exit, and the summary's ranking.

A command run as a process of its own (no launcher in its environment) must not import what it does
not use (``UNUSED_BY_RUN``), nor initialise MPI; under ``mpiexec`` it must. Each is checked in a fresh
interpreter, reading its ``sys.modules`` after the command; the result file is checked against
networkx. The times these save are measured by benchmarks/pagerank.py, never here.
"""
import json
import os
import re
import shutil
import subprocess
import sys

import h5py
import networkx as nx
import numpy as np
import pytest

from pregel import comm as comm_module
from pregel.convert import to_networkx
from pregel.generate import generate_graph
from pregel.graph_io import GraphData, read_graph, write_graph
from vertex_programs.pagerank import largest

BIN = os.path.dirname(sys.executable)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: modules ``pregel run pagerank`` does not use: MPI at one process started alone, tqdm off a terminal,
#: and the training, simulation, viewing, plotting, table-reading and GNN stacks
UNUSED_BY_RUN = ("mpi4py.MPI", "tqdm", "torch", "matplotlib", "selenium", "pandas", "pyarrow", "networkx", "simpy",
                 "odin_sched.training.train", "odin_sched.odin.trainer", "odin_sched.sim.simulate",
                 "odin_sched.view.server", "vertex_programs.gnn", "pregel.plot", "pregel.tables")
#: at the command's exit (an ``atexit`` function): the listed modules it imported, and how many objects
#: ``gc.freeze`` left out; an object of ``__main__`` says whether the interpreter's teardown freed it
CHILD = """
import atexit, gc, json, os, sys
from pregel.cli import main
listed = json.loads(sys.argv[1])
sys.argv = ["pregel"] + sys.argv[2:]


class Marker:
    def __del__(self):
        os.write(2, b"torn down\\n")


marker = Marker()
atexit.register(lambda: print(json.dumps({"imported": [m for m in listed if m in sys.modules],
                                          "frozen": gc.get_freeze_count()})))
sys.exit(main())
"""


def _alone_env() -> dict:
    """This environment without any launcher's variables (as a shell that was not started by mpiexec)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(comm_module.LAUNCHER_PREFIXES)}
    return dict(env, PYTHONPATH=ROOT, OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1")


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    indptr, indices = generate_graph("powerlaw", 300, 4, seed=3)
    path = tmp_path_factory.mktemp("fixed_costs") / "g.h5"
    write_graph(path, GraphData(indptr, indices))
    return path


def _expected_pagerank(path) -> np.ndarray:
    ranks = nx.pagerank(to_networkx(read_graph(path)), tol=1e-10)
    return np.array([ranks[v] for v in range(len(ranks))])


def test_run_pagerank_alone_imports_neither_mpi_nor_unused_stacks_and_skips_the_exit_collection(graph, tmp_path):
    out = tmp_path / "pr.h5"
    result = subprocess.run([sys.executable, "-c", CHILD, json.dumps(UNUSED_BY_RUN), "run", "pagerank",
                             "--graph", str(graph), "--out", str(out), "--tol", "1e-10", "--quiet"],
                            capture_output=True, text=True, timeout=120, env=_alone_env())
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["imported"] == []
    assert report["frozen"] > 0, "the command line's main leaves its objects out of the exit collection"
    assert "torn down" not in result.stderr, "the process ends after its atexit functions, without the teardown"
    with h5py.File(out) as f:
        assert np.abs(f["values"][:] - _expected_pagerank(graph)).sum() < 1e-8


#: numba's registries (and SciPy's BLAS, which its NumPy support would check for): a run whose kernels come
#: from the cache needs none of them; a compile loads the registries but not SciPy's linear algebra
NUMBA_REGISTRIES = ("numba.np.arraymath", "numba.typed.typeddict", "numba.cpython.setobj",
                    "numba.np.random.generator_methods", "numba.np.polynomial.polynomial_core")


def test_cached_kernels_load_without_numbas_registries_and_a_cache_miss_compiles_without_scipy(graph, tmp_path):
    """Two runs on an empty numba cache: the first compiles every kernel (registries loaded, SciPy's
    linear algebra not), the second loads them all from the cache without the registries; both
    results equal networkx's."""
    env = dict(_alone_env(), NUMBA_CACHE_DIR=str(tmp_path / "numba_cache"))
    listed = json.dumps(NUMBA_REGISTRIES + ("scipy.linalg",))
    imported = []
    for run in ("compiled", "cached"):
        out = tmp_path / f"{run}.h5"
        result = subprocess.run([sys.executable, "-c", CHILD, listed, "run", "pagerank", "--graph", str(graph),
                                 "--out", str(out), "--tol", "1e-10", "--quiet"],
                                capture_output=True, text=True, timeout=600, env=env)
        assert result.returncode == 0, result.stderr
        imported.append(json.loads(result.stdout.strip().splitlines()[-1])["imported"])
        with h5py.File(out) as f:
            assert np.abs(f["values"][:] - _expected_pagerank(graph)).sum() < 1e-8
    assert imported == [list(NUMBA_REGISTRIES), []]
    assert any((tmp_path / "numba_cache").rglob("*.nbc")), "the first run filled the cache"


def test_main_called_in_a_process_that_goes_on_leaves_its_garbage_collection_alone(graph, tmp_path):
    """``main(argv)`` (a library call, as the tests make) freezes nothing and leaves the collector on."""
    code = ("import gc, sys; from pregel.cli import main; "
            "code = main(['run', 'pagerank', '--graph', sys.argv[1], '--out', sys.argv[2], '--quiet']); "
            "print(code, gc.get_freeze_count(), gc.isenabled())")
    result = subprocess.run([sys.executable, "-c", code, str(graph), str(tmp_path / "pr.h5")], capture_output=True,
                            text=True, timeout=120, env=_alone_env())
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "0 0 True"


def test_under_mpiexec_every_rank_uses_mpi(graph, tmp_path):
    out = tmp_path / "pr.h5"
    mpiexec = shutil.which("mpiexec", path=BIN)
    result = subprocess.run([mpiexec, "-n", "2", sys.executable, "-c", CHILD, json.dumps(["mpi4py.MPI"]), "run",
                             "pagerank", "--graph", str(graph), "--out", str(out), "--tol", "1e-10", "--quiet"],
                            capture_output=True, text=True, timeout=120, env=_alone_env())
    assert result.returncode == 0, result.stderr
    reports = [json.loads(r) for r in re.findall(r"\{[^{}]*\}", result.stdout)]  # ranks' lines may run together
    assert [r["imported"] for r in reports] == [["mpi4py.MPI"]] * 2
    with h5py.File(out) as f:
        assert f.attrs["ranks"] == 2
        assert np.abs(f["values"][:] - _expected_pagerank(graph)).sum() < 1e-8


#: ``end_process(3)`` after an ``atexit`` function and a buffered line, in a process that holds
#: ``sys.argv[1]``: nothing, an open HDF5 file or a running thread; after it returns, the process
#: prints "returned" and ends on its own (status 0)
END_PROCESS = """
import atexit, os, sys, threading, time
import h5py
from pregel.quick_exit import end_process


class Marker:
    def __del__(self):
        os.write(2, b"torn down\\n")


marker = Marker()
atexit.register(lambda: print("atexit ran"))
holding = sys.argv[1]
if holding == "file":
    f = h5py.File(sys.argv[2], "r")
elif holding == "thread":
    threading.Thread(target=time.sleep, args=(1.0,)).start()
print("buffered", end=" ")
end_process(3)
print("returned")
"""


@pytest.mark.parametrize("holding", ["nothing", "file", "thread"])
def test_end_process_skips_the_teardown_unless_a_file_is_open_or_a_thread_runs(graph, holding):
    result = subprocess.run([sys.executable, "-c", END_PROCESS, holding, str(graph)], capture_output=True, text=True,
                            timeout=60, env=_alone_env())
    if holding == "nothing":
        assert (result.returncode, result.stdout, result.stderr) == (3, "buffered atexit ran\n", "")
    else:  # the interpreter's own exit: atexit functions after the rest, and the teardown
        assert (result.returncode, result.stdout) == (0, "buffered returned\natexit ran\n")
        assert "torn down" in result.stderr


@pytest.mark.parametrize("variable", ["PMI_RANK", "PMIX_RANK", "OMPI_COMM_WORLD_SIZE", "SLURM_PROCID"])
def test_a_launchers_variable_means_a_launcher_started_the_process(monkeypatch, variable):
    for name in list(os.environ):
        if name.startswith(comm_module.LAUNCHER_PREFIXES):
            monkeypatch.delenv(name)
    assert not comm_module.started_by_launcher()
    monkeypatch.setenv(variable, "0")
    assert comm_module.started_by_launcher()


def test_a_process_started_alone_initialises_mpi_only_when_asked_for_more_than_rank_and_size():
    code = ("import sys; from pregel.comm import Comm; c = Comm(); c.barrier(); c.agree(None); "
            "rows = c.gather_rows(c.allgather_rows([[1, 2]])); before = 'mpi4py.MPI' in sys.modules; "
            "limit = c.tag_limit; print(c.rank, c.size, rows.tolist(), before, 'mpi4py.MPI' in sys.modules, "
            "limit >= 32767)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                            env=_alone_env())
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["0", "1", "[[1,", "2]]", "False", "True", "True"]


@pytest.mark.parametrize("k", [0, 1, 5, 37, 400, 1000])
def test_largest_equals_a_stable_full_sort_with_ties(k):
    rng = np.random.default_rng(k)
    values = rng.integers(0, 20, size=400) / 7.0  # many ties, at the cut too
    np.testing.assert_array_equal(largest(values, k), np.argsort(-values, kind="stable")[:k])


def test_largest_with_nans_equals_the_full_sort():
    values = np.array([0.2, np.nan, 0.5, 0.1, np.nan, 0.5])
    for k in range(7):
        np.testing.assert_array_equal(largest(values, k), np.argsort(-values, kind="stable")[:k])


def test_largest_of_hand_worked_values():
    values = np.array([0.1, 0.3, 0.2, 0.3, 0.05, 0.3])
    assert largest(values, 2).tolist() == [1, 3]  # three tied at 0.3: the lowest ids first
    assert largest(values, 4).tolist() == [1, 3, 5, 2]


def test_progress_imports_tqdm_only_for_a_terminals_bar(monkeypatch):
    import io

    from tqdm import tqdm

    from pregel.progress import Progress

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.setattr(sys, "stderr", io.StringIO())
    assert Progress(3, enabled=True).bar is None  # a pipe or a log: plain lines, no bar
    monkeypatch.setattr(sys, "stderr", Terminal())
    progress = Progress(3, enabled=True)
    assert isinstance(progress.bar, tqdm)
    progress.update(2)
    assert progress.bar.n == 2
    progress.close()


#: a CPU render and its backward pass after importing both trainers: which of these modules it loaded
CPU_RENDER = """
import json, sys
import torch
import odin_sched.odin.trainer, odin_sched.training.train
from kernels.splat import render

g = 64
gen = torch.Generator().manual_seed(0)
means = (torch.rand(g, 3, generator=gen) - 0.5) * 2 + torch.tensor([0.0, 0.0, 4.0])
params = [means, torch.full((g, 3), -2.0), torch.tensor([[1.0, 0, 0, 0]]).repeat(g, 1), torch.zeros(g),
          torch.rand(g, 3, generator=gen)]
for p in params:
    p.requires_grad_(True)
K = torch.tensor([[32.0, 0, 16], [0, 32.0, 16], [0, 0, 1]])
image, _ = render(*params, torch.eye(4), K, 32, 32)
image.sum().backward()
print(json.dumps({"drawn": bool(image.sum() > 0), "grad": bool(params[0].grad.abs().sum() > 0),
                  "loaded": [m for m in sys.argv[1:] if m in sys.modules]}))
"""


def test_a_cpu_render_after_the_trainers_imports_loads_neither_numba_cuda_nor_scipys_spatial_module():
    modules = ["numba.cuda", "scipy.spatial"]
    result = subprocess.run([sys.executable, "-c", CPU_RENDER, *modules], capture_output=True, text=True,
                            timeout=300, env=_alone_env())
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report == {"drawn": True, "grad": True, "loaded": []}
