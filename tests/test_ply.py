"""PLY export: header text and binary values checked by an independent parse."""
import numpy as np

from odin_sched.ply import read_ply, write_ply

C0 = 0.28209479177387814
NAMES = ["x", "y", "z", "nx", "ny", "nz", "f_dc_0", "f_dc_1", "f_dc_2", "opacity",
         "scale_0", "scale_1", "scale_2", "rot_0", "rot_1", "rot_2", "rot_3"]


def test_ply_layout_and_values(tmp_path):
    rng = np.random.default_rng(0)
    g = 9
    means = rng.standard_normal((g, 3)).astype(np.float32)
    scales = rng.standard_normal((g, 3)).astype(np.float32)
    quats = rng.standard_normal((g, 4)).astype(np.float32)
    opac = rng.standard_normal(g).astype(np.float32)
    colors = rng.random((g, 3)).astype(np.float32)
    path = tmp_path / "out.ply"
    write_ply(path, means, scales, quats, opac, colors)

    raw = path.read_bytes()
    end = raw.index(b"end_header\n") + len(b"end_header\n")
    header = raw[:end].decode("ascii").splitlines()
    assert header == (["ply", "format binary_little_endian 1.0", f"element vertex {g}"]
                      + [f"property float {n}" for n in NAMES] + ["end_header"])
    body = np.frombuffer(raw[end:], dtype=np.dtype([(n, "<f4") for n in NAMES]))
    assert body.shape == (g,)
    np.testing.assert_array_equal(np.stack([body["x"], body["y"], body["z"]], 1), means)
    np.testing.assert_array_equal(np.stack([body["nx"], body["ny"], body["nz"]], 1), 0)
    np.testing.assert_allclose(np.stack([body[f"f_dc_{i}"] for i in range(3)], 1),
                               (colors.astype(np.float64) - 0.5) / C0, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(body["opacity"], opac)
    np.testing.assert_array_equal(np.stack([body[f"scale_{i}"] for i in range(3)], 1), scales)
    np.testing.assert_array_equal(np.stack([body[f"rot_{i}"] for i in range(4)], 1), quats)

    back = read_ply(path)
    np.testing.assert_array_equal(back["means"], means)
    np.testing.assert_array_equal(back["quats"], quats)
    np.testing.assert_allclose(back["colors"], colors, atol=1e-6)
    assert [p.name for p in tmp_path.iterdir()] == ["out.ply"]
