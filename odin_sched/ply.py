"""Export Gaussians to the standard 3DGS ``.ply`` layout, which common splat viewers open.

One binary little-endian vertex element with float32 properties, in this order::

    x y z  nx ny nz  f_dc_0 f_dc_1 f_dc_2  opacity  scale_0 scale_1 scale_2  rot_0 rot_1 rot_2 rot_3

as written by ``GaussianModel.save_ply`` of the reference 3DGS code with spherical-harmonics degree 0:
normals are zero, ``f_dc`` is the degree-0 SH coefficient of the colour, (rgb - 0.5) / C0 with
C0 = 0.28209479177387814, ``opacity`` is the logit, ``scale_*`` the log scales and ``rot_*`` the
(w, x, y, z) quaternion as stored.
"""

import numpy as np

from pregel.atomic import atomic_output

SH_C0 = 0.28209479177387814

PROPERTIES = ("x", "y", "z", "nx", "ny", "nz", "f_dc_0", "f_dc_1", "f_dc_2", "opacity",
              "scale_0", "scale_1", "scale_2", "rot_0", "rot_1", "rot_2", "rot_3")
VERTEX_DTYPE = np.dtype([(name, "<f4") for name in PROPERTIES])


def rgb_to_sh(rgb: np.ndarray) -> np.ndarray:
    """Degree-0 SH coefficient of an RGB colour (3DGS's ``RGB2SH``)."""
    return (rgb - 0.5) / SH_C0


def write_ply(path, means, scales, quats, opacities, colors) -> None:
    """Write Gaussians to ``path`` in the 3DGS PLY layout (atomically: temporary file, then rename).

    means: np.ndarray      # [G, 3] float
    scales: np.ndarray     # [G, 3] log scales
    quats: np.ndarray      # [G, 4] (w, x, y, z)
    opacities: np.ndarray  # [G] logits
    colors: np.ndarray     # [G, 3] RGB
    """
    arrays = [np.asarray(a, dtype=np.float32) for a in (means, scales, quats, opacities, colors)]
    means, scales, quats, opacities, colors = arrays
    g = means.shape[0]
    for name, arr, tail in (("means", means, (3,)), ("scales", scales, (3,)), ("quats", quats, (4,)),
                            ("opacities", opacities, ()), ("colors", colors, (3,))):
        if arr.shape != (g,) + tail:
            raise ValueError(f"{name}: expected shape {(g,) + tail}, got {arr.shape}")
    vertices = np.empty(g, dtype=VERTEX_DTYPE)
    columns = np.concatenate([means, np.zeros((g, 3), np.float32), rgb_to_sh(colors),
                              opacities[:, None], scales, quats], axis=1)
    for i, name in enumerate(PROPERTIES):
        vertices[name] = columns[:, i]
    header = "ply\nformat binary_little_endian 1.0\n" + f"element vertex {g}\n" \
        + "".join(f"property float {name}\n" for name in PROPERTIES) + "end_header\n"
    with atomic_output(path, ".ply") as temp, open(temp, "wb") as f:
        f.write(header.encode("ascii"))
        f.write(vertices.tobytes())


def read_ply(path) -> dict:
    """Read a 3DGS PLY written by ``write_ply`` (or 3DGS itself, DC colour only) back to arrays.

    Returns dict with means [G, 3], scales [G, 3], quats [G, 4], opacities [G], colors [G, 3]
    (colour recovered from f_dc as f_dc * C0 + 0.5). Raises ValueError for another layout.
    """
    with open(path, "rb") as f:
        if f.readline() != b"ply\n":
            raise ValueError(f"{path}: not a PLY file")
        count, names = None, []
        while True:
            line = f.readline()
            if not line:
                raise ValueError(f"{path}: header has no end_header")
            words = line.decode("ascii").split()
            if words == ["end_header"]:
                break
            if words[:1] == ["format"] and words[1] != "binary_little_endian":
                raise ValueError(f"{path}: format {words[1]} is not supported")
            if words[:2] == ["element", "vertex"]:
                count = int(words[2])
            elif words[:2] == ["property", "float"]:
                names.append(words[2])
        missing = [name for name in PROPERTIES if name not in names]
        if count is None or missing:
            raise ValueError(f"{path}: not a 3DGS PLY (missing {missing or 'element vertex'})")
        data = np.frombuffer(f.read(count * 4 * len(names)), dtype=np.dtype([(n, "<f4") for n in names]))

    def stack(*names):
        return np.stack([data[n] for n in names], axis=1)

    return {
        "means": stack("x", "y", "z"),
        "scales": stack("scale_0", "scale_1", "scale_2"),
        "quats": stack("rot_0", "rot_1", "rot_2", "rot_3"),
        "opacities": data["opacity"].copy(),
        "colors": stack("f_dc_0", "f_dc_1", "f_dc_2") * np.float32(SH_C0) + np.float32(0.5),
    }
