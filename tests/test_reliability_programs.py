"""Issue 24, user vertex programs (``pregel run FILE.py:CLASS``) at P = 1 and 2: a hook that returns the
wrong thing is one line naming the file, the class and the hook (exit 2, no result file); a combiner that
does not exist is refused before the first superstep; an error raised in the user's own code keeps its
traceback, after one line naming the file, the hook, the line and the rank."""

import pytest
from test_reliability import one_line, pregel

from pregel.generate import generate_graph
from pregel.graph_io import GraphData, write_graph

HEAD = "import numpy as np\nfrom pregel.program import VertexProgram\n\n\nclass P(VertexProgram):\n"
PROGRAMS = {  # name -> (class body, what the one line says)
    "rows": ("    def init(self, ctx):\n        return np.zeros(ctx.num_local), False\n\n"
             "    def output(self, ctx, state):\n        return np.zeros(3)\n",
             "P.output(): returned 3 rows; it must return one row per owned vertex"),
    "float_active": ("    def init(self, ctx):\n        return np.zeros(ctx.num_local)\n\n"
                     "    def message(self, ctx, state):\n        return state\n\n"
                     "    def apply(self, ctx, state, gathered):\n        return state, np.ones(ctx.num_local)\n",
                     "P.apply(): active must be a bool or a bool"),
    "combiner": ("    combiner = 'product'\n", "P.combiner(): P uses combiner 'product'; it must be one of"),
}


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    path = tmp_path_factory.mktemp("prog") / "g.h5"
    indptr, indices = generate_graph("er", 50, 3, seed=2)
    write_graph(path, GraphData(indptr, indices))
    return path


@pytest.mark.parametrize("ranks", [1, 2])
@pytest.mark.parametrize("name", list(PROGRAMS))
def test_a_hook_returning_the_wrong_thing_is_one_line_naming_it(graph, tmp_path, ranks, name):
    body, says = PROGRAMS[name]
    program = tmp_path / "prog.py"
    program.write_text(HEAD + body)
    out = tmp_path / "o.h5"
    one_line(pregel(ranks, "run", f"{program}:P", "--graph", graph, "--out", out), str(program), says)
    assert not out.exists()


@pytest.mark.parametrize("ranks", [1, 2])
@pytest.mark.parametrize("body, hook, line, says", [
    ("    def message(self, ctx, state):\n        ctx.send_to(np.array([1.0, 2.5]), np.ones(2))\n"
     "        return None\n", "message", 7, "ValueError: send_to: ids must be integers, got float64"),
    ("    def apply(self, ctx, state, gathered):\n        if ctx.rank == ctx.size - 1:\n"
     "            raise RuntimeError('boom')\n        return state, False\n", "apply", 8, "RuntimeError: boom"),
])
def test_an_error_in_the_users_code_names_file_hook_line_and_rank_before_its_traceback(graph, tmp_path, ranks,
                                                                                      body, hook, line, says):
    program = tmp_path / "prog.py"
    program.write_text(HEAD + body)
    result = pregel(ranks, "run", f"{program}:P", "--graph", graph, "--out", tmp_path / "o.h5")
    assert result.returncode == 1, result.stderr
    where = f" [rank {ranks - 1}]" if ranks > 1 else ""  # the last rank fails (in message(), every rank)
    first = f"pregel run{where}: your program {program} failed in {hook}() at line {line}: {says}"
    lines = result.stderr.splitlines()
    at = [i for i, text in enumerate(lines) if first in text]  # mpiexec may join two ranks' lines
    assert at, result.stderr
    assert "Traceback" in "\n".join(lines[at[0]:])  # the user's traceback follows the line
    assert not (tmp_path / "o.h5").exists()
