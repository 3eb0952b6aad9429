"""`pregel convert` of a text edge list, of a Parquet edge table and of Matrix Market files, against pyarrow
+ scipy scripts doing the same jobs, whole commands.

Writes the edges of ``--graph`` (a graph file, e.g. ``pregel generate --kind powerlaw --nodes 10000000
--avg-degree 10``) as a whitespace edge list twice, in the file's order and shuffled, then converts each
back with ``pregel convert`` and with a script that reads it with pyarrow's CSV reader (its default
threads), builds the CSR with scipy (rows sorted by destination, as ``pregel convert`` writes them)
and writes it with h5py. Each run is a separate process, timed from outside, with its peak RSS from
``/usr/bin/time``; runs alternate, and every output's CSR must equal the input graph's (the edges'
order within a row included: parallel edges are the only ties, and they are equal). ``--baseline
DIR`` also runs ``pregel convert`` from another checkout (``PYTHONPATH=DIR``), e.g. the code before a
change. The Parquet table holds the shuffled edges (int64 columns ``s``, ``d``); `pregel convert
edges.parquet --src s --dst d` numbers the ids the edges use in ascending order, and so does its peer
(``np.unique(..., return_inverse=True)``), whose output ours must equal. The same table with string ids
(``user-<id>``) is numbered by both in ascending order of the strings: its peer encodes both columns with
pyarrow's ``dictionary_encode`` and sorts the distinct strings. The Matrix Market files hold the
edges in the file's order as a ``pattern`` matrix, and shuffled with random ``real`` values; their peer reads
them with ``scipy.io.mmread`` (its default threads), builds the CSR with ``tocsr`` and writes it with h5py
(the values as float32, as ``pregel convert`` keeps weights), and ours must equal it. Prints a Markdown
table of medians.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

import h5py
import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

PEER = """
import sys, h5py, numpy as np, pyarrow.csv as pc, scipy.sparse as sp
table = pc.read_csv(sys.argv[1], read_options=pc.ReadOptions(column_names=["s", "d"]),
                    parse_options=pc.ParseOptions(delimiter=" "),
                    convert_options=pc.ConvertOptions(column_types={"s": "int64", "d": "int64"}))
src, dst = table.column("s").to_numpy(), table.column("d").to_numpy()
del table
n = int(max(src.max(), dst.max())) + 1
csr = sp.csr_matrix((np.ones(len(src), np.int8), (src, dst)), shape=(n, n))
del src, dst
csr.sort_indices()
with h5py.File(sys.argv[2], "w") as f:
    f["graph/indptr"] = csr.indptr.astype(np.int64)
    f["graph/indices"] = csr.indices
"""


#: the tail of both table peers: the CSR of the edges' numbers ``codes`` [2E] (sources, then destinations),
#: written with the original ``ids``
CSR_OF_CODES = """
e = len(codes) // 2
csr = sp.csr_matrix((np.ones(e, np.int8), (codes[:e], codes[e:])), shape=(len(ids), len(ids)))
del codes
csr.sort_indices()
with h5py.File(sys.argv[2], "w") as f:
    f["graph/indptr"] = csr.indptr.astype(np.int64)
    f["graph/indices"] = csr.indices
    f["nodes/original_ids"] = ids
"""

TABLE_PEER = """
import sys, h5py, numpy as np, pyarrow.parquet as pq, scipy.sparse as sp
table = pq.read_table(sys.argv[1], columns=["s", "d"])
ends = np.concatenate([table.column("s").to_numpy(), table.column("d").to_numpy()])
del table
ids, codes = np.unique(ends, return_inverse=True)
del ends
""" + CSR_OF_CODES

STRING_TABLE_PEER = """
import sys, h5py, numpy as np, pyarrow as pa, pyarrow.compute as pc, pyarrow.parquet as pq, scipy.sparse as sp
table = pq.read_table(sys.argv[1], columns=["s", "d"])
encoded = pa.chunked_array(table.column("s").chunks + table.column("d").chunks).dictionary_encode()
del table
distinct = encoded.chunks[-1].dictionary
assert all(chunk.dictionary.equals(distinct) for chunk in encoded.chunks)  # one shared (unify_dictionaries: slow)
order = pc.sort_indices(distinct).to_numpy()
number = np.empty(len(order), np.int32)
number[order] = np.arange(len(order), dtype=np.int32)
codes = number[np.concatenate([chunk.indices.to_numpy() for chunk in encoded.chunks])]
del encoded, number
ids = np.array(distinct.take(order).to_pylist(), dtype=bytes)
""" + CSR_OF_CODES


def write_edge_list(path: str, src: np.ndarray, dst: np.ndarray) -> None:
    """``src dst`` per line (pyarrow's CSV writer: no header, a space between the columns)."""
    pacsv.write_csv(pa.table({"s": src, "d": dst}), path,
                    pacsv.WriteOptions(include_header=False, delimiter=" "))


def timed(command: list, env: dict) -> tuple[float, float]:
    """(wall seconds, peak RSS MB) of ``command`` run as its own process, in the temporary folder (``python
    -m`` puts its working folder first on the path, before ``PYTHONPATH``'s checkout)."""
    with tempfile.NamedTemporaryFile("r", suffix=".time") as report:
        started = time.perf_counter()
        subprocess.run(["/usr/bin/time", "-o", report.name, "-f", "peak_kb %M", *command], env=env, check=True,
                       stdout=subprocess.DEVNULL, cwd=tempfile.gettempdir())
        seconds = time.perf_counter() - started
        peak = [int(line.split()[1]) for line in open(report.name) if re.fullmatch(r"peak_kb \d+\n?", line)]
    return seconds, peak[0] / 1024


MATRIX_MARKET_PEER = """
import sys, h5py, numpy as np, scipy.io, scipy.sparse as sp
csr = sp.csr_matrix(scipy.io.mmread(sys.argv[1]))
csr.sort_indices()
with h5py.File(sys.argv[2], "w") as f:
    f["graph/indptr"] = csr.indptr.astype(np.int64)
    f["graph/indices"] = csr.indices
    if scipy.io.mminfo(sys.argv[1])[4] != "pattern":
        f["graph/weights"] = csr.data.astype(np.float32)
"""


def summary(input_name: str, results: dict, size: float) -> list:
    """Table rows (input, method, median, low, high, peak MB, input GiB) of {method: [(seconds, MB)]}."""
    rows = []
    for name, runs in results.items():
        seconds, peaks = [r[0] for r in runs], [r[1] for r in runs]
        rows.append((input_name, name, np.median(seconds), min(seconds), max(seconds), max(peaks), size))
    return rows


def convert_table(tmp: str, src: np.ndarray, dst: np.ndarray, methods: dict, env: dict, rounds: int,
                  string_ids: bool = False) -> list:
    """Rows of `summary` for the shuffled edges as a Parquet table (with ``string_ids``, each id ``v`` as the
    string ``user-v``), converted by each ``pregel convert`` of ``methods`` and by ``TABLE_PEER`` (or
    ``STRING_TABLE_PEER``); every output must equal the peer's."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    table = os.path.join(tmp, "edges.parquet")
    order = np.random.default_rng(0).permutation(len(src))
    kind = pa.string() if string_ids else pa.int64()
    with pq.ParquetWriter(table, pa.schema([("s", kind), ("d", kind)])) as writer:
        for start in range(0, len(order), 1 << 22):  # a block at a time: strings of 100M ids take GBs
            block = order[start:start + (1 << 22)]
            ends = [pa.array(src[block]), pa.array(dst[block].astype(np.int64))]
            if string_ids:
                ends = [pc.binary_join_element_wise("user-", end.cast(pa.string()), "") for end in ends]
            writer.write_table(pa.table({"s": ends[0], "d": ends[1]}))
    del order
    runners = {name: (command + [table, "--src", "s", "--dst", "d", "--out"], tree)
               for name, (command, tree) in methods.items() if "pregel" in name}
    peer = ("pyarrow + scipy script (dictionary_encode)", STRING_TABLE_PEER) if string_ids else \
        ("pyarrow + numpy + scipy script", TABLE_PEER)
    runners[peer[0]] = (["-c", peer[1], table], methods["pyarrow + scipy script"][1])
    results = run_alike(tmp, runners, env, rounds, ("graph/indptr", "graph/indices", "nodes/original_ids"))
    name = "Parquet table, string ids, shuffled" if string_ids else "Parquet table, shuffled"
    return summary(name, results, os.path.getsize(table) / 2**30)


def run_alike(tmp: str, runners: dict, env: dict, rounds: int, keys: tuple, expected: list | None = None) -> dict:
    """{name: [(seconds, peak MB)]} of ``rounds`` alternating runs of each of ``runners`` ({name: (arguments
    before the output file, PYTHONPATH)}); every output must hold the datasets ``keys`` (those it has) equal
    to ``expected`` (arrays), or when None to the first output's."""
    results = {name: [] for name in runners}
    for _ in range(rounds):
        for name, (command, tree) in runners.items():
            out = os.path.join(tmp, "out.h5")
            if os.path.exists(out):
                os.remove(out)
            results[name].append(timed([sys.executable, *command, out], dict(env, PYTHONPATH=tree)))
            with h5py.File(out) as f:
                got = [f[key][:] for key in keys if key in f]
            expected = expected if expected is not None else got
            assert len(got) == len(expected) and all(np.array_equal(a, b) for a, b in zip(got, expected)), name
    return results


def convert_matrix_market(tmp: str, src: np.ndarray, dst: np.ndarray, num_nodes: int, methods: dict, env: dict,
                          rounds: int) -> list:
    """Rows of `summary` for the edges as Matrix Market files (a pattern matrix in the file's order, a real
    one shuffled), converted by each ``pregel convert`` of ``methods`` and by ``MATRIX_MARKET_PEER``; every
    output must equal the peer's."""
    import scipy.io
    import scipy.sparse as sp

    rows = []
    for name, field in (("Matrix Market pattern, file order", "pattern"), ("Matrix Market real, shuffled", "real")):
        path = os.path.join(tmp, "edges.mtx")
        rng = np.random.default_rng(0)
        order = np.arange(len(src)) if field == "pattern" else rng.permutation(len(src))
        values = np.ones(len(src)) if field == "pattern" else rng.random(len(src))
        scipy.io.mmwrite(path, sp.coo_matrix((values, (src[order], dst[order])), shape=(num_nodes, num_nodes)),
                         field=field)
        del order, values
        runners = {label: (command + [path, "--out"], tree)
                   for label, (command, tree) in methods.items() if "pregel" in label}
        runners["scipy script"] = (["-c", MATRIX_MARKET_PEER, path], methods["pyarrow + scipy script"][1])
        results = run_alike(tmp, runners, env, rounds, ("graph/indptr", "graph/indices", "graph/weights"))
        rows += summary(name, results, os.path.getsize(path) / 2**30)
        os.remove(path)
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--graph", required=True, help="graph file whose edges are written out")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--baseline", metavar="DIR", help="also run `pregel convert` from this checkout")
    parser.add_argument("--tmp", default=None, help="folder for the edge lists and outputs (default: $TMPDIR)")
    args = parser.parse_args()
    with h5py.File(args.graph) as f:
        indptr, indices = f["graph/indptr"][:], f["graph/indices"][:]
    src = np.repeat(np.arange(len(indptr) - 1, dtype=np.int64), np.diff(indptr))
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1")
    methods = {"pregel convert": (["-m", "pregel.cli", "convert"], here)}
    if args.baseline:
        methods["pregel convert, baseline"] = (["-m", "pregel.cli", "convert"], os.path.abspath(args.baseline))
    methods["pyarrow + scipy script"] = (["-c", PEER], here)
    rows = []
    with tempfile.TemporaryDirectory(dir=args.tmp) as tmp:
        warm = os.path.join(tmp, "warm.txt")  # fills each checkout's numba cache before the timed runs
        write_edge_list(warm, src[:1000], indices[:1000].astype(np.int64))
        for name, (command, tree) in methods.items():
            if "pregel" in name:
                timed([sys.executable, *command, warm, "--out", os.path.join(tmp, "warm.h5"),
                       "--num-nodes", str(len(indptr) - 1)], dict(env, PYTHONPATH=tree))
                os.remove(os.path.join(tmp, "warm.h5"))
        for order_name in ("file order", "shuffled"):
            text = os.path.join(tmp, "edges.txt")
            order = (np.arange(len(src)) if order_name == "file order"
                     else np.random.default_rng(0).permutation(len(src)))
            write_edge_list(text, src[order], indices[order].astype(np.int64))
            del order
            runners = {name: (command + ([text, "--out"] if "pregel" in name else [text]), tree)
                       for name, (command, tree) in methods.items()}
            results = run_alike(tmp, runners, env, args.rounds, ("graph/indptr", "graph/indices"),
                                expected=[indptr, indices])
            size = os.path.getsize(text) / 2**30
            rows += summary(order_name, results, size)
        rows += convert_table(tmp, src, indices, methods, env, args.rounds)
        rows += convert_table(tmp, src, indices, methods, env, args.rounds, string_ids=True)
        rows += convert_matrix_market(tmp, src, indices, len(indptr) - 1, methods, env, args.rounds)
    print(f"{len(indptr) - 1:,} vertices, {len(indices):,} edges, {args.rounds} alternating rounds")
    print("| input | method | wall s (median) | wall s (range) | peak RSS MB | bytes an edge at the peak | input GiB |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for order_name, name, median, low, high, peak, size in rows:
        print(f"| {order_name} | {name} | {median:.2f} | {low:.2f}-{high:.2f} | {peak:,.0f} | "
              f"{peak * 2**20 / len(indices):.1f} | {size:.2f} |")


if __name__ == "__main__":
    main()
