"""The graph subcommands end to end, as a user runs them (subprocesses of the installed command)."""
import os
import re
import shutil
import subprocess
import sys

import h5py
import numpy as np

from pregel.convert import to_networkx
from pregel.graph_io import read_graph

PREGEL = [shutil.which("pregel") or sys.executable, *([] if shutil.which("pregel") else ["-m", "pregel.cli"])]


def run(*args, check=True):
    result = subprocess.run([*PREGEL, *map(str, args)], capture_output=True, text=True, timeout=120)
    if check:
        assert result.returncode == 0, result.stderr
    return result


def test_generate_then_inspect_reports_networkx_degrees(tmp_path):
    out = tmp_path / "g.h5"
    run("generate", "--kind", "powerlaw", "--nodes", 3000, "--avg-degree", 6, "--features", 8,
        "--labels", 3, "--weights", "--seed", 5, "--out", out)
    graph = read_graph(out)
    assert graph.features.shape == (3000, 8) and set(np.unique(graph.labels)) == {0, 1, 2}
    assert graph.weights.min() > 0 and graph.weights.max() <= 1
    report = run("inspect", out).stdout
    g = to_networkx(graph)
    max_in = max(d for _, d in g.in_degree())
    max_out = max(d for _, d in g.out_degree())
    assert re.search(rf"out-degree .* max {max_out:,}", report)
    assert re.search(rf"in-degree .* max {max_in:,}", report)
    hub = max(g.in_degree(), key=lambda vd: (vd[1], -vd[0]))[0]
    assert f"top: {hub} ({max_in:,})" in report
    assert f"edges       {g.number_of_edges():,} (directed)" in report


def test_convert_edge_list(tmp_path):
    (tmp_path / "e.txt").write_text("# toy\n0 1 1.5\n1 2 2.5\n")
    run("convert", tmp_path / "e.txt", "--out", tmp_path / "e.h5")
    graph = read_graph(tmp_path / "e.h5")
    assert graph.indices.tolist() == [1, 2] and graph.weights.tolist() == [1.5, 2.5]


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    out = tmp_path / "g.h5"
    run("generate", "--kind", "er", "--nodes", 100, "--avg-degree", 3, "--out", out)
    with h5py.File(out, "r+") as f:
        f["graph/indices"][4] = 1000
    result = run("inspect", out, check=False)
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0
    assert str(out) in result.stderr and "/graph/indices" in result.stderr and "outside [0, 100)" in result.stderr
    missing = run("inspect", tmp_path / "none.h5", check=False)
    assert missing.returncode == 2 and "no such file" in missing.stderr


def test_generate_refuses_bad_options_without_writing(tmp_path):
    out = tmp_path / "g.h5"
    result = run("generate", "--nodes", 0, "--out", out, check=False)
    assert result.returncode == 2 and "--nodes must be at least 1" in result.stderr
    assert not out.exists()


def test_generate_refuses_flags_that_do_not_apply_to_the_kind(tmp_path):
    # a grid ignored --avg-degree, --exponent and --undirected, and an Erdős–Rényi graph --exponent, silently
    out = tmp_path / "g.h5"
    for kind, flags, problem in (("grid", ["--avg-degree", 3], "--avg-degree does not apply to --kind grid (a grid"),
                                 ("grid", ["--exponent", 2.1], "--exponent does not apply to --kind grid"),
                                 ("grid", ["--undirected"], "--undirected does not apply to --kind grid"),
                                 ("er", ["--exponent", 2.1], "--exponent does not apply to --kind er")):
        result = run("generate", "--kind", kind, "--nodes", 100, *flags, "--out", out, check=False)
        assert result.returncode == 2 and problem in result.stderr, result.stderr
        assert result.stderr.strip().count("\n") == 0 and not out.exists()
    run("generate", "--kind", "grid", "--nodes", 100, "--weights", "--out", out)  # what a grid takes
    grid = read_graph(out)
    assert grid.num_nodes == 100 and grid.num_edges == 2 * 2 * 10 * 9 and grid.weights is not None


def test_generate_refuses_more_edges_than_a_simple_graph_holds_as_one_line(tmp_path):
    # a simple directed graph on N vertices has at most N (N - 1) edges: 5 vertices hold 20, not 5 x 10
    out = tmp_path / "g.h5"
    for flags, problem in ((["--nodes", 5, "--avg-degree", 10], "at most 20"),
                           (["--nodes", 1], "at most 0"),  # the default --avg-degree 10 on one vertex
                           (["--nodes", 100, "--avg-degree", "inf"], "--avg-degree must be a non-negative number")):
        result = run("generate", "--kind", "er", *flags, "--out", out, check=False)
        assert result.returncode == 2, result.stderr
        assert "Traceback" not in result.stderr and result.stderr.strip().count("\n") == 0, result.stderr
        assert problem in result.stderr
        assert not out.exists()
    run("generate", "--kind", "er", "--nodes", 5, "--avg-degree", 4, "--out", out)  # the complete digraph fits
    assert read_graph(out).num_edges == 20


def test_convert_refuses_an_edge_list_whose_ids_make_a_graph_larger_than_memory(tmp_path):
    # ids are 0..N-1, so the id 10**15 asks for 10**15 vertices: 16 PB of CSR arrays on any machine. It is
    # refused before anything is allocated (at 3e9 on a 24 GB machine the kernel used to kill the command)
    (tmp_path / "e.txt").write_text(f"0 1\n1 {10**15}\n")
    result = run("convert", tmp_path / "e.txt", "--out", tmp_path / "e.h5", check=False)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().count("\n") == 0 and "Traceback" not in result.stderr
    assert "e.txt" in result.stderr and "1,000,000,000,000,001 vertices" in result.stderr
    assert "ids are numbered 0..N-1" in result.stderr and "more than this machine's" in result.stderr
    assert not (tmp_path / "e.h5").exists()


def test_generate_refuses_a_graph_larger_than_memory_before_allocating(tmp_path):
    out = tmp_path / "g.h5"
    result = run("generate", "--nodes", 10**15, "--avg-degree", 0, "--out", out, check=False)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().count("\n") == 0 and "Traceback" not in result.stderr
    assert "1,000,000,000,000,000 vertices" in result.stderr and "more than this machine's" in result.stderr
    assert not out.exists()


def test_an_output_that_is_a_pipe_is_refused_not_replaced_by_a_file(tmp_path):
    # results are renamed onto --out: on a FIFO (or, as root, /dev/null) that replaced the special file
    # itself with a regular one
    import os
    import stat

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    result = run("generate", "--kind", "er", "--nodes", 10, "--avg-degree", 2, "--out", fifo, check=False)
    assert result.returncode == 2 and result.stderr.strip().count("\n") == 0, result.stderr
    assert "fifo: cannot write: is a device, pipe or socket" in result.stderr
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode), "the pipe is still a pipe"


def test_inspect_into_a_closed_pipe_ends_quietly_as_sigpipe_would(tmp_path):
    # `pregel inspect g.h5 | head -1`: once the reader has gone, a write fails; that printed a
    # BrokenPipeError traceback. The pipe's read end is closed before the command starts, so every
    # write fails, deterministically
    import os

    out = tmp_path / "g.h5"
    run("generate", "--kind", "er", "--nodes", 10, "--avg-degree", 2, "--out", out)
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        result = subprocess.run([*PREGEL, "inspect", str(out)], stdout=write_end, stderr=subprocess.PIPE,
                                text=True, timeout=120)
    finally:
        os.close(write_end)
    assert result.returncode == 128 + 13, result.stderr  # the status of a process ended by SIGPIPE
    assert result.stderr == "", result.stderr


def test_a_folder_given_as_an_input_file_is_named_a_folder_not_missing(tmp_path):
    folder, table = tmp_path / "data", tmp_path / "data.csv"
    folder.mkdir()
    table.mkdir()
    out = tmp_path / "o.h5"
    for named, args in ((folder, ["inspect", folder]), (folder, ["convert", folder, "--out", out]),
                        (table, ["convert", table, "--src", "a", "--dst", "b", "--out", out]),
                        (folder, ["run", "wcc", "--graph", folder, "--out", out])):
        result = run(*args, check=False)
        assert result.returncode == 2 and result.stderr.strip().count("\n") == 0, result.stderr
        assert f"{named}: is a directory, not a file" in result.stderr, result.stderr
    assert not out.exists()
    missing = run("inspect", tmp_path / "none.h5", check=False)
    assert missing.returncode == 2 and "none.h5: no such file" in missing.stderr


def test_checkpoint_folder_and_output_file_on_one_path_are_refused_before_any_work(tmp_path):
    # the checkpoint folder was made first, then --out refused as "is a directory", leaving the folder behind
    graph, model = tmp_path / "g.h5", tmp_path / "m.pt"
    run("generate", "--kind", "er", "--nodes", 30, "--avg-degree", 2, "--features", 4, "--out", graph)
    import torch
    from torch_geometric.nn import SAGEConv

    from vertex_programs.gnn import save_model
    torch.manual_seed(0)
    save_model(model, [SAGEConv(4, 2)])
    same = tmp_path / "same.h5"
    for command in (["run", "pagerank"], ["infer", "--model", model]):
        result = run(*command, "--graph", graph, "--out", same, "--checkpoint-dir", same, check=False)
        assert result.returncode == 2 and result.stderr.strip().count("\n") == 0, result.stderr
        assert "--checkpoint-dir names the same path as --out" in result.stderr
        assert not same.exists(), "nothing left behind"


def test_a_one_process_command_under_mpiexec_runs_on_rank_0_alone(tmp_path):
    # under mpiexec -n 2 every rank generated the graph, printed its line and renamed its own file into place
    mpiexec = shutil.which("mpiexec", path=os.path.dirname(sys.executable)) or "mpiexec"
    out = tmp_path / "g.h5"
    command = [mpiexec, "-n", "2", *PREGEL, "generate", "--kind", "grid", "--nodes", "100", "--out", str(out)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120,
                            env=dict(os.environ, OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1"))
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("wrote") == 1 and read_graph(out).num_nodes == 100
    bad = subprocess.run([*command[:-4], "--nodes", "0", "--out", str(tmp_path / "none.h5")],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and bad.stderr.count("--nodes must be at least 1") == 1
    assert not (tmp_path / "none.h5").exists()
