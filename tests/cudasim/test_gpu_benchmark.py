"""benchmarks/gpu.py runs end to end (``--smoke``: tiny sizes; under the simulator its peers run on
torch's CPU and gsplat is skipped) and prints its one table; its odin run with the send thread trains
the model of its run posting inline."""
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_gpu_benchmark_smoke_run_prints_the_table():
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu.py"), "--smoke"], cwd=ROOT,
                            env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("section"))
    assert "ours / peer" in lines[header]
    sections = [line.split()[0] for line in lines[header + 2:] if line.strip()]
    assert sections == ["gather", "gather", "PageRank", "rasterizer", "SAGE", "SAGE", "training", "send",
                        "projection", "projection"]
    # the run with the send thread trains the model of the run posting inline (to the CUDA atomics' bits)
    send_row = next(line for line in lines if line.startswith("send thread"))
    assert float(send_row.rsplit("rel diff ", 1)[1]) < 1e-5
    assert all("dominates" in line for line in lines if line.startswith("projection"))
