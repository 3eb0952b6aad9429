"""Graphs from tables: an edge table (Parquet or CSV) and an optional node table, through pyarrow.

``read_tables(edges, src, dst, ...)`` streams the tables batch by batch (a Parquet file row group
by row group, a CSV file block by block) and keeps only the parsed columns it was asked for, as
Arrow arrays: never the whole file, never a Python object per row. Node ids may be any integers or
strings. They are numbered 0..N-1: in the node table's row order when there is one (every edge
endpoint must then be one of its ids), else in ascending order of the ids that the edges use. The
numbering is vectorised: integer ids in a range not much larger than their count go through a table
over the range (``pregel.id_table``), other ids through one pass of Arrow's hash (``dictionary_encode``),
then a number for each distinct id. The original
ids are returned, to be kept in the graph file as ``/nodes/original_ids`` (int64, or fixed-length UTF-8
bytes for strings).

Features are a list column (``list<float>``; in CSV, a text column of numbers separated by spaces,
commas or semicolons, optionally in brackets), all lists of one length. Labels are integers.
Problems (a missing column, a null id, an edge to an unknown node, duplicate node ids, feature lists
of unequal length, an unreadable file) are ``InputError`` lines naming the file and column.
"""

import os

import numpy as np
from numba import njit

from kernels._numba_start import start as start_numba
from pregel.errors import InputError, not_a_file

start_numba()

#: rows per batch read from a table (memory holds the parsed columns, not the file)
BATCH_ROWS = 1 << 20
FORMATS = {".parquet": "parquet", ".pq": "parquet", ".csv": "csv"}


def table_format(path) -> str | None:
    """'parquet' or 'csv' from the file name's extension (``.parquet``, ``.pq``, ``.csv``), else None."""
    return FORMATS.get(os.path.splitext(os.fspath(path))[1].lower())


def read_tables(edges, src: str, dst: str, weight: str | None = None, nodes=None, node_id: str | None = None,
                features: str | None = None, label: str | None = None, directed: bool = True):
    """(GraphData, original_ids [N]) from an edge table and an optional node table (module docstring).

    ``edges``: path of the edge table with columns ``src``, ``dst`` and optionally ``weight``;
    ``nodes``: path of the node table with column ``node_id`` and optionally ``features``, ``label``.
    ``directed=False``: each row is an undirected edge, both directions are stored.
    """
    import pyarrow as pa

    from pregel.convert import edges_to_graph

    if nodes is None and (node_id or features or label):
        raise InputError("`node_id`, `features` and `label` need `nodes` (the node table)")
    if nodes is not None and not node_id:
        raise InputError("`nodes` needs `node_id` (the node table's id column)")
    wanted = [src, dst] + ([weight] if weight else [])
    columns = _read_columns(edges, wanted)
    for name in (src, dst):
        _no_nulls(edges, name, columns[name], "null id")
    if nodes is None and len(columns[src]) == 0:
        raise InputError.at(edges, None, "has no rows: the ids of its edges number the vertices, so this is a "
                                         "graph without vertices (a node table, `nodes`, can give them)")
    node_columns = {}
    if nodes is not None:
        node_columns = _read_columns(nodes, [node_id] + [c for c in (features, label) if c])
        ids = node_columns[node_id]
        _no_nulls(nodes, node_id, ids, "null id")
        if len(ids) == 0:
            raise InputError.at(nodes, None, "has no rows: its rows number the vertices, so this is a graph "
                                             "without vertices")
        ids = ids.combine_chunks() if isinstance(ids, pa.ChunkedArray) else ids
        _unique_ids(nodes, node_id, ids)
    by_table = _numbered_by_table(edges, src, dst, columns, ids if nodes is not None else None, nodes,
                                  release={src, dst} - {weight})
    if by_table is not None:
        ids, mapped = by_table
    else:
        ids, mapped = _numbered_by_dictionary(edges, src, dst, columns, ids if nodes is not None else None, nodes,
                                              release={src, dst} - {weight})
    weights = None
    if weight:
        weights = _numbers(edges, weight, columns[weight], np.float32)
    columns.clear()  # the Arrow columns are numbered: 16 bytes an edge freed before the CSR is built, and
    pa.default_memory_pool().release_unused()  # handed back (Arrow's pool kept them: 0.6 GB more at the peak)
    mapped.append(weights)
    del weights  # the list alone holds the edges: edges_to_graph frees them once it has doubled them
    graph = edges_to_graph(len(ids), mapped, directed)
    if features:
        graph.features = _feature_rows(nodes, features, node_columns[features])
    if label:
        graph.labels = _numbers(nodes, label, node_columns[label], np.int64)
    return graph, original_ids_array(ids)


def _read_columns(path, names: list) -> dict:
    """{name: pyarrow.ChunkedArray} of the columns ``names`` of a table, read batch by batch."""
    import pyarrow as pa

    path = os.fspath(path)
    kind = table_format(path)
    if kind is None:
        raise InputError.at(path, None, "not a table: the name must end in .parquet, .pq or .csv")
    if not os.path.isfile(path):
        raise InputError.at(path, None, not_a_file(path))
    unique = list(dict.fromkeys(names))
    try:
        schema, batches = _parquet_batches(path, unique) if kind == "parquet" else _csv_batches(path, unique)
        chunks = {name: [] for name in unique}
        for batch in batches:
            for name in unique:
                chunks[name].append(batch.column(name))
    except (pa.ArrowException, OSError) as err:
        raise InputError.at(path, None, f"cannot read the {kind} table ({str(err).splitlines()[0]})") from None
    # the reader's freed buffers go back to the system: Arrow's default pool (mimalloc) kept them, 1.1 GB
    # of a 100M-edge table's 3 GB after reading
    pa.default_memory_pool().release_unused()
    try:  # a table without rows has no batches: its columns are empty arrays of the schema's types
        return {name: pa.chunked_array(parts, type=None if parts else schema.field(name).type)
                for name, parts in chunks.items()}
    except pa.ArrowException as err:  # a CSV column whose type changed between blocks
        raise InputError.at(path, None, f"a column changes type between blocks ({err})") from None


def _parquet_batches(path, names):
    import pyarrow.parquet as pq

    # pre_buffer (pyarrow's default) keeps every row group's file bytes until the reader closes: 1 GB more
    # for a 1 GB table of 100M edges, and three times slower to read
    table = pq.ParquetFile(path, pre_buffer=False)
    _check_columns(path, names, table.schema_arrow.names)
    return table.schema_arrow, table.iter_batches(batch_size=BATCH_ROWS, columns=names)


def _csv_batches(path, names):
    import pyarrow.csv as pv

    # an empty field is a null, also in a text column (pyarrow's default reads it as the id ''), so a
    # row with a missing id is refused as one, not numbered as a vertex named ''
    reader = pv.open_csv(path, read_options=pv.ReadOptions(block_size=64 << 20),
                         convert_options=pv.ConvertOptions(include_columns=names, strings_can_be_null=True))
    _check_columns(path, names, reader.schema.names)
    return reader.schema, reader


def _check_columns(path, names, present) -> None:
    missing = [name for name in names if name not in present]
    if missing:
        raise InputError.at(path, None, f"no column {missing[0]!r} (columns: {', '.join(present)})")


def _no_nulls(path, name, column, what: str) -> None:
    """InputError naming the first row of ``column`` that is null."""
    if column.null_count:
        import pyarrow.compute as pc

        row = int(pc.index(pc.is_null(column), True).as_py())
        raise InputError.at(path, f"column {name!r}", f"{what} in row {row}")


def _id_type_problem(path, name, column, ids) -> None:
    import pyarrow.types as pt

    if pt.is_null(column.type) and len(column) == 0:  # a CSV table without rows: no type to infer
        return
    if not (_is_integer(column.type) and _is_integer(ids.type) or _is_text(column.type) and _is_text(ids.type)):
        raise InputError.at(path, f"column {name!r}", f"ids are {column.type} but the node ids are {ids.type}")


def _is_integer(kind) -> bool:
    import pyarrow.types as pt

    return pt.is_integer(kind)


def _is_text(kind) -> bool:
    import pyarrow.types as pt

    return pt.is_string(kind) or pt.is_large_string(kind)


def _check_id_kind(path, name, kind) -> None:
    """InputError unless ids of the Arrow type ``kind`` (column ``name``) are integers or strings."""
    if not (_is_integer(kind) or _is_text(kind)):
        raise InputError.at(path, f"column {name!r}", f"ids must be integers or strings, got {kind}")


def _unique_ids(path, name, ids) -> None:
    """InputError when the node table lists an id twice (or its ids are not integers or strings)."""
    import pyarrow.compute as pc

    _check_id_kind(path, name, ids.type)
    positions = pc.index_in(ids, value_set=ids).to_numpy()
    repeated = np.flatnonzero(positions != np.arange(len(ids)))
    if len(repeated):
        row = int(repeated[0])
        raise InputError.at(path, f"column {name!r}", f"id {ids[row].as_py()!r} appears twice "
                                                       f"(rows {int(positions[row])} and {row})")


def _numbered_by_table(path, src, dst, columns, node_ids, nodes, release=()) -> tuple | None:
    """(ids, [positions [E] int32 of the ``src`` column's ids, of ``dst``'s]) through a table over the
    id range (``pregel.id_table``), when the ids are integers (of the node table ``node_ids``, an Arrow
    array, or else the distinct ones of the edges, ascending) in a range small enough: at most
    ``RANGE_PER_ID`` entries a node id, or one an edge. None otherwise: the caller hashes them. The
    columns named in ``release`` are dropped from ``columns`` once numbered (set to None)."""
    import pyarrow as pa

    from pregel.id_table import RANGE_PER_ID, node_ids_table, positions, used_ids_table

    ends = [_int64_chunks(columns[name]) for name in (src, dst)]
    if ends[0] is None or ends[1] is None:
        return None
    if node_ids is None:
        built = used_ids_table(ends[0] + ends[1], max(len(columns[src]), 1))
        if built is None:
            return None
        ids, table, lo = built
        ids = pa.array(ids)
    else:
        node_chunks = _int64_chunks(pa.chunked_array([node_ids]))
        built = None if node_chunks is None else node_ids_table(node_chunks[0], RANGE_PER_ID * len(node_ids))
        if built is None:
            return None
        (table, lo), ids = built, node_ids
    mapped = []
    for k, name in enumerate((src, dst)):
        found, bad = positions(ends[k], table, lo)
        if bad >= 0:
            raise _missing_id(path, name, bad, _value_at(ends[k], bad), nodes)
        mapped.append(found)
        if name in release:  # numbered: the column's 8 bytes an edge go back before the next one's positions
            ends[k] = columns[name] = None
            pa.default_memory_pool().release_unused()
    return ids, mapped


def _value_at(chunks: list, row: int) -> int:
    """The value at ``row`` of a column held as ``chunks`` (NumPy arrays)."""
    for chunk in chunks:
        if row < len(chunk):
            return chunk[row].item()
        row -= len(chunk)
    raise IndexError(row)


def _int64_chunks(column) -> list | None:
    """The chunks of an Arrow integer column as int64 NumPy arrays (views where they are int64), or None
    when it is not integers or a value does not fit in int64."""
    import pyarrow as pa

    if not _is_integer(column.type):
        return None
    try:
        return [chunk.cast(pa.int64()).to_numpy() for chunk in column.chunks]
    except pa.ArrowInvalid:
        return None


def _missing_id(path, name, row: int, value, nodes) -> InputError:
    return InputError.at(path, f"column {name!r}", f"row {row} has id {value!r}, which is not an id of {nodes}")


def _numbered_by_dictionary(path, src, dst, columns, node_ids, nodes, release=()) -> tuple:
    """(ids, [positions [E] int32 of the ``src`` column's ids, of ``dst``'s]) by one pass of Arrow's hash over
    both columns (``dictionary_encode``: each distinct id once, each edge the index of its id), then a number
    for each distinct id: its position in the node table's ids ``node_ids`` (an Arrow array, which are then
    the ids), or else in the distinct ids sorted (which are). InputError for ids that are neither integers
    nor strings, of two kinds, or not in the node table. The columns named in ``release`` are dropped from
    ``columns`` once encoded. (A lookup of every edge's id, ``index_in`` on each column after finding the
    distinct ones, hashed each id three times: 113-122 s for 100M edges with string ids, against 67-70.)"""
    import pyarrow as pa
    import pyarrow.compute as pc

    ends = [columns[src], columns[dst]]
    if node_ids is None:
        for name, column in zip((src, dst), ends):
            _check_id_kind(path, name, column.type)
        if _is_integer(ends[0].type) != _is_integer(ends[1].type):
            raise InputError.at(path, None, f"columns {src!r} and {dst!r} hold ids of different types "
                                            f"({ends[0].type}, {ends[1].type})")
        common = ends[0].type if ends[0].type == ends[1].type else \
            pa.int64() if _is_integer(ends[0].type) else pa.large_string()
    else:
        for name, column in zip((src, dst), ends):
            _id_type_problem(path, name, column, node_ids)
        common = node_ids.type
    rows = [len(column) for column in ends]
    encoded = pa.chunked_array([chunk.cast(common) for column in ends for chunk in column.chunks],
                               type=common).dictionary_encode()
    ends = None
    for name in release:  # encoded: the ids themselves (strings: 17 bytes an edge) go back now
        columns[name] = None
    pa.default_memory_pool().release_unused()
    encoded, dictionary = _one_dictionary(encoded, common)
    if node_ids is None:
        order = pc.sort_indices(dictionary).to_numpy()
        ids, number = dictionary.take(order), np.empty(len(order), np.int32)
        number[order] = np.arange(len(order), dtype=np.int32)
    else:
        ids, number = node_ids, pc.fill_null(pc.index_in(dictionary, value_set=node_ids), -1).to_numpy()
    mapped, chunks, pending = [], iter(encoded.chunks), np.zeros(0, np.int32)
    for name, count in zip((src, dst), rows):  # the src column's rows first, then dst's
        out, start = np.empty(count, np.int32), 0
        while start < count:
            if not len(pending):
                pending = next(chunks).indices.to_numpy()
            indices, pending = pending[:count - start], pending[count - start:]
            found = np.take(number, indices, out=out[start:start + len(indices)])
            missing = np.flatnonzero(found < 0)
            if len(missing):
                value = dictionary[int(indices[missing[0]])].as_py()
                raise _missing_id(path, name, start + int(missing[0]), value, nodes)
            start += len(indices)
        mapped.append(out)
    return ids, mapped


def _one_dictionary(encoded, kind) -> tuple:
    """(``encoded``, its dictionary): a dictionary-encoded ChunkedArray whose chunks all index one dictionary
    (of type ``kind`` when there are no chunks). Arrow's ``dictionary_encode`` gives every chunk the same one,
    which compares equal at once; chunks with dictionaries of their own are unified (slowly: each chunk's
    dictionary is hashed again)."""
    import pyarrow as pa

    if not encoded.num_chunks:
        return encoded, pa.array([], kind)
    dictionary = encoded.chunks[-1].dictionary
    if not all(chunk.dictionary.equals(dictionary) for chunk in encoded.chunks):
        encoded = encoded.unify_dictionaries()
        dictionary = encoded.chunks[-1].dictionary
    return encoded, dictionary


def _numbers(path, name, column, dtype) -> np.ndarray:
    """A numeric column [rows] as ``dtype`` (InputError for nulls or non-numbers)."""
    import pyarrow.types as pt

    if pt.is_null(column.type) and len(column) == 0:  # a CSV table without rows: no type to infer
        return np.zeros(0, dtype)
    if not (pt.is_integer(column.type) or (pt.is_floating(column.type) and dtype == np.float32)):
        raise InputError.at(path, f"column {name!r}", f"must hold numbers of kind {np.dtype(dtype).name}, "
                                                       f"got {column.type}")
    _no_nulls(path, name, column, "null value")
    return np.concatenate([np.zeros(0, dtype)] + [c.to_numpy().astype(dtype) for c in column.chunks])


def _feature_rows(path, name, column) -> np.ndarray:
    """[N, F] float32 from a list column (or CSV text of numbers), every list of one length."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.types as pt

    _no_nulls(path, name, column, "null feature list")
    if _is_text(column.type):
        text = pc.replace_substring_regex(column, r"^[\s\[]+|[\s\]]+$", "")
        column = pc.split_pattern_regex(text, r"[\s,;]+")
    if not (pt.is_list(column.type) or pt.is_large_list(column.type) or pt.is_fixed_size_list(column.type)):
        raise InputError.at(path, f"column {name!r}", f"features must be lists of numbers, got {column.type}")
    lengths = np.concatenate([np.zeros(0, np.int64)] + [pc.list_value_length(c).to_numpy() for c in column.chunks])
    if len(lengths) and (lengths != lengths[0]).any():
        row = int(np.flatnonzero(lengths != lengths[0])[0])
        raise InputError.at(path, f"column {name!r}", f"feature lists of unequal length (row 0 has "
                                                       f"{lengths[0]}, row {row} has {lengths[row]})")
    width = int(lengths[0]) if len(lengths) else 0
    try:
        values = [pc.list_flatten(c).cast(pa.float32()) for c in column.chunks]
    except pa.ArrowException as err:
        raise InputError.at(path, f"column {name!r}", f"features are not numbers ({err})") from None
    flat = np.concatenate([np.zeros(0, np.float32)] + [v.to_numpy(zero_copy_only=False) for v in values])
    if np.isnan(flat).any():
        raise InputError.at(path, f"column {name!r}", "feature lists hold null or NaN values")
    return flat.astype(np.float32).reshape(len(lengths), width)


def original_ids_array(ids) -> np.ndarray:
    """The ids [N] as a NumPy array for the graph file: int64, or fixed-length UTF-8 bytes ``S<k>``
    (built from Arrow's buffers without a Python object per id; trailing NUL bytes are not kept)."""
    import pyarrow as pa

    if _is_integer(ids.type):
        return ids.cast(pa.int64()).to_numpy()
    ids = ids.cast(pa.large_string())
    offsets = np.frombuffer(ids.buffers()[1], np.int64)[ids.offset:ids.offset + len(ids) + 1]
    data = np.frombuffer(ids.buffers()[2], np.uint8) if ids.buffers()[2] is not None else np.zeros(0, np.uint8)
    width = max(int(np.diff(offsets).max(initial=0)), 1)
    out = np.zeros((len(ids), width), np.uint8)
    _fixed_width(offsets, data, out)
    return out.view(f"S{width}").reshape(len(ids))


@njit(cache=True)
def _fixed_width(offsets, data, out):
    """Row i of out [N, width] uint8 = the bytes data[offsets[i]:offsets[i + 1]] (the rest left as it is)."""
    for i in range(out.shape[0]):
        start = offsets[i]
        for j in range(offsets[i + 1] - start):
            out[i, j] = data[start + j]
