"""Gaussians in the 3DGS ``.ply`` layout, read and written with ``plyfile``.

One vertex element with float32 properties, written in this order::

    x y z  nx ny nz  f_dc_0 f_dc_1 f_dc_2  opacity  scale_0 scale_1 scale_2  rot_0 rot_1 rot_2 rot_3

as ``GaussianModel.save_ply`` of the reference 3DGS code writes with spherical-harmonics degree 0:
normals are zero, ``f_dc`` is the degree-0 SH coefficient of the colour, (rgb - 0.5) / C0 with
C0 = 0.28209479177387814, ``opacity`` is the logit, ``scale_*`` the log scales and ``rot_*`` the
(w, x, y, z) quaternion as stored. Reading accepts any property order and type, binary or ASCII;
higher-degree coefficients (``f_rest_*``) are ignored with a warning (colours use degree 0 only).
"""

import os

import numpy as np
from plyfile import PlyData, PlyElement, PlyHeaderParseError, PlyParseError

from pregel.atomic import atomic_output
from pregel.errors import InputError, warn

SH_C0 = 0.28209479177387814

PROPERTIES = ("x", "y", "z", "nx", "ny", "nz", "f_dc_0", "f_dc_1", "f_dc_2", "opacity",
              "scale_0", "scale_1", "scale_2", "rot_0", "rot_1", "rot_2", "rot_3")
# what read_gaussians_ply returns -> the PLY properties it is made of
FIELDS = {
    "means": ("x", "y", "z"),
    "scales": ("scale_0", "scale_1", "scale_2"),
    "quats": ("rot_0", "rot_1", "rot_2", "rot_3"),
    "opacities": ("opacity",),
    "colors": ("f_dc_0", "f_dc_1", "f_dc_2"),
}


def rgb_to_sh(rgb: np.ndarray) -> np.ndarray:
    """Degree-0 SH coefficient of an RGB colour (3DGS's ``RGB2SH``)."""
    return (rgb - 0.5) / SH_C0


def sh_to_rgb(sh: np.ndarray) -> np.ndarray:
    """RGB colour of a degree-0 SH coefficient (3DGS's ``SH2RGB``)."""
    return sh * SH_C0 + 0.5


def write_ply(path, means, scales, quats, opacities, colors) -> None:
    """Write Gaussians to ``path`` in the 3DGS PLY layout (binary, atomically).

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
    columns = np.concatenate([means, np.zeros((g, 3), np.float32), rgb_to_sh(colors),
                              opacities[:, None], scales, quats], axis=1)
    vertices = np.rec.fromarrays(list(columns.T), dtype=[(name, "<f4") for name in PROPERTIES])
    with atomic_output(path, ".ply") as temp:
        PlyData([PlyElement.describe(vertices, "vertex")]).write(temp)


def read_gaussians_ply(path) -> dict:
    """Read Gaussians from a 3DGS PLY (the reference code's, gsplat's, Grendel-GS's or ``write_ply``'s).

    Returns a dict of float32 arrays: means [G, 3], scales [G, 3] (log), quats [G, 4] (w, x, y, z),
    opacities [G] (logits), colors [G, 3] (RGB from the degree-0 SH coefficient, f_dc * C0 + 0.5).
    A missing file, a file plyfile cannot parse, no vertices, a missing property or a NaN/inf value raises
    ``InputError`` with one line; ``f_rest_*`` coefficients are ignored with a warning.
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise InputError.at(path, None, "no such file")
    try:
        ply = PlyData.read(path)
    except (PlyHeaderParseError, PlyParseError, ValueError, EOFError) as err:
        raise InputError.at(path, None, f"not a readable PLY file ({str(err).splitlines()[0]})") from None
    if "vertex" not in ply:
        raise InputError.at(path, None, "no 'vertex' element: not a 3DGS PLY")
    data = ply["vertex"].data
    if len(data) == 0:
        raise InputError.at(path, "vertex", "has no Gaussians (0 vertices)")
    names = set(data.dtype.names or ())
    missing = [name for name in PROPERTIES if name not in names and not name.startswith("n")]
    if missing:
        raise InputError.at(path, "vertex", f"missing properties {', '.join(missing)}: not a 3DGS PLY")
    rest = sorted(name for name in names if name.startswith("f_rest_"))
    if rest:
        warn(f"{path}: ignoring {len(rest)} higher-degree SH coefficients (f_rest_*); "
             "colours use degree 0 only")
    result = {}
    for key, props in FIELDS.items():
        arr = np.stack([np.asarray(data[p], dtype=np.float32) for p in props], axis=1)
        bad = ~np.isfinite(arr)
        if bad.any():
            row, col = np.argwhere(bad)[0]
            raise InputError.at(path, "vertex", f"property {props[col]} is NaN or infinite at vertex {row} "
                                f"({int(bad.any(axis=1).sum())} vertices affected)")
        result[key] = arr[:, 0].copy() if len(props) == 1 else arr
    result["colors"] = sh_to_rgb(result["colors"]).astype(np.float32)
    return result
