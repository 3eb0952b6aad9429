"""benchmarks/frontier.py runs end to end on a tiny generated graph: every engine job's output equals
scipy.sparse.csgraph's, and it prints one table row per algorithm and method. No timing is asserted."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import h5py

ROOT = Path(__file__).resolve().parent.parent


def test_frontier_benchmark_smoke_run_prints_the_table(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    raw = tmp_path / "frontier.json"
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "frontier.py"), "--nodes", "1000",
                             "--avg-degree", "4", "--weights", "--json", str(raw)], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    rows = [line.split(" | ") for line in result.stdout.splitlines() if line.startswith("| ") and "---" not in line]
    assert [row[:2] for row in rows[1:]] == [[f"| {a}", m] for a in ("bfs", "sssp", "wcc")
                                             for m in ("scipy.sparse.csgraph", "engine P=1", "engine P=2")]
    assert [row[-1] for row in rows[1:]] == ["reference |", "yes |", "yes |"] * 3
    runs = json.loads(raw.read_text())["runs"]
    assert all(len(run["rss"]) == int(method[-1]) and run["supersteps"] >= 1
               for methods in runs.values() for method, r in methods.items() if method.startswith("engine")
               for run in r)


def test_frontier_benchmark_passes_sssp_its_window(tmp_path):
    """``--delta`` reaches sssp: a narrow window takes more supersteps than pregel's default on the same graph."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    raw = tmp_path / "frontier.json"
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "frontier.py"), "--nodes", "1000",
                             "--avg-degree", "4", "--weights", "--algorithms", "sssp", "--ranks", "1",
                             "--delta", "0.02", "--keep", "--json", str(raw)], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "sssp --delta 0.02;" in result.stdout
    kept = Path(result.stdout.split("kept ")[1].split()[0])
    try:
        default = subprocess.run([sys.executable, "-m", "pregel.cli", "run", "sssp", "--graph", str(kept / "g.h5"),
                                  "--out", str(tmp_path / "o.h5"), "--quiet"], cwd=ROOT, env=env,
                                 capture_output=True, text=True, timeout=120)
        assert default.returncode == 0, default.stderr
    finally:
        shutil.rmtree(kept)
    with h5py.File(tmp_path / "o.h5") as f:
        default_supersteps = int(f.attrs["supersteps"])
    runs = json.loads(raw.read_text())
    narrow = runs["runs"]["sssp"]["engine P=1"][0]
    assert runs["delta"] == 0.02 and narrow["equal"] and narrow["supersteps"] > default_supersteps
