"""``pregel convert`` from Parquet and CSV tables, checked against pandas reading the same tables."""

import subprocess
import sys

import h5py
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pregel.cli import main
from pregel.id_table import positions as _positions
from pregel.graph_io import read_graph


def _graph_edges(path) -> list:
    """(original src, original dst, weight or None) of every edge of a graph file, sorted."""
    graph = read_graph(path)
    with h5py.File(path, "r") as f:
        ids = f["nodes/original_ids"][:]
    ids = [i.decode() if isinstance(i, bytes) else int(i) for i in ids]
    src = np.repeat(np.arange(graph.num_nodes), np.diff(graph.indptr))
    weights = [None] * len(src) if graph.weights is None else graph.weights.tolist()
    return sorted((ids[u], ids[v], w) for u, v, w in zip(src.tolist(), graph.indices.tolist(), weights))


def _node_rows(path) -> dict:
    """{original id: (features tuple or None, label or None)} of a graph file."""
    graph = read_graph(path)
    with h5py.File(path, "r") as f:
        ids = f["nodes/original_ids"][:]
    rows = {}
    for i, original in enumerate(ids):
        key = original.decode() if isinstance(original, bytes) else int(original)
        features = None if graph.features is None else tuple(graph.features[i].tolist())
        rows[key] = (features, None if graph.labels is None else int(graph.labels[i]))
    return rows


def _random_tables(rng, n: int, e: int, string_ids: bool):
    """(edges DataFrame, nodes DataFrame) with ids that are scrambled integers or strings."""
    raw = rng.choice(10 * n, size=n, replace=False) * 7 - 3 * n  # negative ids too
    ids = [f"user-{v}" for v in raw] if string_ids else raw.tolist()
    src, dst = rng.integers(0, n, e), rng.integers(0, n, e)
    edges = pd.DataFrame({"s": [ids[i] for i in src], "d": [ids[i] for i in dst],
                          "w": rng.random(e).astype(np.float32)})
    nodes = pd.DataFrame({"id": ids, "x": [rng.standard_normal(3).astype(np.float32).tolist() for _ in ids],
                          "y": rng.integers(0, 5, n)})
    return edges, nodes


@pytest.mark.parametrize("string_ids", [False, True])
def test_parquet_tables_match_pandas(tmp_path, string_ids):
    rng = np.random.default_rng(3)
    edges, nodes = _random_tables(rng, 200, 1500, string_ids)
    pq.write_table(pa.Table.from_pandas(edges, preserve_index=False), tmp_path / "e.parquet", row_group_size=100)
    pq.write_table(pa.Table.from_pandas(nodes, preserve_index=False), tmp_path / "n.parquet", row_group_size=64)
    assert pq.ParquetFile(tmp_path / "e.parquet").num_row_groups == 15
    out = tmp_path / "g.h5"
    assert main(["convert", str(tmp_path / "e.parquet"), "--src", "s", "--dst", "d", "--weight", "w",
                 "--nodes", str(tmp_path / "n.parquet"), "--id", "id", "--features", "x", "--label", "y",
                 "--out", str(out)]) == 0
    e = pd.read_parquet(tmp_path / "e.parquet")
    n = pd.read_parquet(tmp_path / "n.parquet")
    expected = sorted(zip(e["s"].tolist(), e["d"].tolist(), e["w"].astype(np.float32).tolist()))
    assert _graph_edges(out) == expected
    assert _node_rows(out) == {i: (tuple(np.asarray(x, np.float32).tolist()), int(y))
                               for i, x, y in zip(n["id"].tolist(), n["x"], n["y"])}
    with h5py.File(out, "r") as f:  # vertices numbered in the node table's row order
        ids = f["nodes/original_ids"][:]
    assert [i.decode() if string_ids else int(i) for i in ids] == n["id"].tolist()


@pytest.mark.parametrize("with_nodes", [False, True])
@pytest.mark.parametrize("spread", [1, 1000])  # ids in a range a table can cover, and too sparse for one
def test_integer_ids_are_numbered_as_pandas_reads_them_by_table_or_hash(tmp_path, monkeypatch, with_nodes, spread):
    from pregel import id_table

    calls = []
    monkeypatch.setattr(id_table, "positions", lambda *a: calls.append(1) or _positions(*a))
    rng = np.random.default_rng(9)
    node_ids = rng.permutation(500) * spread - 250  # distinct, negative ones too, gaps where spread > 1
    edges, nodes, out = tmp_path / "e.parquet", tmp_path / "n.parquet", tmp_path / "g.h5"
    pq.write_table(pa.table({"s": node_ids[rng.integers(0, 500, 3000)], "d": node_ids[rng.integers(0, 400, 3000)]}),
                   edges, row_group_size=700)
    pq.write_table(pa.table({"id": node_ids}), nodes)
    args = ["--nodes", str(nodes), "--id", "id"] if with_nodes else []
    assert main(["convert", str(edges), "--src", "s", "--dst", "d", *args, "--out", str(out)]) == 0
    e = pd.read_parquet(edges)
    assert _graph_edges(out) == sorted(zip(e["s"].tolist(), e["d"].tolist(), [None] * len(e)))
    with h5py.File(out, "r") as f:
        ids = f["nodes/original_ids"][:].tolist()
    assert ids == (node_ids.tolist() if with_nodes else sorted(set(e["s"]) | set(e["d"])))
    assert bool(calls) == (spread == 1)  # the table where the range allows it, else Arrow's hashing


def test_a_column_used_twice_is_numbered_before_it_is_released(tmp_path):
    # the numbered id columns are dropped one by one to free their memory: not while the weights (or the
    # other end) still read the same column
    edges, out = tmp_path / "e.parquet", tmp_path / "g.h5"
    pq.write_table(pa.table({"s": [3, 5, 9, 5], "d": [5, 9, 3, 3]}), edges, row_group_size=2)
    e = pd.read_parquet(edges)
    assert main(["convert", str(edges), "--src", "s", "--dst", "d", "--weight", "d", "--out", str(out)]) == 0
    assert _graph_edges(out) == sorted(zip(e["s"].tolist(), e["d"].tolist(), e["d"].astype(float).tolist()))
    assert main(["convert", str(edges), "--src", "s", "--dst", "s", "--out", str(out)]) == 0
    assert _graph_edges(out) == sorted(zip(e["s"].tolist(), e["s"].tolist(), [None] * len(e)))


def test_csv_edges_without_node_table_number_ids_ascending(tmp_path):
    edges = pd.DataFrame({"from": ["b", "c", "a", "c", "é"], "to": ["c", "a", "c", "b", "a"]})
    edges.to_csv(tmp_path / "e.csv", index=False)
    out = tmp_path / "g.h5"
    assert main(["convert", str(tmp_path / "e.csv"), "--src", "from", "--dst", "to", "--out", str(out)]) == 0
    e = pd.read_csv(tmp_path / "e.csv")
    with h5py.File(out, "r") as f:
        ids = [i.decode() for i in f["nodes/original_ids"][:]]
    assert ids == sorted(set(e["from"]) | set(e["to"]))
    assert _graph_edges(out) == sorted((s, d, None) for s, d in zip(e["from"], e["to"]))


def test_csv_node_table_with_text_features(tmp_path):
    pd.DataFrame({"u": [10, 30], "v": [30, 20]}).to_csv(tmp_path / "e.csv", index=False)
    nodes = pd.DataFrame({"key": [30, 10, 20], "feat": ["[1.5, 2]", "3;4", "5 6"], "cls": [2, 0, 1]})
    nodes.to_csv(tmp_path / "n.csv", index=False)
    out = tmp_path / "g.h5"
    assert main(["convert", str(tmp_path / "e.csv"), "--src", "u", "--dst", "v", "--nodes",
                 str(tmp_path / "n.csv"), "--id", "key", "--features", "feat", "--label", "cls",
                 "--out", str(out)]) == 0
    n = pd.read_csv(tmp_path / "n.csv")
    parsed = {k: tuple(float(t) for t in f.strip("[]").replace(",", " ").replace(";", " ").split())
              for k, f in zip(n["key"], n["feat"])}
    assert _node_rows(out) == {int(k): (parsed[k], int(c)) for k, c in zip(n["key"], n["cls"])}
    assert _graph_edges(out) == [(10, 30, None), (30, 20, None)]


def test_undirected_rows_store_both_directions(tmp_path):
    pq.write_table(pa.table({"a": [1, 2, 2], "b": [2, 3, 2]}), tmp_path / "e.parquet")
    out = tmp_path / "g.h5"
    assert main(["convert", str(tmp_path / "e.parquet"), "--src", "a", "--dst", "b", "--undirected",
                 "--out", str(out)]) == 0
    assert _graph_edges(out) == sorted([(1, 2, None), (2, 1, None), (2, 3, None), (3, 2, None), (2, 2, None)])


def _bad(tmp_path, capsys, args) -> str:
    out = tmp_path / "bad.h5"
    assert main(["convert"] + [str(a) for a in args] + ["--out", str(out)]) == 2
    assert not out.exists()
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    return err


def test_bad_tables_one_line_exit_2(tmp_path, capsys):
    e = tmp_path / "e.parquet"
    pq.write_table(pa.table({"a": ["x", None, "y"], "b": ["y", "x", "q"]}), e)
    assert "no column 'zz'" in _bad(tmp_path, capsys, [e, "--src", "a", "--dst", "zz"])
    assert "null id in row 1" in _bad(tmp_path, capsys, [e, "--src", "a", "--dst", "b"])
    good = tmp_path / "good.parquet"
    pq.write_table(pa.table({"a": ["x", "y"], "b": ["y", "q"]}), good)
    nodes = tmp_path / "n.parquet"
    pq.write_table(pa.table({"id": ["x", "y"], "f": [[1.0, 2.0], [3.0]]}), nodes)
    assert "'q', which is not an id of" in _bad(tmp_path, capsys, [good, "--src", "a", "--dst", "b",
                                                                   "--nodes", nodes, "--id", "id"])
    pq.write_table(pa.table({"a": ["x"], "b": ["y"]}), good)
    assert "unequal length (row 0 has 2, row 1 has 1)" in _bad(
        tmp_path, capsys, [good, "--src", "a", "--dst", "b", "--nodes", nodes, "--id", "id", "--features", "f"])
    twice = tmp_path / "twice.parquet"
    pq.write_table(pa.table({"id": ["x", "y", "x"]}), twice)
    assert "appears twice" in _bad(tmp_path, capsys, [good, "--src", "a", "--dst", "b", "--nodes", twice, "--id", "id"])
    assert "needs --src and --dst" in _bad(tmp_path, capsys, [good, "--src", "a"])


@pytest.mark.parametrize("string_ids", [False, True])  # through the table over the id range, or Arrow's hash
def test_a_missing_id_is_named_by_its_row_across_batches(tmp_path, capsys, monkeypatch, string_ids):
    from pregel import tables

    monkeypatch.setattr(tables, "BATCH_ROWS", 64)  # the edge table is read in 5 batches
    ids = np.arange(300) * 3
    dst = ids.copy()
    dst[250] = 1  # not a node id
    if string_ids:
        ids, dst = [f"v{i}" for i in ids], [f"v{i}" for i in dst]
    edges, nodes = tmp_path / "e.parquet", tmp_path / "n.parquet"
    pq.write_table(pa.table({"a": ids, "b": dst}), edges, row_group_size=64)
    pq.write_table(pa.table({"id": ids}), nodes)
    missing = "'v1'" if string_ids else "1"
    assert f"column 'b': row 250 has id {missing}, which is not an id of" in _bad(
        tmp_path, capsys, [edges, "--src", "a", "--dst", "b", "--nodes", nodes, "--id", "id"])


def test_ids_of_the_wrong_kind_are_refused_in_one_line(tmp_path, capsys):
    edges, nodes = tmp_path / "e.parquet", tmp_path / "n.parquet"
    pq.write_table(pa.table({"a": ["x", "y"], "b": [1, 2], "f": [0.5, 1.5]}), edges)
    pq.write_table(pa.table({"id": [1, 2]}), nodes)
    assert "columns 'a' and 'b' hold ids of different types (string, int64)" in _bad(
        tmp_path, capsys, [edges, "--src", "a", "--dst", "b"])
    assert "column 'f': ids must be integers or strings, got double" in _bad(
        tmp_path, capsys, [edges, "--src", "f", "--dst", "b"])
    assert "column 'a': ids are string but the node ids are int64" in _bad(
        tmp_path, capsys, [edges, "--src", "a", "--dst", "b", "--nodes", nodes, "--id", "id"])
    pq.write_table(pa.table({"id": [1.0, 2.0]}), nodes)
    assert "column 'id': ids must be integers or strings, got double" in _bad(
        tmp_path, capsys, [edges, "--src", "b", "--dst", "b", "--nodes", nodes, "--id", "id"])


def test_results_carry_original_ids(tmp_path):
    import torch
    from torch_geometric.nn import SAGEConv

    from vertex_programs.gnn import save_model

    pq.write_table(pa.table({"a": ["p", "q", "r"], "b": ["q", "r", "p"]}), tmp_path / "e.parquet")
    pq.write_table(pa.table({"n": ["r", "q", "p"], "x": [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]}), tmp_path / "n.parquet")
    graph = tmp_path / "g.h5"
    assert main(["convert", str(tmp_path / "e.parquet"), "--src", "a", "--dst", "b", "--nodes",
                 str(tmp_path / "n.parquet"), "--id", "n", "--features", "x", "--out", str(graph)]) == 0
    torch.manual_seed(0)
    save_model(tmp_path / "m.pt", [SAGEConv(2, 3)])
    for command in (["run", "pagerank"], ["infer", "--model", str(tmp_path / "m.pt")]):
        out = tmp_path / "out.h5"
        done = subprocess.run([sys.executable, "-m", "pregel.cli"] + command + [
            "--graph", str(graph), "--out", str(out), "--quiet"], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        with h5py.File(out, "r") as f:
            assert [i.decode() for i in f["original_ids"][:]] == ["r", "q", "p"]
            assert len(f["values"]) == 3


def test_csv_row_with_an_empty_id_is_a_null_id_not_a_vertex_named_empty(tmp_path, capsys):
    # pandas reads the empty field as a missing value (NaN), so row 1 has no source: it must be refused
    # as the README says of a null id, not numbered as a fourth vertex ''
    e = tmp_path / "e.csv"
    e.write_text("a,b\nx,y\n,z\n")
    assert pd.read_csv(e)["a"].isna().tolist() == [False, True]
    assert "column 'a': null id in row 1" in _bad(tmp_path, capsys, [e, "--src", "a", "--dst", "b"])
    e.write_text('a,b\nx,y\n"",z\n')  # quoted empty: the same missing value to pandas
    assert pd.read_csv(e)["a"].isna().tolist() == [False, True]
    assert "column 'a': null id in row 1" in _bad(tmp_path, capsys, [e, "--src", "a", "--dst", "b"])


def test_csv_tables_without_rows(tmp_path, capsys):
    edges, nodes, empty_nodes = tmp_path / "e.csv", tmp_path / "n.csv", tmp_path / "n0.csv"
    edges.write_text("a,b,w\n")  # a header only: pandas reads 0 rows
    nodes.write_text("id,f,l\nx,1 2,0\ny,3 4,1\n")
    empty_nodes.write_text("id\n")
    assert len(pd.read_csv(edges)) == 0 and len(pd.read_csv(empty_nodes)) == 0
    # without a node table the edges' ids are the vertices: none, so no graph
    assert "e.csv: has no rows" in _bad(tmp_path, capsys, [edges, "--src", "a", "--dst", "b"])
    assert "n0.csv: has no rows" in _bad(tmp_path, capsys, [edges, "--src", "a", "--dst", "b", "--nodes", empty_nodes,
                                                            "--id", "id"])
    # with one, a graph of the node table's vertices and no edges
    out = tmp_path / "g.h5"
    assert main(["convert", str(edges), "--src", "a", "--dst", "b", "--weight", "w", "--nodes", str(nodes),
                 "--id", "id", "--features", "f", "--label", "l", "--out", str(out)]) == 0
    graph = read_graph(out)
    assert graph.num_nodes == 2 and graph.num_edges == 0
    assert graph.features.tolist() == [[1.0, 2.0], [3.0, 4.0]] and graph.labels.tolist() == [0, 1]
    assert _node_rows(out) == {"x": ((1.0, 2.0), 0), "y": ((3.0, 4.0), 1)}


def test_chunks_with_dictionaries_of_their_own_are_unified():
    # Arrow's dictionary_encode gives every chunk one shared dictionary; chunks encoded apart (each its own
    # dictionary) must come out over one dictionary that decodes to the same values
    from pregel.tables import _one_dictionary

    parts = [pa.DictionaryArray.from_arrays(pa.array([0, 1, 0], pa.int32()), pa.array(["b", "a"])),
             pa.DictionaryArray.from_arrays(pa.array([1, 0], pa.int32()), pa.array(["c", "b"]))]
    encoded, dictionary = _one_dictionary(pa.chunked_array(parts), pa.string())
    assert all(chunk.dictionary.equals(dictionary) for chunk in encoded.chunks)
    decoded = [dictionary[i].as_py() for chunk in encoded.chunks for i in chunk.indices.to_pylist()]
    assert decoded == ["b", "a", "b", "b", "c"]
    shared = pa.chunked_array([pa.array(["x", "y"]), pa.array(["y", "z"])]).dictionary_encode()
    assert _one_dictionary(shared, pa.string())[0] is shared  # Arrow's own: taken as it is
    empty, nothing = _one_dictionary(pa.chunked_array([], pa.dictionary(pa.int32(), pa.string())), pa.string())
    assert len(nothing) == 0 and nothing.type == pa.string()


@pytest.mark.parametrize("kind", [pa.string(), pa.large_string()])
def test_original_ids_as_fixed_width_bytes_equal_numpys(kind):
    # Python's own UTF-8 bytes in a NumPy "S" array as the oracle: a slice of an Arrow array (an offset into
    # its buffers), an empty id, ids of several bytes a character
    from pregel.tables import original_ids_array

    values = ["", "élan", "a", "user-12345", "日本", "zz"]
    ids = pa.array(["skipped"] + values, kind).slice(1)
    got = original_ids_array(ids)
    assert got.dtype == np.dtype("S10") and got.tolist() == np.array([v.encode() for v in values]).tolist()
