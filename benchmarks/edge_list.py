"""Edge-list parsing speed: the streaming parser (``pregel.edge_list``) against ``np.loadtxt``.

Writes ``--loadtxt-lines`` random edges (``src dst``, ids below 10^7) to a temporary file and
repeats them to make a file of ``--repeat`` times as many lines; ``np.loadtxt`` parses the small
file (it holds the whole table in memory), the streaming parser the large one. Prints lines/s.
"""
import argparse
import os
import tempfile
import time

import numpy as np

from pregel.edge_list import stream_edge_list


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--loadtxt-lines", type=int, default=2_000_000)
    parser.add_argument("--repeat", type=int, default=10)
    args = parser.parse_args()
    args.lines = args.loadtxt_lines * args.repeat
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 10**7, size=(args.loadtxt_lines, 2))
    with tempfile.TemporaryDirectory() as tmp:
        big, small = os.path.join(tmp, "big.txt"), os.path.join(tmp, "small.txt")
        np.savetxt(small, ids, fmt="%d")
        with open(small, "rb") as f:
            text = f.read()
        with open(big, "wb") as f:
            for _ in range(args.repeat):
                f.write(text)
        stream_edge_list(small)  # compile
        rows = [("method", "lines", "seconds", "lines/s")]
        started = time.perf_counter()
        src, _, _ = stream_edge_list(big)
        seconds = time.perf_counter() - started
        assert len(src) == args.lines
        rows.append(("pregel.edge_list (streamed)", args.lines, seconds, args.lines / seconds))
        started = time.perf_counter()
        table = np.loadtxt(small, dtype=np.int64, ndmin=2)
        seconds = time.perf_counter() - started
        assert len(table) == args.loadtxt_lines
        rows.append(("np.loadtxt", args.loadtxt_lines, seconds, args.loadtxt_lines / seconds))
        size = os.path.getsize(big)
    print(f"file: {args.lines:,} lines, {size / 2**20:.0f} MiB")
    print("| " + " | ".join(rows[0]) + " |\n| --- | --- | --- | --- |")
    for name, lines, seconds, rate in rows[1:]:
        print(f"| {name} | {lines:,} | {seconds:.2f} | {rate:.3g} |")


if __name__ == "__main__":
    main()
