"""HDF5 graph format v1: round trips, slice reads, and one clear error per kind of bad file."""
import h5py
import numpy as np
import pytest

from pregel.errors import InputError
from pregel.generate import generate_graph
from pregel.graph_io import GraphData, read_graph, read_header, read_slice, scan_graph, write_graph


@pytest.fixture
def graph():
    rng = np.random.default_rng(0)
    indptr, indices = generate_graph("powerlaw", 300, 5, seed=1)
    return GraphData(indptr, indices, rng.random(len(indices)).astype(np.float32),
                     rng.normal(size=(300, 4)).astype(np.float32), rng.integers(0, 3, 300),
                     directed=True)


@pytest.fixture
def path(tmp_path, graph):
    p = tmp_path / "g.h5"
    write_graph(p, graph)
    return p


def test_round_trip(path, graph):
    back = read_graph(path)
    for name in ("indptr", "indices", "weights", "features", "labels"):
        assert np.array_equal(getattr(back, name), getattr(graph, name)), name
    assert back.directed and read_header(path).num_features == 4
    with h5py.File(path) as f:  # the layout the README fixes, checked with h5py directly
        assert f.attrs["format"] == "pregel-graph" and f.attrs["version"] == 1
        assert f["graph/indptr"].dtype == np.int64 and f["nodes/features"].dtype == np.float32
        assert f.attrs["num_edges"] == len(graph.indices)


@pytest.mark.parametrize("start,stop", [(0, 300), (0, 1), (17, 140), (299, 300), (150, 150)])
def test_slice_equals_the_rows_of_the_whole(path, graph, start, stop):
    part = read_slice(path, start, stop)
    lo, hi = graph.indptr[start], graph.indptr[stop]
    assert part.edge_start == lo
    assert np.array_equal(part.indptr, graph.indptr[start:stop + 1] - lo)
    assert np.array_equal(part.indices, graph.indices[lo:hi])
    assert np.array_equal(part.weights, graph.weights[lo:hi])
    assert np.array_equal(part.features, graph.features[start:stop])
    assert np.array_equal(part.labels, graph.labels[start:stop])


def test_slice_reads_only_its_rows(path, monkeypatch):
    """A rank must not read the whole file: count the elements h5py hands back."""
    read = []
    original = h5py.Dataset.__getitem__

    def counting(self, key):
        out = original(self, key)
        read.append((self.name, np.size(out)))
        return out

    monkeypatch.setattr(h5py.Dataset, "__getitem__", counting)
    part = read_slice(path, 100, 110)
    sizes = dict(read)
    assert sizes["/graph/indptr"] == 11 and sizes["/nodes/features"] == 10 * 4
    assert sizes["/graph/indices"] == len(part.indices) < 300


def test_write_is_atomic(tmp_path, graph):
    target = tmp_path / "g.h5"
    target.write_text("previous contents")
    broken = GraphData(graph.indptr, graph.indices, graph.weights[:-1])
    with pytest.raises(ValueError):
        write_graph(target, broken)
    assert target.read_text() == "previous contents"
    assert [p.name for p in tmp_path.iterdir()] == ["g.h5"], "no temporary file left behind"


def _corrupt(path, edit):
    with h5py.File(path, "r+") as f:
        edit(f)


def _replace(name, data):
    def edit(f):
        del f[name]
        f[name] = data
    return edit


def _set_attr(name, value):
    def edit(f):
        f.attrs[name] = value
    return edit


BAD_FILES = {
    "wrong format": (_set_attr("format", "pregel-scene"), "attribute format"),
    "wrong version": (_set_attr("version", 2), "attribute version"),
    "num_nodes not integer": (_set_attr("num_nodes", 2.5), "attribute num_nodes"),
    "directed not bool": (_set_attr("directed", "yes"), "attribute directed"),
    "missing indices": (lambda f: f.__delitem__("graph/indices"), "/graph/indices: dataset is missing"),
    "indptr wrong dtype": (lambda f: _replace("graph/indptr", f["graph/indptr"][:].astype(np.int32))(f),
                           "/graph/indptr: dtype is int32"),
    "weights wrong dtype": (lambda f: _replace("graph/weights", f["graph/weights"][:].astype(np.float64))(f),
                            "/graph/weights: dtype is float64"),
    "features wrong shape": (lambda f: _replace("nodes/features", f["nodes/features"][:-1])(f),
                             "/nodes/features: shape"),
    "labels wrong dtype": (lambda f: _replace("nodes/labels", f["nodes/labels"][:].astype(np.float32))(f),
                           "/nodes/labels: dtype"),
    "num_edges disagrees": (lambda f: f.attrs.__setitem__("num_edges", f.attrs["num_edges"] + 1),
                            "/graph/indices: shape"),
    "indptr not from 0": (lambda f: f["graph/indptr"].__setitem__(0, 1), "must start at 0"),
    "indptr decreasing": (lambda f: f["graph/indptr"].__setitem__(150, 0), "decreases at row"),
    "indptr last wrong": (lambda f: f["graph/indptr"].__setitem__(300, f["graph/indptr"][300] - 1),
                          "expected num_edges"),
    "index out of range": (lambda f: f["graph/indices"].__setitem__(7, 300), "outside [0, 300)"),
    "negative index": (lambda f: f["graph/indices"].__setitem__(9, -1), "outside [0, 300)"),
    "NaN weight": (lambda f: f["graph/weights"].__setitem__(3, np.nan), "/graph/weights: row 3 holds NaN"),
    "inf feature": (lambda f: f["nodes/features"].__setitem__((5, 2), np.inf), "/nodes/features: row 5"),
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_bad_file_gives_one_clear_line(path, case):
    edit, expected = BAD_FILES[case]
    _corrupt(path, edit)
    with pytest.raises(InputError) as err:
        scan_graph(path, chunk_rows=64)  # small chunks: the slice checks see every boundary
    message = str(err.value)
    assert str(path) in message and expected in message and "\n" not in message


def test_not_hdf5_and_missing(tmp_path):
    text = tmp_path / "g.h5"
    text.write_text("not hdf5")
    with pytest.raises(InputError, match="not a readable HDF5 file"):
        read_header(text)
    with pytest.raises(InputError, match="no such file"):
        read_graph(tmp_path / "missing.h5")


def test_empty_graph(tmp_path):
    p = tmp_path / "empty.h5"
    write_graph(p, GraphData(np.zeros(1, np.int64), np.zeros(0, np.int64)))
    back = read_graph(p)
    assert back.num_nodes == 0 and back.num_edges == 0
