"""Row-sharded checkpoints: saved at P = 2, restored at P = 1 and 3 (each rank keeping the rows of
its cells, read in small chunks), the union of the restored rows is what was saved, each row on
exactly the rank that owns its cell; a damaged part is the same one-line error on every rank."""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "mpi_scripts"))
from sharded_checkpoint import SCALARS, model  # noqa: E402
from tests_support import the_error_of_every_rank  # noqa: E402

MPIEXEC = shutil.which("mpiexec", path=os.path.dirname(sys.executable)) or "mpiexec"
SCRIPT = os.path.join(os.path.dirname(__file__), "mpi_scripts", "sharded_checkpoint.py")
ENV = dict(os.environ, OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1")


def _run(size: int, folder, action: str, check: bool = True):
    return subprocess.run([MPIEXEC, "-n", str(size), sys.executable, "-m", "mpi4py", SCRIPT, str(folder), action],
                          timeout=300, env=ENV, capture_output=True, text=True, check=check)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    folder = tmp_path_factory.mktemp("sharded")
    _run(2, folder, "save")
    return folder


def test_manifest_records_the_parts_and_columns(saved):
    step = saved / "ckpt" / "step-000000012"
    manifest = json.loads((step / "manifest.json").read_text())
    assert [p["file"] for p in manifest["parts"]] == ["global.npz", "part-00000.npz", "part-00001.npz"]
    assert manifest["ranks"] == 2 and manifest["rows"] == 500 and manifest["note"] == "test"
    assert [c[0] for c in manifest["columns"]] == list(model())


@pytest.mark.parametrize("size", [1, 3])
def test_restore_at_another_size_gives_every_row_to_its_owner(saved, size):
    _run(size, saved, "restore")
    table, order = model(), np.argsort(model()["ids"])
    parts = []
    for rank in range(size):
        with np.load(saved / f"restored-{size}-{rank}.npz") as z:
            part = {k: z[k] for k in z.files}
        assert np.all(part["cell"] % size == rank)  # only the rows of its cells
        np.testing.assert_array_equal(part["scalar_losses"], SCALARS["losses"])
        assert float(part["scalar_safety"]) == 2.0
        parts.append(part)
    union = {name: np.concatenate([p[name] for p in parts]) for name in table}
    mine = np.argsort(union["ids"])
    for name, value in table.items():
        assert union[name].dtype == value.dtype and np.array_equal(union[name][mine], value[order]), name


def test_a_damaged_part_is_one_error_on_every_rank(saved, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(saved / "ckpt", copy / "ckpt")
    part = copy / "ckpt" / "step-000000012" / "part-00001.npz"
    data = bytearray(part.read_bytes())
    data[len(data) // 2] ^= 0xFF
    part.write_bytes(bytes(data))
    run = _run(3, copy, "restore", check=False)
    assert run.returncode != 0
    message = the_error_of_every_rank(run.stdout, 3)
    assert "part-00001.npz" in message and "corrupted" in message
    assert not list(copy.glob("restored-*"))
