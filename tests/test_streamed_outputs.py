"""Streamed outputs: the trained scene file, PLY and PNG written by rank 0 from rows split arbitrarily
over P = 1, 2, 3 ranks (in bounded pieces) equal those written from the whole model sorted by id with
``write_scene`` / ``write_ply`` (read back with h5py and plyfile); a repeated id is one error on every
rank and leaves no file."""
import os
import shutil
import subprocess
import sys

import h5py
import numpy as np
import pytest
from PIL import Image
from plyfile import PlyData

from odin_sched.scenes.scene_gen import generate_scene
from odin_sched.scenes.scene_io import Scene, heldout_mask, read_scene, write_scene
from odin_sched.scenes.sh import sh0_to_rgb
from odin_sched.training.outputs import OutputPaths, write_trained

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "mpi_scripts"))
from tests_support import the_error_of_every_rank  # noqa: E402

MPIEXEC = shutil.which("mpiexec", path=os.path.dirname(sys.executable)) or "mpiexec"
SCRIPT = os.path.join(os.path.dirname(__file__), "mpi_scripts", "write_trained.py")
NAMES = ("means", "scales", "quats", "opacities", "sh0", "shN")
G = 700
PIECE_BYTES = 4_000  # about 20 rows per piece: many rounds of the merge


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    folder = tmp_path_factory.mktemp("streamed")
    scene_path = folder / "scene.h5"
    write_scene(scene_path, generate_scene(200, 10, 16, 12, seed=2))
    rng = np.random.default_rng(7)
    ids = rng.choice(2 ** 62, G, replace=False).astype(np.int64)
    arrays = {"means": rng.normal(size=(G, 3)), "scales": rng.normal(size=(G, 3)) - 3,
              "quats": rng.normal(size=(G, 4)), "opacities": rng.normal(size=G),
              "sh0": rng.normal(size=(G, 1, 3)), "shN": rng.normal(size=(G, 15, 3)) * 0.1}
    arrays = {k: v.astype(np.float32) for k, v in arrays.items()}
    view = rng.uniform(-0.2, 1.2, (12, 16, 3)).astype(np.float32)
    loss = rng.uniform(size=7)
    np.savez(folder / "model.npz", ids=ids, view=view, loss=loss, split_seed=3, scene=str(scene_path),
             piece_bytes=PIECE_BYTES, **arrays)
    return folder, scene_path, ids, arrays, view, loss


@pytest.fixture(scope="module")
def oracle(model):
    """What the trainers wrote before streaming: the whole model sorted by id, through write_scene and
    write_ply, and the PNG made with PIL from the view beside the held-out truth."""
    folder, scene_path, ids, arrays, view, loss = model
    order = np.argsort(ids)
    sorted_ = {k: v[order] for k, v in arrays.items()}
    sh = np.concatenate([sorted_["sh0"], sorted_["shN"]], axis=1)
    scene = read_scene(scene_path)
    gaussians = {k: sorted_[k] for k in ("means", "scales", "quats", "opacities")}
    write_scene(folder / "oracle.h5", Scene(**gaussians, colors=sh0_to_rgb(sh[:, 0]).astype(np.float32), sh=sh,
                                            viewmats=scene.viewmats, Ks=scene.Ks, images=scene.images,
                                            width=scene.width, height=scene.height, heldout=heldout_mask(scene),
                                            ids=ids[order], metrics={"loss": loss},
                                            attrs={"steps": 7, "mode": "test"}))
    write_reference_ply(folder / "oracle.ply", gaussians, sh)
    truth = scene.images[np.flatnonzero(heldout_mask(scene))[0]] / 255.0
    both = np.concatenate([np.clip(view, 0, 1), truth], axis=1)
    return folder / "oracle.h5", folder / "oracle.ply", np.round(both * 255).astype(np.uint8)


def write_reference_ply(path, gaussians: dict, sh: np.ndarray) -> None:
    """The 3DGS reference layout written by plyfile (as the reference's ``save_ply`` does): x y z, normals
    nx ny nz (zeros), f_dc_0..2, f_rest_* channel-major, opacity, scale_0..2, rot_0..3, all float32."""
    from plyfile import PlyData, PlyElement

    g, rest = len(sh), sh[:, 1:].transpose(0, 2, 1).reshape(len(sh), -1)
    columns = [("x", gaussians["means"][:, 0]), ("y", gaussians["means"][:, 1]), ("z", gaussians["means"][:, 2]),
               *((n, np.zeros(g)) for n in ("nx", "ny", "nz")), *((f"f_dc_{i}", sh[:, 0, i]) for i in range(3)),
               *((f"f_rest_{i}", rest[:, i]) for i in range(rest.shape[1])), ("opacity", gaussians["opacities"]),
               *((f"scale_{i}", gaussians["scales"][:, i]) for i in range(3)),
               *((f"rot_{i}", gaussians["quats"][:, i]) for i in range(4))]
    vertices = np.empty(g, dtype=[(name, "<f4") for name, _ in columns])
    for name, values in columns:  # a loop over the 62 properties
        vertices[name] = values
    PlyData([PlyElement.describe(vertices, "vertex")]).write(str(path))


def h5_contents(path) -> dict:
    out = {}
    with h5py.File(path, "r") as f:
        f.visititems(lambda name, obj: out.__setitem__(name, obj[()]) if isinstance(obj, h5py.Dataset) else None)
        attrs = dict(f.attrs)
    return out, attrs


def assert_same_files(name: str, folder, oracle) -> None:
    oracle_h5, oracle_ply, oracle_png = oracle
    (got, got_attrs), (want, want_attrs) = h5_contents(folder / f"{name}.h5"), h5_contents(oracle_h5)
    assert sorted(got) == sorted(want)
    for key in want:
        assert got[key].dtype == want[key].dtype and np.array_equal(got[key], want[key]), key
    assert got_attrs == want_attrs
    got_ply, want_ply = PlyData.read(str(folder / f"{name}.ply")), PlyData.read(str(oracle_ply))
    assert np.array_equal(got_ply["vertex"].data, want_ply["vertex"].data)
    assert (folder / f"{name}.ply").read_bytes() == oracle_ply.read_bytes()
    assert np.array_equal(np.asarray(Image.open(folder / f"{name}.png")), oracle_png)


@pytest.mark.parametrize("rows", ["shuffled", "ascending"])
def test_one_process_writes_the_oracles_files(model, oracle, rows):
    """Rows in any order, or in ascending id as the trainers hold them (packed without a gather)."""
    folder, scene_path, ids, arrays, view, loss = model
    order = np.random.default_rng(1).permutation(G) if rows == "shuffled" else np.argsort(ids)
    name = f"ok_1_{rows}"
    paths = OutputPaths(str(folder / f"{name}.h5"), str(folder / f"{name}.ply"), str(folder / f"{name}.png"))
    write_trained(None, ids[order], {k: v[order] for k, v in arrays.items()}, scene_path, paths, view,
                  metrics={"loss": loss}, attrs={"steps": 7, "mode": "test"}, piece_bytes=PIECE_BYTES)
    assert_same_files(name, folder, oracle)


@pytest.mark.parametrize("case", ["ok", "runs"])
@pytest.mark.parametrize("size", [1, 2, 3])
def test_rows_split_over_ranks_give_the_oracles_files(model, oracle, size, case):
    """Rows split at random (ok), or in runs of consecutive ids per rank as a spatial split gives them and
    merged a row per block (runs: a rank's whole run is written before the next rank's blocks are needed)."""
    folder = model[0]
    env = dict(os.environ, OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1")
    subprocess.run([MPIEXEC, "-n", str(size), sys.executable, "-m", "mpi4py", SCRIPT, str(folder), case],
                   check=True, timeout=300, env=env)
    assert_same_files(f"{case}_{size}", folder, oracle)


@pytest.mark.parametrize("size", [1, 3])
def test_a_repeated_id_is_one_error_on_every_rank_and_no_file(model, size):
    folder = model[0]
    env = dict(os.environ, OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1")
    run = subprocess.run([MPIEXEC, "-n", str(size), sys.executable, "-m", "mpi4py", SCRIPT, str(folder), "duplicate"],
                         timeout=300, env=env, capture_output=True, text=True)
    assert run.returncode != 0
    assert "/gaussians/ids" in the_error_of_every_rank(run.stdout, size)
    assert not any(p.name.startswith(f"duplicate_{size}") for p in folder.iterdir())
