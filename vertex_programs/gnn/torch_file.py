"""A reader of ``torch.save``'s zip format for plain data, without torch: dicts, lists, tuples,
numbers, strings and dense CPU tensors (returned as NumPy arrays).

The file is a zip archive: ``<name>/data.pkl`` (a pickle), ``<name>/data/<key>`` (each storage's
raw bytes) and ``<name>/byteorder`` (``little`` or ``big``; little when absent). The pickle is read
by an unpickler that resolves only the globals ``torch.save`` writes for such data: the rebuild
function of a strided tensor, the typed storage classes and ``collections.OrderedDict``; storages
come from the archive's records through ``persistent_load``. Any other global (a class, a function
such as ``os.system``) is refused before anything is called: ``NotPlainData`` naming it.
Every other problem (not a zip, a missing record, a view outside its storage) is a ``ValueError``.
"""

import collections
import io
import pickle
import zipfile

import numpy as np

#: torch's typed storage classes -> NumPy dtype of their elements
STORAGE_DTYPES = {"DoubleStorage": "f8", "FloatStorage": "f4", "HalfStorage": "f2", "LongStorage": "i8",
                  "IntStorage": "i4", "ShortStorage": "i2", "CharStorage": "i1", "ByteStorage": "u1",
                  "BoolStorage": "?"}


class NotPlainData(pickle.UnpicklingError):
    """The pickle names a global that is not one of ``ALLOWED``."""


class _StorageType:
    """What the pickle's ``torch.<X>Storage`` global resolves to: the element dtype."""

    def __init__(self, dtype: str):
        self.dtype = dtype


def _rebuild_tensor(storage, offset, size, stride, requires_grad=False, hooks=None, metadata=None):
    """torch._utils._rebuild_tensor_v2 as a NumPy array: a contiguous, native-order copy of the view
    of ``storage`` (a 1-D array) at element ``offset`` with ``size`` and element ``stride``."""
    if not isinstance(storage, np.ndarray):
        raise ValueError("a tensor whose storage is not a storage record")
    if not _ints(size) or not _ints(stride) or len(size) != len(stride) or not _ints((offset,)):
        raise ValueError(f"a tensor with malformed shape {size!r}, strides {stride!r} or offset {offset!r}")
    dtype = storage.dtype.newbyteorder("=")
    if 0 in size:
        return np.empty(size, dtype)
    last = offset + sum((n - 1) * s for n, s in zip(size, stride))
    if last >= len(storage):
        raise ValueError(f"a tensor view (offset {offset}, shape {tuple(size)}, strides {tuple(stride)}) "
                         f"reaches past its storage of {len(storage)} elements")
    item = storage.itemsize
    view = np.lib.stride_tricks.as_strided(storage[offset:], shape=tuple(size),
                                           strides=tuple(s * item for s in stride), writeable=False)
    return np.array(view, dtype=dtype, order="C")


def _ints(values) -> bool:
    return isinstance(values, (tuple, list)) and all(
        isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in values)


ALLOWED = {("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor,
           ("collections", "OrderedDict"): collections.OrderedDict,
           **{("torch", name): _StorageType(dtype) for name, dtype in STORAGE_DTYPES.items()}}


class _Unpickler(pickle.Unpickler):
    def __init__(self, data: bytes, archive: zipfile.ZipFile, prefix: str, order: str):
        super().__init__(io.BytesIO(data))
        self.archive, self.prefix, self.order, self.storages = archive, prefix, order, {}

    def find_class(self, module, name):
        if (module, name) not in ALLOWED:
            raise NotPlainData(f"{module}.{name}")
        return ALLOWED[(module, name)]

    def persistent_load(self, pid):
        """The storage ``('storage', type, key, location, numel)`` as a 1-D array of its elements."""
        if (not isinstance(pid, tuple) or len(pid) != 5 or pid[0] != "storage"
                or not isinstance(pid[1], _StorageType) or not isinstance(pid[2], str) or not _ints((pid[4],))):
            raise ValueError(f"an unknown persistent record {str(pid)[:80]}")
        _, kind, key, _, numel = pid
        if key not in self.storages:
            dtype = np.dtype(kind.dtype).newbyteorder(self.order)
            record = f"{self.prefix}data/{key}"
            try:
                size = self.archive.getinfo(record).file_size
            except KeyError:
                raise ValueError(f"the storage record {record} is missing") from None
            if size != numel * dtype.itemsize:
                raise ValueError(f"the storage record {record} holds {size} bytes, not {numel} "
                                 f"elements of {dtype.itemsize} bytes")
            self.storages[key] = np.frombuffer(self.archive.read(record), dtype)
        storage = self.storages[key]
        if storage.dtype != np.dtype(kind.dtype).newbyteorder(self.order):
            raise ValueError(f"the storage record {key} is read as two element types")
        return storage


def read_torch_file(path):
    """The data that ``torch.save`` wrote to ``path``, tensors as NumPy arrays (see the module
    docstring); raises ``NotPlainData`` for objects that are not plain data and
    ``ValueError`` (``zipfile.BadZipFile`` included) for anything else that is not readable."""
    with zipfile.ZipFile(path) as archive:
        names = archive.namelist()
        pickles = [name for name in names if name.endswith("data.pkl") and name.count("/") == 1]
        if len(pickles) != 1:
            raise ValueError("not a torch.save zip archive (no single <name>/data.pkl)")
        prefix = pickles[0][:-len("data.pkl")]
        order = "<"
        if f"{prefix}byteorder" in names:
            text = archive.read(f"{prefix}byteorder").decode("ascii", "replace").strip()
            if text not in ("little", "big"):
                raise ValueError(f"unknown byte order {text[:20]!r}")
            order = "<" if text == "little" else ">"
        try:
            return _Unpickler(archive.read(pickles[0]), archive, prefix, order).load()
        except NotPlainData:
            raise
        except (pickle.UnpicklingError, EOFError, TypeError, AttributeError, IndexError, KeyError) as err:
            raise ValueError(f"a malformed pickle ({type(err).__name__}: {err})") from None
