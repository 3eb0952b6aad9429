"""Findings of an adversarial run of every command, and paper cuts a new user hits: each is a bad
input answered with one line and exit status 2 before any work, or a job that ends (never hangs)."""

import os
import shutil
import subprocess
import sys

import h5py
import networkx as nx
import numpy as np
import pytest
from torch_geometric.nn import GATConv

from pregel.atomic import atomic_h5
from pregel.generate import generate_graph, random_features
from pregel.graph_io import GraphData, read_graph, write_graph
from vertex_programs.gnn import save_model

BIN = os.path.dirname(sys.executable)
MPIEXEC = shutil.which("mpiexec", path=BIN) or "mpiexec"
PREGEL = shutil.which("pregel", path=BIN) or "pregel"
ENV = dict(os.environ, OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
UNWRITABLE = "/proc/pregel-test-out.h5"  # /proc takes no new files, even for root


def pregel(ranks, *args):
    command = [PREGEL, *map(str, args)]
    if ranks > 1:
        command = [MPIEXEC, "-n", str(ranks)] + command
    return subprocess.run(command, capture_output=True, text=True, timeout=120, env=ENV)


def one_line(result, *fragments):
    assert result.returncode == 2, (result.returncode, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr and all(f in lines[0] for f in fragments), lines[0]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("rel")
    indptr, indices = generate_graph("er", 60, 3, seed=4)
    features = random_features(None, 60, 4, np.random.default_rng(0))
    write_graph(folder / "g.h5", GraphData(indptr, indices, features=features))
    save_model(folder / "m.pt", [GATConv(4, 2, heads=2)])
    (folder / "e.txt").write_text("0 1\n1 2\n")
    return folder


# ---------------------------------------------------------------- --out naming an input

def test_run_refuses_to_overwrite_its_graph(files, tmp_path):
    graph = tmp_path / "g.h5"
    shutil.copy(files / "g.h5", graph)
    before = graph.read_bytes()
    one_line(pregel(2, "run", "pagerank", "--graph", graph, "--out", graph), "is also the input")
    link = tmp_path / "link.h5"
    link.symlink_to(graph)
    one_line(pregel(1, "run", "wcc", "--graph", graph, "--out", link), "is also the input")
    assert graph.read_bytes() == before and read_graph(graph).num_nodes == 60


def test_infer_convert_train_refuse_to_overwrite_an_input(files, tmp_path):
    for name in ("g.h5", "m.pt", "e.txt"):
        shutil.copy(files / name, tmp_path / name)
    saved = {name: (tmp_path / name).read_bytes() for name in ("g.h5", "m.pt", "e.txt")}
    for out in ("g.h5", "m.pt"):
        one_line(pregel(2, "infer", "--graph", tmp_path / "g.h5", "--model", tmp_path / "m.pt",
                        "--out", tmp_path / out), "is also the input")
    one_line(pregel(1, "convert", tmp_path / "e.txt", "--out", tmp_path / "e.txt"), "is also the input")
    scene = tmp_path / "s.h5"
    scene.write_bytes(b"not even a scene: the check comes before reading it")
    one_line(pregel(1, "train", "--scene", scene, "--steps", "1", "--out", scene), "is also the input")
    one_line(pregel(1, "train", "--scene", scene, "--steps", "1", "--out", tmp_path / "t.h5",
                    "--ply", scene), "is also the input")
    assert scene.read_bytes().startswith(b"not even")
    assert all((tmp_path / name).read_bytes() == data for name, data in saved.items())


# ---------------------------------------------------------------- unwritable output

@pytest.mark.parametrize("command", [
    ["run", "pagerank", "--graph", "{g}"],
    ["infer", "--graph", "{g}", "--model", "{m}"],
    ["convert", "{e}"],
    ["generate", "--nodes", "100"],
    ["generate-scene", "--gaussians", "10", "--cameras", "2"],
    ["train", "--scene", "{g}", "--steps", "1"],
])
def test_unwritable_output_folder_is_found_before_any_work(files, command):
    args = [a.format(g=files / "g.h5", m=files / "m.pt", e=files / "e.txt") for a in command]
    one_line(pregel(1, *args, "--out", UNWRITABLE), "cannot write in its folder /proc")


def test_unwritable_output_under_mpi(files):
    one_line(pregel(2, "run", "wcc", "--graph", files / "g.h5", "--out", UNWRITABLE), "cannot write")


# ---------------------------------------------------------------- a hook raising BaseException

@pytest.mark.parametrize("raised,ranks", [("sys.exit(3)", 2), ("KeyboardInterrupt()", 3),
                                          ("SystemExit(0)", 2)])
def test_base_exception_in_a_hook_ends_the_job(tmp_path, files, raised, ranks):
    program = tmp_path / "exits.py"
    program.write_text(
        "import sys\n"
        "from vertex_programs import PageRank\n"
        "class Exits(PageRank):\n"
        "    def apply(self, ctx, rank, gathered):\n"
        "        if ctx.rank == 1 and ctx.superstep == 2:\n"
        f"            {'raise ' if 'sys.exit' not in raised else ''}{raised}\n"
        "        return super().apply(ctx, rank, gathered)\n")
    out = tmp_path / "out.h5"
    result = pregel(ranks, "run", f"{program}:Exits", "--graph", files / "g.h5", "--out", out)
    assert result.returncode != 0 and "[rank 1]" in result.stderr
    assert not out.exists()


@pytest.mark.parametrize("raised", ["KeyboardInterrupt()", "SystemError('returned a result with an exception set') "
                                                         "from KeyboardInterrupt()"])
def test_ctrl_c_in_a_process_alone_is_one_line_and_130_also_through_compiled_code(tmp_path, files, raised):
    # Ctrl-C while a Numba dispatcher loads a kernel from its cache reaches Python as CPython's SystemError
    # caused by the KeyboardInterrupt: it printed a traceback and exited 1 instead of the interrupted line
    program = tmp_path / "interrupted.py"
    program.write_text(
        "from vertex_programs import PageRank\n"
        "class Interrupted(PageRank):\n"
        "    def apply(self, ctx, rank, gathered):\n"
        f"        raise {raised}\n")
    result = pregel(1, "run", f"{program}:Interrupted", "--graph", files / "g.h5", "--out", tmp_path / "o.h5")
    assert result.returncode == 130, result.stderr
    assert result.stderr.strip() == "pregel run: interrupted"


@pytest.mark.parametrize("raised", ["RuntimeError('MPI: a peer has left')", "InputError('late')"])
def test_an_error_after_ctrl_c_under_mpiexec_stays_one_interrupted_line_per_rank(tmp_path, files, raised):
    # Ctrl-C reaches every rank; a rank whose main thread then meets an error (MPI's, as a faster rank
    # leaves) printed "unexpected error" and a traceback beside its "interrupted" line. Each rank here
    # takes the signal, waits until its interrupt thread has it, and raises.
    program = tmp_path / "late.py"
    program.write_text(
        "import os, signal, time\n"
        "from pregel.errors import InputError\n"
        "from pregel.interrupt import interrupted\n"
        "from vertex_programs import PageRank\n"
        "class Late(PageRank):\n"
        "    def apply(self, ctx, rank, gathered):\n"
        "        os.kill(os.getpid(), signal.SIGINT)\n"
        "        while not interrupted():\n"
        "            time.sleep(0.01)\n"
        f"        raise {raised}\n")
    out = tmp_path / "out.h5"
    result = pregel(2, "run", f"{program}:Late", "--graph", files / "g.h5", "--out", out)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 130, (result.returncode, result.stderr)
    assert sorted(lines) == ["pregel run [rank 0]: interrupted", "pregel run [rank 1]: interrupted"], result.stderr
    assert not out.exists()


# ---------------------------------------------------------------- empty graphs and limits

@pytest.fixture(scope="module")
def empty_graph(tmp_path_factory):
    path = tmp_path_factory.mktemp("empty") / "empty.h5"
    write_graph(path, GraphData(np.zeros(1, np.int64), np.zeros(0, np.int64),
                                features=np.zeros((0, 4), np.float32)))
    return path


@pytest.mark.parametrize("algorithm", ["pagerank", "sssp", "wcc", "bfs"])
@pytest.mark.parametrize("ranks", [1, 2])
def test_empty_graph_is_refused_by_run(empty_graph, tmp_path, algorithm, ranks):
    one_line(pregel(ranks, "run", algorithm, "--graph", empty_graph, "--out", tmp_path / "o.h5"),
             "has no vertices")
    assert not (tmp_path / "o.h5").exists()


def test_empty_graph_is_refused_by_infer_and_never_made_by_convert(files, empty_graph, tmp_path):
    one_line(pregel(2, "infer", "--graph", empty_graph, "--model", files / "m.pt", "--out",
                    tmp_path / "o.h5"), "has no vertices")
    comments = tmp_path / "comments.txt"
    comments.write_text("# no edges here\n")
    one_line(pregel(1, "convert", comments, "--out", tmp_path / "c.h5"), "holds no edges")
    one_line(pregel(1, "convert", files / "e.txt", "--num-nodes", "0", "--out", tmp_path / "c.h5"),
             "--num-nodes must be at least 1")
    made = pregel(1, "convert", comments, "--num-nodes", "3", "--out", tmp_path / "c.h5")
    assert made.returncode == 0 and read_graph(tmp_path / "c.h5").num_nodes == 3
    assert not (tmp_path / "o.h5").exists()


@pytest.mark.parametrize("args,message", [
    (["--max-supersteps", "-1"], "--max-supersteps must be at least 1"),
    (["--max-supersteps", "0"], "--max-supersteps must be at least 1"),
    (["--max-iter", "-5"], "--max-iter must be at least 1"),
    (["--tol", "nan"], "--tol must be a positive number"),
    (["--tol", "inf"], "--tol must be a positive number"),
    (["--alpha", "nan"], "--alpha must lie in [0, 1]"),
    (["--checkpoint-every", "0"], "--checkpoint-every must be at least 1"),
])
def test_meaningless_limits_are_refused(files, tmp_path, args, message):
    one_line(pregel(2, "run", "pagerank", "--graph", files / "g.h5", "--out", tmp_path / "o.h5", *args),
             message)
    assert not (tmp_path / "o.h5").exists()


def test_inspect_negative_top(files):
    one_line(pregel(1, "inspect", files / "g.h5", "--top", "-3"), "--top must be non-negative")


# ---------------------------------------------------------------- user program files

@pytest.mark.parametrize("source,cls,message", [
    ("class Broken(:\n", "Broken", "cannot load it: SyntaxError"),
    ("import no_such_module_here\n", "X", "cannot load it: ModuleNotFoundError"),
    # (a subclass of ShortestPaths is no example any more: it declares `source`, which --source sets)
    ("from pregel.program import VertexProgram\nclass NeedsArgs(VertexProgram):\n"
     "    def __init__(self, k):\n        self.k = k\n",
     "NeedsArgs", "cannot construct NeedsArgs() without arguments"),
    ("from pregel.program import VertexProgram\n", "VertexProgram", "is not a VertexProgram subclass"),
])
def test_bad_user_program_is_one_line(files, tmp_path, source, cls, message):
    program = tmp_path / "prog.py"
    program.write_text(source)
    one_line(pregel(2, "run", f"{program}:{cls}", "--graph", files / "g.h5", "--out", tmp_path / "o.h5"),
             str(program), message)


# ---------------------------------------------------------------- result files

@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_result_files_respect_the_umask(tmp_path, umask):
    previous = os.umask(umask)
    try:
        write_graph(tmp_path / "g.h5", GraphData(np.array([0, 1, 1]), np.array([1])))
        (tmp_path / "plain").write_text("")
    finally:
        os.umask(previous)
    assert (tmp_path / "g.h5").stat().st_mode & 0o777 == 0o666 & ~umask
    assert (tmp_path / "g.h5").stat().st_mode & 0o777 == (tmp_path / "plain").stat().st_mode & 0o777


@pytest.mark.parametrize("error", [ValueError, KeyboardInterrupt])
def test_failed_write_leaves_no_hidden_file(tmp_path, error):
    with pytest.raises(error):
        with atomic_h5(tmp_path / "out.h5") as f:
            f.create_dataset("x", data=np.arange(10))
            raise error()
    assert list(tmp_path.iterdir()) == []


def test_failed_run_leaves_no_hidden_file(files, tmp_path):
    pregel(2, "run", "pagerank", "--graph", files / "g.h5", "--out", tmp_path / "o.h5", "--tol", "nan")
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------- paper cuts

@pytest.mark.parametrize("ranks", [1, 2, 3])
def test_sssp_without_weights_counts_each_edge_as_one(tmp_path, ranks):
    indptr, indices = generate_graph("powerlaw", 80, 3, seed=7)
    graph = tmp_path / "unweighted.h5"
    write_graph(graph, GraphData(indptr, indices))
    result = pregel(ranks, "run", "sssp", "--graph", graph, "--out", tmp_path / "o.h5", "--source", "3")
    assert result.returncode == 0, result.stderr
    g = nx.DiGraph()
    g.add_nodes_from(range(80))
    g.add_edges_from(zip(np.repeat(np.arange(80), np.diff(indptr)).tolist(), indices.tolist()))
    hops = nx.single_source_shortest_path_length(g, 3)
    with h5py.File(tmp_path / "o.h5") as f:
        assert np.array_equal(f["values"][:], [hops.get(v, np.inf) for v in range(80)])


def test_kernels_package_exports_its_kernels():
    code = ("from kernels import gather_reduce, scatter_reduce, segment_softmax\n"
            "import numpy as np\n"
            "print(gather_reduce(np.array([0, 2]), np.array([0, 1]), np.array([1.0, 2.0]), 'sum'))\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=ENV, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[3.]"


def test_the_repository_cites_no_design_document():
    name = "DESIGN" + ".md"
    tracked = subprocess.run(["git", "ls-files"], capture_output=True, text=True, cwd=ROOT).stdout.split()
    citing = [path for path in tracked if os.path.isfile(os.path.join(ROOT, path))
              and name.encode() in open(os.path.join(ROOT, path), "rb").read()]
    assert citing == []
