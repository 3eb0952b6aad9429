"""benchmarks/gpu.py runs end to end (``--smoke``: tiny sizes; under the simulator its peers run on
torch's CPU and gsplat is skipped) and prints its one table; its odin run with the send thread trains
the model of its run posting inline; its time per image after the first step, by hand."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

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


def test_seconds_per_image_after_first_step_by_hand(tmp_path, monkeypatch):
    """Step 1 ends at 1.0 s and step 3 at 3.0 s on one rank or the other; batches of 2: 4 images in 2.0 s.
    The plan ('steps 1-4') and events that are not spans are left out."""
    import json

    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    from gpu import seconds_per_image_after_first_step

    events = [{"name": "compute plan steps 1-4", "ph": "X", "ts": 0.0, "dur": 9e6, "pid": 0},
              {"name": "compute image 0 (step 1, camera 2)", "ph": "X", "ts": 2e5, "dur": 5e5, "pid": 0},
              {"name": "send cell 3 after step 1 (sums 2 images)", "ph": "X", "ts": 9e5, "dur": 1e5, "pid": 1},
              {"name": "compute image 4 (step 3, camera 1)", "ph": "X", "ts": 2e6, "dur": 5e5, "pid": 0},
              {"name": "send metadata after step 3", "ph": "X", "ts": 2.9e6, "dur": 1e5, "pid": 1},
              {"name": "compute image 2 (step 2, camera 0)", "ph": "X", "ts": 1.5e6, "dur": 1e5, "pid": 1},
              {"name": "thread_name", "ph": "M", "pid": 0, "args": {"name": "step 9"}}]
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    assert seconds_per_image_after_first_step(str(path), 2) == pytest.approx(0.5, rel=1e-12)
