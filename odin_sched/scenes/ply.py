"""Gaussians in the 3DGS ``.ply`` layout, read with ``plyfile`` and written in its binary layout.

One vertex element with float32 properties, written in this order::

    x y z  nx ny nz  f_dc_0 f_dc_1 f_dc_2  f_rest_0 .. f_rest_{3(K-1)-1}  opacity
    scale_0 scale_1 scale_2  rot_0 rot_1 rot_2 rot_3

as ``GaussianModel.save_ply`` of the reference 3DGS code writes it: normals are zero, ``f_dc`` the DC
SH coefficient of each channel, ``f_rest`` the other K - 1 coefficients (K = (D + 1)^2 for SH degree
D: 45 properties at degree 3, none at degree 0) stored channel-major (all red coefficients, then
green, then blue: ``f_rest_{c (K - 1) + k - 1}`` is coefficient k of channel c), ``opacity`` the
logit, ``scale_*`` the log scales and ``rot_*`` the (w, x, y, z) quaternion as stored. Reading
accepts any property order and type, binary or ASCII (the reference code's, gsplat's, Grendel-GS's
files).
"""

import os

import numpy as np
from plyfile import PlyData, PlyHeaderParseError, PlyParseError

from odin_sched.scenes.sh import SH_COUNTS, degree_of, sh0_to_rgb, sh_from_rgb
from pregel.atomic import atomic_output
from pregel.errors import InputError

# what read_gaussians_ply returns -> the PLY properties it is made of (besides the SH coefficients)
FIELDS = {
    "means": ("x", "y", "z"),
    "scales": ("scale_0", "scale_1", "scale_2"),
    "quats": ("rot_0", "rot_1", "rot_2", "rot_3"),
    "opacities": ("opacity",),
}
DC = ("f_dc_0", "f_dc_1", "f_dc_2")
REQUIRED = (*FIELDS["means"], *DC, "opacity", *FIELDS["scales"], *FIELDS["quats"])


def rest_names(count: int) -> list:
    """The ``f_rest_*`` property names of ``count`` coefficients per channel (DC included)."""
    return [f"f_rest_{i}" for i in range(3 * (count - 1))]


def write_ply(path, means, scales, quats, opacities, colors=None, sh=None) -> None:
    """Write Gaussians to ``path`` in the 3DGS PLY layout (binary, atomically).

    means: np.ndarray      # [G, 3] float
    scales: np.ndarray     # [G, 3] log scales
    quats: np.ndarray      # [G, 4] (w, x, y, z)
    opacities: np.ndarray  # [G] logits
    colors: np.ndarray     # [G, 3] RGB (written as the DC coefficient, degree 0); or instead
    sh: np.ndarray         # [G, K, 3] SH coefficients, K = (D + 1)^2
    """
    if (sh is None) == (colors is None):
        raise ValueError("write_ply needs exactly one of sh [G, K, 3] and colors [G, 3]")
    means, scales, quats, opacities = (np.asarray(a, dtype=np.float32) for a in (means, scales, quats, opacities))
    g = means.shape[0]
    if colors is not None:
        colors = np.asarray(colors, dtype=np.float32)
        if colors.shape != (g, 3):
            raise ValueError(f"colors: expected shape {(g, 3)}, got {colors.shape}")
        sh = sh_from_rgb(colors, 0)
    sh = np.asarray(sh, dtype=np.float32)
    for name, arr, tail in (("means", means, (3,)), ("scales", scales, (3,)), ("quats", quats, (4,)),
                            ("opacities", opacities, ()), ("sh", sh, (sh.shape[1] if sh.ndim == 3 else -1, 3))):
        if arr.shape != (g,) + tail:
            raise ValueError(f"{name}: expected shape {(g,) + tail}, got {arr.shape}")
    degree_of(sh.shape[1])
    with atomic_output(path, ".ply") as temp:
        with open(temp, "wb") as f:
            f.write(ply_header(g, sh.shape[1]))
            f.write(ply_rows(means, scales, quats, opacities, sh).tobytes())


def property_names(count: int) -> list:
    """The vertex properties, in file order, of Gaussians with ``count`` SH coefficients per channel."""
    return ["x", "y", "z", "nx", "ny", "nz", *DC, *rest_names(count), "opacity", *FIELDS["scales"],
            *FIELDS["quats"]]


def ply_header(vertices: int, count: int) -> bytes:
    """The header of a binary PLY of ``vertices`` Gaussians with ``count`` SH coefficients per channel
    (all properties float32, little endian; as ``plyfile`` writes it)."""
    lines = ["ply", "format binary_little_endian 1.0", f"element vertex {vertices}",
             *(f"property float {name}" for name in property_names(count)), "end_header", ""]
    return "\n".join(lines).encode("ascii")


def ply_rows(means, scales, quats, opacities, sh) -> np.ndarray:
    """float32 [g, properties] little endian: the vertex rows of Gaussians (float32 arrays as
    ``write_ply`` takes them, sh [g, K, 3]) in ``property_names`` order; a run of them, written after
    ``ply_header``, is the file's body."""
    g = means.shape[0]
    rest = sh[:, 1:].transpose(0, 2, 1).reshape(g, 3 * (sh.shape[1] - 1))  # channel-major, as the reference's save_ply
    return np.concatenate([means, np.zeros((g, 3), np.float32), sh[:, 0], rest, opacities[:, None], scales, quats],
                          axis=1).astype("<f4", copy=False)


#: vertex records read at a time from a binary PLY (about 16 MB at SH degree 3)
CHUNK_ROWS = 1 << 16
# the arrays of a row read (means, scales, quats, opacities, the DC and f_rest_* coefficients) -> properties
GROUPS = (*FIELDS, "dc", "rest")


class GaussianPly:
    """A 3DGS PLY (the reference code's, gsplat's, Grendel-GS's or ``write_ply``'s), checked whole on
    opening, whose rows are read on demand: a binary file in runs of ``CHUNK_ROWS`` vertex records
    (fixed width, so nothing else is parsed or held), an ASCII one from plyfile's parse.

    On opening every row is read once to refuse NaN/inf values and keep ``means`` and ``scales``
    (float32 [G, 3], log scales) of all Gaussians; with ``keep_rows`` that pass keeps every row, so that
    ``rows()`` of all of them reads the file no second time. A missing file, a file plyfile cannot parse, no
    vertices, a missing property, an ``f_rest_*`` count of no SH degree 0..3 or a NaN/inf value raises
    ``InputError`` with one line.
    """

    def __init__(self, path, keep_rows: bool = False):
        path = self.path = os.fspath(path)
        if not os.path.isfile(path):
            raise InputError.at(path, None, "no such file")
        try:
            ply = PlyData.read(path)  # a binary file is memory-mapped: nothing is read yet
        except (PlyHeaderParseError, PlyParseError, ValueError, EOFError) as err:
            raise InputError.at(path, None, f"not a readable PLY file ({str(err).splitlines()[0]})") from None
        if "vertex" not in ply:
            raise InputError.at(path, None, "no 'vertex' element: not a 3DGS PLY")
        data = ply["vertex"].data
        self.count = len(data)
        if self.count == 0:
            raise InputError.at(path, "vertex", "has no Gaussians (0 vertices)")
        names = set(data.dtype.names or ())
        missing = [name for name in REQUIRED if name not in names]
        if missing:
            raise InputError.at(path, "vertex", f"missing properties {', '.join(missing)}: not a 3DGS PLY")
        rest = {name for name in names if name.startswith("f_rest_")}
        self.sh_count = len(rest) // 3 + 1
        if len(rest) % 3 or self.sh_count not in SH_COUNTS or rest != set(rest_names(self.sh_count)):
            raise InputError.at(path, "vertex", f"{len(rest)} f_rest_* properties: not f_rest_0 .. "
                                "f_rest_{3 (K - 1) - 1} for K = 1, 4, 9 or 16 SH coefficients (degree 0 to 3)")
        self.props = {**FIELDS, "dc": DC, "rest": tuple(rest_names(self.sh_count))}
        # a memory map is read in chunks by offset (and dropped); plyfile's in-memory table is kept
        self._mapped = (data.dtype, data.offset) if isinstance(data, np.memmap) else None
        self._table = None if self._mapped else data
        del data, ply
        self._all = self._empty_rows(self.count) if keep_rows else None
        self.means, self.scales = ((self._all["means"], self._all["scales"]) if keep_rows else
                                   (np.empty((self.count, 3), np.float32), np.empty((self.count, 3), np.float32)))
        self._check_and_keep()

    def _chunks(self, index=None):
        """(start, records [n] structured) of every run of ``CHUNK_ROWS`` rows in file order (only the
        runs holding a row of ascending ``index``, when given)."""
        if self._mapped is None:
            for start in range(0, self.count, CHUNK_ROWS):
                yield start, self._table[start:start + CHUNK_ROWS]
            return
        dtype, offset = self._mapped
        with open(self.path, "rb") as f:
            for start in range(0, self.count, CHUNK_ROWS):
                n = min(CHUNK_ROWS, self.count - start)
                if index is not None and np.searchsorted(index, start) == np.searchsorted(index, start + n):
                    continue
                f.seek(offset + start * dtype.itemsize)
                yield start, np.fromfile(f, dtype, n)

    def _arrays(self, records) -> dict:
        """group -> float32 [n, properties] of the records (as ``GROUPS``)."""
        return {key: np.stack([np.asarray(records[p], dtype=np.float32) for p in props], axis=1) if props
                else np.zeros((len(records), 0), np.float32) for key, props in self.props.items()}

    def _check_and_keep(self) -> None:
        """Refuse a NaN/inf value (the first group in ``GROUPS`` order that has one, at its first row) and
        keep every row's means and scales."""
        first, affected = {}, dict.fromkeys(GROUPS, 0)
        for start, records in self._chunks():
            arrays = self._arrays(records)
            if self._all is not None:
                self._fill(self._all, start, start + len(records), arrays)
            else:
                self.means[start:start + len(records)] = arrays["means"]
                self.scales[start:start + len(records)] = arrays["scales"]
            for key, arr in arrays.items():
                bad = ~np.isfinite(arr)
                if bad.any():
                    row, col = np.argwhere(bad)[0]
                    first.setdefault(key, (start + row, self.props[key][col]))
                    affected[key] += int(bad.any(axis=1).sum())
        for key in GROUPS:
            if key in first:
                row, prop = first[key]
                raise InputError.at(self.path, "vertex", f"property {prop} is NaN or infinite at vertex {row} "
                                    f"({affected[key]} vertices affected)")

    def rows(self, index: np.ndarray | None = None) -> dict:
        """The Gaussians of rows ``index`` ([g] int64, ascending; None: all) as float32 arrays: means
        [g, 3], scales [g, 3] (log), quats [g, 4] (w, x, y, z), opacities [g] (logits) and sh [g, K, 3]
        (the DC and ``f_rest_*`` coefficients, K = (D + 1)^2)."""
        if index is None and self._all is not None:
            return dict(self._all)  # a new dict: callers may pop or add arrays
        index = np.arange(self.count) if index is None else np.asarray(index, np.int64)
        out = self._empty_rows(len(index))
        for start, records in self._chunks(index):
            lo, hi = np.searchsorted(index, [start, start + len(records)])
            self._fill(out, lo, hi, self._arrays(records[index[lo:hi] - start]))
        return out

    def _empty_rows(self, g: int) -> dict:
        """``rows``' arrays for g Gaussians, not filled."""
        return {"means": np.empty((g, 3), np.float32), "scales": np.empty((g, 3), np.float32),
                "quats": np.empty((g, 4), np.float32), "opacities": np.empty(g, np.float32),
                "sh": np.empty((g, self.sh_count, 3), np.float32)}

    def _fill(self, out: dict, lo: int, hi: int, arrays: dict) -> None:
        """Rows lo:hi of ``rows``' arrays ``out`` from the ``_arrays`` of the records read for them."""
        for key in FIELDS:
            out[key][lo:hi] = arrays[key][:, 0] if key == "opacities" else arrays[key]
        out["sh"][lo:hi, 0] = arrays["dc"]
        out["sh"][lo:hi, 1:] = arrays["rest"].reshape(hi - lo, 3, self.sh_count - 1).transpose(0, 2, 1)


def read_gaussians_ply(path) -> dict:
    """Read every Gaussian of a 3DGS PLY (``GaussianPly``; its checks and errors).

    Returns a dict of float32 arrays: means [G, 3], scales [G, 3] (log), quats [G, 4] (w, x, y, z),
    opacities [G] (logits), sh [G, K, 3] (the SH coefficients, DC and ``f_rest_*``, K = (D + 1)^2)
    and colors [G, 3] (the DC colour, f_dc * C0 + 0.5).
    """
    result = GaussianPly(path, keep_rows=True).rows()
    result["colors"] = sh0_to_rgb(result["sh"][:, 0]).astype(np.float32)
    return result
