"""3DGS PLY through plyfile: the bytes written are checked by an independent parse, reading is checked
on files laid out by hand as the reference 3DGS code writes them (with f_rest_*), a reference-layout
PLY written by plyfile renders as its Gaussians given directly, and bad files."""
import numpy as np
import pytest

from odin_sched.scenes.ply import read_gaussians_ply, write_ply
from pregel.errors import InputError

C0 = 0.28209479177387814
NAMES = ["x", "y", "z", "nx", "ny", "nz", "f_dc_0", "f_dc_1", "f_dc_2", "opacity",
         "scale_0", "scale_1", "scale_2", "rot_0", "rot_1", "rot_2", "rot_3"]
# GaussianModel.construct_list_of_attributes of the reference code at SH degree 3
REFERENCE_NAMES = (["x", "y", "z", "nx", "ny", "nz", "f_dc_0", "f_dc_1", "f_dc_2"]
                   + [f"f_rest_{i}" for i in range(45)]
                   + ["opacity", "scale_0", "scale_1", "scale_2", "rot_0", "rot_1", "rot_2", "rot_3"])


def _gaussians(g, seed=0):
    rng = np.random.default_rng(seed)
    return dict(means=rng.standard_normal((g, 3)).astype(np.float32),
                scales=rng.standard_normal((g, 3)).astype(np.float32),
                quats=rng.standard_normal((g, 4)).astype(np.float32),
                opacities=rng.standard_normal(g).astype(np.float32),
                colors=rng.random((g, 3)).astype(np.float32))


def _write_by_hand(path, names, table, fmt="binary_little_endian"):
    """A PLY written without plyfile: header lines, then float32 rows (binary) or text rows (ascii)."""
    header = (f"ply\nformat {fmt} 1.0\nelement vertex {len(table)}\n"
              + "".join(f"property float {n}\n" for n in names) + "end_header\n")
    if fmt == "ascii":
        body = "".join(" ".join(repr(float(v)) for v in row) + "\n" for row in table).encode()
    else:
        body = np.ascontiguousarray(table, dtype="<f4").tobytes()
    path.write_bytes(header.encode("ascii") + body)


def test_written_layout_matches_reference_and_round_trips(tmp_path):
    g = 9
    p = _gaussians(g)
    path = tmp_path / "out.ply"
    write_ply(path, **p)

    raw = path.read_bytes()
    end = raw.index(b"end_header\n") + len(b"end_header\n")
    header = [line for line in raw[:end].decode("ascii").splitlines() if not line.startswith("comment")]
    assert header == (["ply", "format binary_little_endian 1.0", f"element vertex {g}"]
                      + [f"property float {n}" for n in NAMES] + ["end_header"])
    body = np.frombuffer(raw[end:], dtype=np.dtype([(n, "<f4") for n in NAMES]))
    assert body.shape == (g,)
    np.testing.assert_array_equal(np.stack([body["x"], body["y"], body["z"]], 1), p["means"])
    np.testing.assert_array_equal(np.stack([body["nx"], body["ny"], body["nz"]], 1), 0)
    np.testing.assert_allclose(np.stack([body[f"f_dc_{i}"] for i in range(3)], 1),
                               (p["colors"].astype(np.float64) - 0.5) / C0, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(body["opacity"], p["opacities"])
    np.testing.assert_array_equal(np.stack([body[f"scale_{i}"] for i in range(3)], 1), p["scales"])
    np.testing.assert_array_equal(np.stack([body[f"rot_{i}"] for i in range(4)], 1), p["quats"])

    back = read_gaussians_ply(path)
    for key in ("means", "scales", "quats", "opacities"):
        assert back[key].dtype == np.float32
        np.testing.assert_array_equal(back[key], p[key])
    np.testing.assert_allclose(back["colors"], p["colors"], atol=1e-6)
    assert [q.name for q in tmp_path.iterdir()] == ["out.ply"]


def _rest_column(count, channel, k):
    """The reference layout's f_rest name of coefficient k (1..count-1) of channel c: channel-major, as
    GaussianModel.save_ply flattens features_rest.transpose(1, 2) [G, 3, count - 1]."""
    return f"f_rest_{channel * (count - 1) + k - 1}"


def test_sh_written_in_the_reference_layout(tmp_path):
    g, count = 6, 16
    p = _gaussians(g)
    sh = np.random.default_rng(3).standard_normal((g, count, 3)).astype(np.float32)
    del p["colors"]
    path = tmp_path / "sh.ply"
    write_ply(path, **p, sh=sh)
    raw = path.read_bytes()
    end = raw.index(b"end_header\n") + len(b"end_header\n")
    header = [line for line in raw[:end].decode("ascii").splitlines() if not line.startswith("comment")]
    assert header[3:-1] == [f"property float {n}" for n in REFERENCE_NAMES]
    body = np.frombuffer(raw[end:], dtype=np.dtype([(n, "<f4") for n in REFERENCE_NAMES]))
    np.testing.assert_array_equal(np.stack([body[f"f_dc_{c}"] for c in range(3)], 1), sh[:, 0])
    for c in range(3):
        for k in range(1, count):
            np.testing.assert_array_equal(body[_rest_column(count, c, k)], sh[:, k, c])
    back = read_gaussians_ply(path)
    np.testing.assert_array_equal(back["sh"], sh)
    np.testing.assert_allclose(back["colors"], sh[:, 0] * C0 + 0.5, rtol=1e-6)


@pytest.mark.parametrize("fmt", ["binary_little_endian", "ascii"])
def test_reference_layout_with_higher_sh_is_read_with_its_coefficients(tmp_path, capsys, fmt):
    g = 7
    rng = np.random.default_rng(1)
    table = rng.standard_normal((g, len(REFERENCE_NAMES))).astype(np.float32)
    path = tmp_path / "point_cloud.ply"
    _write_by_hand(path, REFERENCE_NAMES, table, fmt)
    col = {n: table[:, i] for i, n in enumerate(REFERENCE_NAMES)}

    back = read_gaussians_ply(path)
    np.testing.assert_array_equal(back["means"], np.stack([col["x"], col["y"], col["z"]], 1))
    np.testing.assert_array_equal(back["opacities"], col["opacity"])
    np.testing.assert_array_equal(back["scales"], np.stack([col[f"scale_{i}"] for i in range(3)], 1))
    np.testing.assert_array_equal(back["quats"], np.stack([col[f"rot_{i}"] for i in range(4)], 1))
    dc = np.stack([col[f"f_dc_{i}"] for i in range(3)], 1).astype(np.float64)
    np.testing.assert_allclose(back["colors"], dc * C0 + 0.5, rtol=1e-6, atol=1e-6)
    assert back["sh"].shape == (g, 16, 3) and back["sh"].dtype == np.float32
    np.testing.assert_array_equal(back["sh"][:, 0], dc.astype(np.float32))
    for c in range(3):
        for k in range(1, 16):
            np.testing.assert_array_equal(back["sh"][:, k, c], col[_rest_column(16, c, k)])
    assert capsys.readouterr().err == ""


def test_reference_ply_renders_as_the_same_gaussians_given_directly(tmp_path):
    """A degree-3 PLY written by plyfile in the reference layout (an independent writer) renders, through
    read_gaussians_ply, exactly as its Gaussians passed to the renderer directly."""
    import torch
    from plyfile import PlyData, PlyElement

    from kernels.splat import render
    from odin_sched.scenes.sh import gaussian_render_args

    g, count = 40, 16
    gen = torch.Generator().manual_seed(11)
    means = torch.randn(g, 3, generator=gen) * 0.6
    scales = torch.randn(g, 3, generator=gen) * 0.3 - 2.0
    quats = torch.randn(g, 4, generator=gen)
    opacities = torch.randn(g, generator=gen) + 1.0
    sh = torch.randn(g, count, 3, generator=gen) * 0.5
    columns = {"x": means[:, 0], "y": means[:, 1], "z": means[:, 2]}
    columns.update({n: torch.zeros(g) for n in ("nx", "ny", "nz")})
    columns.update({f"f_dc_{c}": sh[:, 0, c] for c in range(3)})
    columns.update({_rest_column(count, c, k): sh[:, k, c] for c in range(3) for k in range(1, count)})
    columns["opacity"] = opacities
    columns.update({f"scale_{i}": scales[:, i] for i in range(3)})
    columns.update({f"rot_{i}": quats[:, i] for i in range(4)})
    vertices = np.empty(g, dtype=[(n, "f4") for n in REFERENCE_NAMES])
    for name in REFERENCE_NAMES:
        vertices[name] = columns[name].numpy()
    path = tmp_path / "point_cloud.ply"
    PlyData([PlyElement.describe(vertices, "vertex")]).write(str(path))

    viewmat = torch.eye(4)
    viewmat[:3, 3] = torch.tensor([0.1, -0.05, 3.0])
    K = torch.tensor([[40.0, 0.0, 24.0], [0.0, 40.0, 16.0], [0.0, 0.0, 1.0]])
    direct, visible = render(means, scales, quats, opacities, sh, viewmat, K, 48, 32, sh_degree=3)
    read = {k: torch.from_numpy(v) for k, v in read_gaussians_ply(path).items()}
    via_ply, _ = render(**gaussian_render_args(read), viewmat=viewmat, K=K, width=48, height=32)
    assert visible.sum() >= 20 and direct.std() > 0.05
    assert torch.equal(via_ply, direct)
    flat, _ = render(means, scales, quats, opacities, sh, viewmat, K, 48, 32, sh_degree=0)
    assert (flat - direct).abs().max() > 0.05  # the higher bands matter in this view


def test_f_rest_of_no_degree_is_refused(tmp_path):
    names = NAMES[:9] + [f"f_rest_{i}" for i in range(6)] + NAMES[9:]
    _write_by_hand(tmp_path / "odd.ply", names, np.zeros((2, len(names)), np.float32))
    with pytest.raises(InputError, match=r"odd\.ply: vertex: 6 f_rest_\* properties"):
        read_gaussians_ply(tmp_path / "odd.ply")


def test_missing_property_nan_and_garbage_are_one_line(tmp_path):
    names = [n for n in NAMES if n != "rot_2"]
    _write_by_hand(tmp_path / "missing.ply", names, np.zeros((3, len(names)), np.float32))
    with pytest.raises(InputError, match=r"missing\.ply: vertex: missing properties rot_2"):
        read_gaussians_ply(tmp_path / "missing.ply")

    table = np.zeros((4, len(NAMES)), np.float32)
    table[2, NAMES.index("scale_1")] = np.inf
    _write_by_hand(tmp_path / "inf.ply", NAMES, table)
    with pytest.raises(InputError, match=r"property scale_1 is NaN or infinite at vertex 2") as info:
        read_gaussians_ply(tmp_path / "inf.ply")
    assert "\n" not in str(info.value)

    (tmp_path / "junk.ply").write_bytes(b"not a ply at all\n")
    with pytest.raises(InputError, match="not a readable PLY"):
        read_gaussians_ply(tmp_path / "junk.ply")
    with pytest.raises(InputError, match="no such file"):
        read_gaussians_ply(tmp_path / "absent.ply")


@pytest.mark.parametrize("keep_rows", [False, True])
@pytest.mark.parametrize("fmt", ["binary_little_endian", "binary_big_endian", "ascii"])
def test_rows_read_in_chunks_equal_plyfile_reading_the_whole_file(tmp_path, monkeypatch, fmt, keep_rows):
    """GaussianPly reads runs of vertex records (here 7 at a time, so rows fall in several runs and some
    runs hold none of the rows asked for), or keeps every row from its checking pass (``keep_rows``); every
    row asked for equals plyfile's parse of the whole file."""
    from plyfile import PlyData

    from odin_sched.scenes import ply as ply_module

    monkeypatch.setattr(ply_module, "CHUNK_ROWS", 7)
    g, rng = 40, np.random.default_rng(3)
    table = rng.standard_normal((g, len(REFERENCE_NAMES))).astype(np.float32)
    path = tmp_path / "model.ply"
    if fmt == "binary_big_endian":  # written by hand: big-endian float32 rows
        header = (f"ply\nformat {fmt} 1.0\nelement vertex {g}\n"
                  + "".join(f"property float {n}\n" for n in REFERENCE_NAMES) + "end_header\n")
        path.write_bytes(header.encode("ascii") + table.astype(">f4").tobytes())
    else:
        _write_by_hand(path, REFERENCE_NAMES, table, fmt)
    whole = PlyData.read(str(path))["vertex"].data
    col = {n: np.asarray(whole[n], np.float32) for n in REFERENCE_NAMES}
    model = ply_module.GaussianPly(path, keep_rows=keep_rows)
    np.testing.assert_array_equal(model.means, np.stack([col["x"], col["y"], col["z"]], 1))
    np.testing.assert_array_equal(model.scales, np.stack([col[f"scale_{i}"] for i in range(3)], 1))
    for index in (None, np.array([0, 3, 6, 7, 20, 39]), np.array([15]), np.array([], np.int64)):
        rows = np.arange(g) if index is None else index
        got = model.rows(index)
        assert set(got) == {"means", "scales", "quats", "opacities", "sh"}
        assert all(v.dtype == np.float32 and len(v) == len(rows) for v in got.values())
        np.testing.assert_array_equal(got["means"], np.stack([col[n] for n in ("x", "y", "z")], 1)[rows])
        np.testing.assert_array_equal(got["scales"], np.stack([col[f"scale_{i}"] for i in range(3)], 1)[rows])
        np.testing.assert_array_equal(got["quats"], np.stack([col[f"rot_{i}"] for i in range(4)], 1)[rows])
        np.testing.assert_array_equal(got["opacities"], col["opacity"][rows])
        for c in range(3):  # coefficient k > 0 of channel c is f_rest_{15 c + k - 1} (channel-major)
            np.testing.assert_array_equal(got["sh"][:, 0, c], col[f"f_dc_{c}"][rows])
            for k in range(1, 16):
                np.testing.assert_array_equal(got["sh"][:, k, c], col[f"f_rest_{15 * c + k - 1}"][rows])


def test_truncated_ply_and_nan_in_a_later_run_are_one_line(tmp_path, monkeypatch):
    from odin_sched.scenes import ply as ply_module

    monkeypatch.setattr(ply_module, "CHUNK_ROWS", 4)
    table = np.zeros((10, len(NAMES)), np.float32)
    table[6, NAMES.index("rot_1")] = np.nan
    table[9, NAMES.index("rot_3")] = np.inf
    table[8, NAMES.index("opacity")] = np.nan  # a later group: the quats are reported first, as one read does
    _write_by_hand(tmp_path / "nan.ply", NAMES, table)
    with pytest.raises(InputError, match=r"nan\.ply: vertex: property rot_1 is NaN or infinite at vertex 6 "
                                         r"\(2 vertices affected\)"):
        ply_module.GaussianPly(tmp_path / "nan.ply")

    _write_by_hand(tmp_path / "whole.ply", NAMES, np.zeros((10, len(NAMES)), np.float32))
    raw = (tmp_path / "whole.ply").read_bytes()
    (tmp_path / "cut.ply").write_bytes(raw[:-5])  # the last vertex record cut short
    with pytest.raises(InputError, match=r"cut\.ply: not a readable PLY file \(.*end-of-file") as info:
        read_gaussians_ply(tmp_path / "cut.ply")
    assert "\n" not in str(info.value)
