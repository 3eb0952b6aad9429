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
from sharded_checkpoint import IDENTITY, SCALARS, model  # noqa: E402
from tests_support import densified_model, the_error_of_every_rank  # noqa: E402

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


def test_training_state_round_trips_through_a_sharded_checkpoint(tmp_path):
    """A VisibleAdam and accumulator after steps and a densification round, saved as columns and
    restored (in another row order, as a restore at another size gives), hold the same state."""
    import torch

    from odin_sched.training.checkpoint import install_columns, state_columns
    from odin_sched.training.optim import VisibleAdam, default_lrs
    from pregel.comm import Comm
    from pregel.sharded_checkpoint import ShardedCheckpointer

    g = 40
    opt, accum = densified_model(g)
    assert opt.ids.max() > g  # densified: ids beyond the initial ones
    comm = Comm()
    ShardedCheckpointer(comm, IDENTITY, tmp_path / "ck").save_rows(5, state_columns(opt, accum), {"step": 5})
    rows, scalars = ShardedCheckpointer(comm, IDENTITY, resume=tmp_path / "ck").load_rows(
        lambda small: np.ones(len(small["ids"]), bool))
    only, _ = ShardedCheckpointer(comm, IDENTITY, resume=tmp_path / "ck").load_rows(
        lambda small: small["ids"] % 2 == 0, columns=("params/means",))
    assert list(only) == ["params/means"]  # only the columns asked for (and the keys) are read
    assert np.array_equal(only["params/means"], rows["params/means"][rows["ids"] % 2 == 0])
    reverse = {name: value[::-1] for name, value in rows.items()}
    fresh = VisibleAdam({name: p.detach() for name, p in opt.params.items()}, default_lrs(1.0))
    restored = install_columns(fresh, reverse, with_accum=True)
    order = torch.argsort(opt.ids)
    back = torch.argsort(fresh.ids)
    assert torch.equal(fresh.ids[back], opt.ids[order]) and int(scalars["step"]) == 5
    assert torch.equal(fresh.step_count[back], opt.step_count[order])
    for state, other in ((fresh.params, opt.params), (fresh.exp_avg, opt.exp_avg), (fresh.exp_avg_sq, opt.exp_avg_sq)):
        for name in other:
            assert torch.equal(state[name].detach()[back], other[name].detach()[order]), name
    for name in ("total", "count", "max_radii"):
        assert torch.equal(getattr(restored, name)[back], getattr(accum, name)[order]), name


@pytest.mark.parametrize("size", [1, 3])
def test_a_training_checkpoint_of_two_owners_resumes_as_the_cut_at_another_size(tmp_path, size):
    """Shards of a densified model written by their 2 owners and resumed at P = 1 and 3: every rank holds
    exactly what cutting the whole model at that P gives (``Shard.from_full``: cells, owners, state bit
    for bit), and reads only its own rows."""
    script = os.path.join(os.path.dirname(__file__), "mpi_scripts", "shard_resume.py")

    def run(ranks, action):
        return subprocess.run([MPIEXEC, "-n", str(ranks), sys.executable, "-m", "mpi4py", script, str(tmp_path),
                               action], timeout=300, env=ENV, capture_output=True, text=True, check=True)

    run(2, "save")
    manifest = json.loads((tmp_path / "ck" / "step-000000004" / "manifest.json").read_text())
    assert [p["file"] for p in manifest["parts"]] == ["global.npz", "part-00000.npz", "part-00001.npz"]
    run(size, "resume")
    kept, total = np.array([(tmp_path / f"kept-{size}-{r}.txt").read_text().split() for r in range(size)], int).T
    assert sum(kept) == total[0] == manifest["rows"] and (total == total[0]).all()
