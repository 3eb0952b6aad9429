"""The torch-free reader of ``torch.save`` files (``vertex_programs.gnn.torch_file``) against
``torch.load(weights_only=True)`` on files that torch itself wrote, and its refusals: a pickle that
names any other global (``os.system``) is refused without running it, and broken archives are errors."""
import collections
import os
import pickle
import zipfile

import numpy as np
import pytest
import torch

from pregel.errors import InputError
from vertex_programs.gnn import load_model
from vertex_programs.gnn.torch_file import NotPlainData, read_torch_file


def _same(ours, theirs, where="data"):
    """``ours`` (read_torch_file) holds what ``theirs`` (torch.load) does, tensors as NumPy arrays."""
    if isinstance(theirs, torch.Tensor):
        expected = theirs.numpy()
        assert isinstance(ours, np.ndarray) and ours.dtype == expected.dtype, where
        assert ours.shape == expected.shape and np.array_equal(ours, expected), where
        assert ours.flags.c_contiguous and ours.dtype.isnative, where
    elif isinstance(theirs, dict):
        assert type(ours) is type(theirs) and list(ours) == list(theirs), where
        for key in theirs:
            _same(ours[key], theirs[key], f"{where}[{key!r}]")
    elif isinstance(theirs, (list, tuple)):
        assert type(ours) is type(theirs) and len(ours) == len(theirs), where
        for i, (a, b) in enumerate(zip(ours, theirs)):
            _same(a, b, f"{where}[{i}]")
    else:
        assert type(ours) is type(theirs) and ours == theirs, where


def _data():
    base = torch.arange(60, dtype=torch.float64).reshape(6, 10) / 7
    ints = torch.arange(-20, 20, dtype=torch.int64).reshape(5, 8)
    return {
        "float32": torch.randn(4, 3, generator=torch.Generator().manual_seed(0)),
        "float64": base,
        "int64": ints,
        "transposed": base.T,                     # strides (1, 10)
        "stepped": base[1:, ::3],                 # an offset and a step into the same storage
        "offset row": ints[3],                    # offset 24, 1-D
        "scalar": torch.tensor(2.5),              # 0-D
        "empty": torch.zeros(0, 5),
        "empty view": base[:, 4:4],
        "narrow": {"half": torch.arange(5, dtype=torch.float16), "int32": torch.arange(3, dtype=torch.int32),
                   "int8": torch.tensor([-3, 4], dtype=torch.int8), "uint8": torch.tensor([0, 255], dtype=torch.uint8),
                   "int16": torch.tensor([-300], dtype=torch.int16), "bool": torch.tensor([True, False])},
        "nested": {"list": [1, 2.5, "three", None, True, (4, "five")],
                   "ordered": collections.OrderedDict([("b", torch.ones(2)), ("a", 1)]),
                   "deeper": [{"w": torch.eye(3)[:, 1]}]},
    }


def test_reads_what_torch_load_reads(tmp_path):
    path = tmp_path / "data.pt"
    torch.save(_data(), path)
    _same(read_torch_file(path), torch.load(path, weights_only=True))


def test_views_of_one_storage_stay_separate_arrays(tmp_path):
    path = tmp_path / "shared.pt"
    base = torch.arange(12, dtype=torch.float32)
    torch.save([base, base[2:5], base.reshape(3, 4).T], path)
    whole, part, transposed = read_torch_file(path)
    whole[3] = -1  # copies: writing one does not change another
    np.testing.assert_array_equal(part, [2, 3, 4])
    np.testing.assert_array_equal(transposed, np.arange(12, dtype=np.float32).reshape(3, 4).T)


def _rewritten(source, target, change):
    """A copy of the zip ``source`` at ``target`` where ``change(name, bytes)`` gives each record."""
    with zipfile.ZipFile(source) as src, zipfile.ZipFile(target, "w") as dst:
        for name in src.namelist():
            data = change(name, src.read(name))
            if data is not None:
                dst.writestr(name, data)
    return target


def test_big_endian_records(tmp_path):
    """A file whose byteorder record says big, with every storage's bytes swapped, reads the same."""
    data = {"f4": torch.randn(3, 2), "f8": torch.arange(5, dtype=torch.float64)[1::2], "i8": torch.tensor([1, -2])}
    little = tmp_path / "little.pt"
    torch.save(data, little)
    dtypes = {}
    with zipfile.ZipFile(little) as archive:  # which record holds which element size: from the pickle
        text = archive.read(next(n for n in archive.namelist() if n.endswith("data.pkl")))
    for key, (name, size) in enumerate([("FloatStorage", 4), ("DoubleStorage", 8), ("LongStorage", 8)]):
        assert f"torch\n{name}".encode() in text
        dtypes[str(key)] = size

    def swap(name, raw):
        if name.endswith("/byteorder"):
            return b"big"
        folder, _, key = name.rpartition("/")
        if folder.endswith("/data"):
            return np.frombuffer(raw, f"<u{dtypes[key]}").byteswap().tobytes()
        return raw

    big = _rewritten(little, tmp_path / "big.pt", swap)
    _same(read_torch_file(big), torch.load(little, weights_only=True))


def test_a_forbidden_global_is_refused_without_running_it(tmp_path):
    marker = tmp_path / "ran"

    class Payload:
        def __reduce__(self):
            return os.system, (f"touch {marker}",)

    good = tmp_path / "good.pt"
    torch.save({"w": torch.ones(2)}, good)
    payload = pickle.dumps({"w": Payload()}, protocol=2)
    evil = _rewritten(good, tmp_path / "evil.pt", lambda name, raw: payload if name.endswith("data.pkl") else raw)
    with pytest.raises(NotPlainData, match="system"):
        read_torch_file(evil)
    with pytest.raises(InputError, match="evil.pt: not a readable model file \\(it holds pickled objects.*system"):
        load_model(evil)
    assert not marker.exists()


def test_broken_archives_are_errors(tmp_path):
    good = tmp_path / "good.pt"
    torch.save({"w": torch.ones(4)}, good)
    short = _rewritten(good, tmp_path / "short.pt", lambda name, raw: raw[:8] if "/data/" in name else raw)
    with pytest.raises(ValueError, match="holds 8 bytes, not 4 elements of 4 bytes"):
        read_torch_file(short)
    missing = _rewritten(good, tmp_path / "missing.pt", lambda name, raw: None if "/data/" in name else raw)
    with pytest.raises(ValueError, match="storage record .*data/0 is missing"):
        read_torch_file(missing)
    order = _rewritten(good, tmp_path / "order.pt", lambda name, raw: b"middle" if name.endswith("byteorder") else raw)
    with pytest.raises(ValueError, match="unknown byte order 'middle'"):
        read_torch_file(order)
    cut = _rewritten(good, tmp_path / "cut.pt",
                     lambda name, raw: raw[:len(raw) // 2] if name.endswith("data.pkl") else raw)
    with pytest.raises(ValueError, match="malformed pickle"):
        read_torch_file(cut)
    (tmp_path / "text.pt").write_text("hello")
    with pytest.raises(zipfile.BadZipFile):
        read_torch_file(tmp_path / "text.pt")
