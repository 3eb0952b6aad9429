"""The project's import graph, read with ``ast`` (nothing is imported): no cycles, module-level or
inside functions, and every import goes the way the README's layout says:

* ``kernels`` imports none of ``pregel``, ``vertex_programs``, ``odin_sched``;
* ``pregel`` imports neither ``vertex_programs`` nor ``odin_sched``, except ``pregel/cli/``, the
  command line, which calls into every package (and which no package imports);
* ``vertex_programs`` does not import ``odin_sched``;
* inside ``odin_sched``: scenes <- training <- odin <- sim <- view (a subpackage imports only those to its
  left);
* nothing imports ``examples`` or ``benchmarks``.
"""
import ast
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("kernels", "pregel", "vertex_programs", "odin_sched")
NEVER_IMPORTED = ("examples", "benchmarks")
#: the subpackages of odin_sched in the order of their imports: each may import those before it
ODIN_LAYERS = ("odin_sched.scenes", "odin_sched.training", "odin_sched.odin", "odin_sched.sim", "odin_sched.view")
CLI = "pregel.cli"


def module_files(root: Path, packages=PACKAGES) -> dict:
    """{dotted module name: path} of every .py file under ``root``/``packages``."""
    out = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def _absolute(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    """The absolute name a (possibly relative) ``from X import ...`` names."""
    if not node.level:
        return node.module or ""
    base = module.split(".")
    base = base[:len(base) - node.level + (1 if is_package else 0)]
    return ".".join(base + ([node.module] if node.module else []))


def imports_of(module: str, path: Path, known: set) -> list:
    """[(imported name, line)] of every import statement in ``path`` (at any depth: functions, classes,
    ``if`` blocks), resolved to a module of ``known`` where one is named (``from a import b`` names
    ``a.b`` when that is a module, else ``a``), else kept as written."""
    tree = ast.parse(path.read_text(), filename=str(path))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(module, path.name == "__init__.py", node)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                out.append((sub if sub in known else base, node.lineno))
    return list(dict.fromkeys(out))  # once per statement


def import_graph(root: Path, packages=PACKAGES) -> dict:
    """{module: [(imported name, line)]} over the packages under ``root``."""
    files = module_files(root, packages)
    return {module: imports_of(module, path, set(files)) for module, path in files.items()}


def _top(name: str) -> str:
    return name.split(".")[0]


def _within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def _layer(name: str) -> int | None:
    for i, layer in enumerate(ODIN_LAYERS):
        if _within(name, layer):
            return i
    return None


def direction_problem(src: str, dst: str) -> str | None:
    """Why ``src`` importing ``dst`` goes against the layout, or None."""
    top, target = _top(src), _top(dst)
    if target in NEVER_IMPORTED:
        return f"nothing imports {target}"
    if _within(dst, CLI) and not _within(src, CLI):
        return "nothing imports the command line (pregel.cli)"
    if target not in PACKAGES or target == top or _within(src, CLI):
        if top == target == "odin_sched":
            a, b = _layer(src), _layer(dst)
            if b is not None and (a is None or b > a):
                return f"odin_sched's subpackages import only to their left: {' <- '.join(ODIN_LAYERS)}"
        return None
    allowed = {"kernels": (), "pregel": ("kernels",), "vertex_programs": ("kernels", "pregel"),
               "odin_sched": ("kernels", "pregel")}[top]
    if target not in allowed:
        return f"{top} may import only {', '.join(allowed) or 'itself'}"
    return None


def find_cycles(graph: dict) -> list:
    """The import cycles of ``graph`` (its strongly connected components of more than one module, or a
    module importing itself), each a sorted list of modules (Tarjan's algorithm, iterative)."""
    edges = {m: sorted({d for d, _ in deps if d in graph}) for m, deps in graph.items()}
    index, low, on_stack, stack, cycles, counter = {}, {}, set(), [], [], [0]
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(edges[start]))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter[0]
                    counter[0] += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(edges[child])))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1 or node in edges[node]:
                    cycles.append(sorted(component))
    return cycles


def layout_problems(root: Path, packages=PACKAGES, extra_importers=()) -> list:
    """Every cycle and every import against the layout under ``root``, one line each.
    ``extra_importers``: more folders whose files must not import examples or benchmarks."""
    graph = import_graph(root, packages)
    problems = [f"import cycle: {' <-> '.join(cycle)}" for cycle in find_cycles(graph)]
    for module, deps in sorted(graph.items()):
        for dst, line in deps:
            why = direction_problem(module, dst)
            if why:
                problems.append(f"{graph_path(root, module)}:{line}: imports {dst}: {why}")
    for folder in extra_importers:
        for path in sorted((root / folder).rglob("*.py")):
            for dst, line in imports_of(path.stem, path, set()):
                if _top(dst) in NEVER_IMPORTED:
                    problems.append(f"{path.relative_to(root)}:{line}: imports {dst}: nothing imports {_top(dst)}")
    return problems


def graph_path(root: Path, module: str) -> str:
    files = module_files(root, (_top(module),))
    return os.fspath(files[module].relative_to(root))


def test_the_project_has_no_cycle_and_keeps_the_layout():
    assert layout_problems(ROOT, extra_importers=("tests",)) == []


def package_graph(root: Path = ROOT) -> set:
    """{(importing package, imported package)}: odin_sched by subpackage, pregel.cli (all its modules) on its
    own."""
    graph = import_graph(root)
    return {(_package(m), _package(d)) for m, deps in graph.items() for d, _ in deps
            if _top(d) in PACKAGES and _package(m) != _package(d)}


def test_the_walker_sees_the_real_imports():
    edges = package_graph()
    assert {("odin_sched.training", "odin_sched.scenes"), ("odin_sched.odin", "odin_sched.training"),
            ("odin_sched.sim", "odin_sched.odin"), ("pregel", "kernels"), (CLI, "odin_sched.sim")} <= edges


def _package(module: str) -> str:
    if _within(module, CLI):
        return CLI
    layer = _layer(module)
    return ODIN_LAYERS[layer] if layer is not None else _top(module)


# --- the checker catches what it must, on small synthetic trees

def _tree(root: Path, files: dict) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for package in PACKAGES:
        (root / package).mkdir(exist_ok=True)
        (root / package / "__init__.py").touch()
    return root


def test_checker_finds_a_cycle_made_inside_functions(tmp_path):
    root = _tree(tmp_path, {
        "pregel/a.py": "import numpy\n\ndef f():\n    from pregel.b import g\n",
        "pregel/b.py": "def g():\n    from pregel import a\n",
        "pregel/c.py": "from pregel.a import f\n",
    })
    assert find_cycles(import_graph(root)) == [["pregel.a", "pregel.b"]]
    assert layout_problems(root) == ["import cycle: pregel.a <-> pregel.b"]


def test_checker_finds_a_relative_import_cycle_through_a_package(tmp_path):
    root = _tree(tmp_path, {
        "odin_sched/__init__.py": "",
        "odin_sched/scenes/__init__.py": "from .io import read\n",
        "odin_sched/scenes/io.py": "from odin_sched.scenes import helper\n",
        "odin_sched/scenes/helper.py": "from . import read\n",
    })
    assert find_cycles(import_graph(root)) == [
        ["odin_sched.scenes", "odin_sched.scenes.helper", "odin_sched.scenes.io"]]


def test_checker_finds_imports_against_the_direction(tmp_path):
    root = _tree(tmp_path, {
        "odin_sched/__init__.py": "",
        "odin_sched/scenes/__init__.py": "",
        "odin_sched/scenes/ply.py": "def f():\n    from odin_sched.training.train import x\n",
        "odin_sched/training/__init__.py": "",
        "odin_sched/training/train.py": "x = 1\n",
        "odin_sched/sim/__init__.py": "",
        "odin_sched/sim/simulate.py": "from odin_sched.training import train\n",
        "kernels/k.py": "from pregel.errors import InputError\n",
        "pregel/engine.py": "import vertex_programs.pagerank\nfrom pregel.cli.common import x\n",
        "pregel/cli/__init__.py": "from odin_sched.sim import simulate\nimport vertex_programs\n",
        "pregel/cli/common.py": "x = 1\n",
        "pregel/errors.py": "",
        "vertex_programs/pagerank.py": "from pregel import cli\nfrom benchmarks import odin\n",
    })
    problems = layout_problems(root)
    assert problems == [
        "kernels/k.py:1: imports pregel.errors: kernels may import only itself",
        "odin_sched/scenes/ply.py:2: imports odin_sched.training.train: odin_sched's subpackages import only "
        "to their left: " + " <- ".join(ODIN_LAYERS),
        "pregel/engine.py:1: imports vertex_programs.pagerank: pregel may import only kernels",
        "pregel/engine.py:2: imports pregel.cli.common: nothing imports the command line (pregel.cli)",
        "vertex_programs/pagerank.py:1: imports pregel.cli: nothing imports the command line (pregel.cli)",
        "vertex_programs/pagerank.py:2: imports benchmarks: nothing imports benchmarks",
    ]


def test_checker_accepts_a_tree_that_keeps_the_layout(tmp_path):
    root = _tree(tmp_path, {
        "odin_sched/__init__.py": "",
        "odin_sched/scenes/__init__.py": "",
        "odin_sched/scenes/ply.py": "from pregel.errors import InputError\nfrom kernels import k\n",
        "odin_sched/training/__init__.py": "",
        "odin_sched/training/train.py": "from odin_sched.scenes.ply import f\n",
        "odin_sched/sim/__init__.py": "",
        "odin_sched/sim/simulate.py": "def f():\n    from odin_sched.training import train\n",
        "kernels/k.py": "import numpy\n",
        "pregel/errors.py": "from kernels.k import x\n",
        "pregel/cli/__init__.py": "from pregel.cli.run_command import f\n",
        "pregel/cli/run_command.py": "def f():\n    from odin_sched.sim import simulate\n    import vertex_programs\n",
    })
    assert layout_problems(root) == []


@pytest.mark.parametrize("src,dst", [("odin_sched.sim.simulate", "odin_sched.odin.trainer"),
                                     ("odin_sched.odin.trainer", "odin_sched.training.train"),
                                     ("odin_sched.training.train", "odin_sched.scenes.scene_io"),
                                     ("odin_sched.scenes.ply", "pregel.errors"),
                                     ("vertex_programs.pagerank", "kernels.graph")])
def test_direction_allows_the_layout(src, dst):
    assert direction_problem(src, dst) is None
