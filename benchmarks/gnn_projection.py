"""InferTurbo-scale projection, on paper: a 2-layer SAGE over 10 billion vertices / 100 billion edges.

Arithmetic only (nothing runs): from per-core rates measured on this machine (defaults: the figures
in the README's "Measured performance", 1M vertices / 10M edges / 64 features, one core) and the
exchange model below, prints a Markdown table of the time of a whole job on clusters of 16 to
1,024 nodes of 64 cores (one rank per core) with 100 Gb/s links. Assumptions (all arguments):

* compute: each rank runs both layers at the measured per-core rates (gather edges/s at the message
  width, dense transforms vertices/s), on E/R edges and N/R vertices (balanced partitions);
* ghosts: a rank's ghost rows are the distinct sources of its in-edges that other ranks own; with
  sources spread over the whole graph (range partitions of a graph without locality, as the
  generated power-law graph) that is N (1 - exp(-(E/R) / N)) per rank. At 1M / 10M this formula gives
  496k rows at P = 2 and 643k at P = 3 where ``benchmarks/exchange.py`` measured 450k and 535k (the
  hubs concentrate the sources), so it errs on the high side;
* network: each node receives its ranks' ghost rows from other nodes (fraction 1 - 1/nodes) once per
  layer (64 floats in layer 1, 16 in layer 2: SAGE applies W_l before sending when that narrows
  the rows), over one 100 Gb/s link at ``--efficiency`` of its rate, not overlapped with compute;
  rows between ranks of one node move at the measured shared-memory rate;
* load: the graph file (features float32, int32/int64 ids) read at ``--storage-gbs`` aggregate from a
  parallel file system, plus the measured per-core load rate (slicing and the in-edge CSR);
  writing the 16-wide output at the same aggregate rate;
* memory per node: measured engine peak bytes per edge (P = 1) plus 4 bytes x 64 per ghost row; a
  configuration needs it below ``--node-memory-gb`` (default 512) to finish at all (no spilling).

    python benchmarks/gnn_projection.py [--gather64 31.0e6 ...]
"""

import argparse
import math

GB = 1e9


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--vertices", type=float, default=10e9)
    p.add_argument("--edges", type=float, default=100e9)
    p.add_argument("--features", type=int, default=64)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--classes", type=int, default=16)
    p.add_argument("--cores", type=int, default=64, help="cores (ranks) per node")
    p.add_argument("--link-gbit", type=float, default=100.0)
    p.add_argument("--efficiency", type=float, default=0.7, help="fraction of the link rate reached")
    p.add_argument("--storage-gbs", type=float, default=100.0, help="aggregate file system GB/s")
    p.add_argument("--gather64", type=float, default=31.0e6, help="edges/s per core, 64-wide mean gather")
    p.add_argument("--gather16", type=float, default=53.8e6, help="edges/s per core, 16-wide mean gather")
    p.add_argument("--dense64", type=float, default=9.1e6, help="vertices/s per core, 64 -> 64 addmm")
    p.add_argument("--dense16", type=float, default=23.9e6, help="vertices/s per core, 64 -> 16 addmm")
    p.add_argument("--load", type=float, default=0.23 / 10e6, help="seconds per edge per core to load")
    p.add_argument("--shm-gbs", type=float, default=2.2, help="exchange GB/s per rank within a node")
    p.add_argument("--bytes-per-edge", type=float, default=147.0, help="engine peak RSS per edge, P = 1")
    p.add_argument("--node-memory-gb", type=float, default=512.0, help="memory of one node")
    args = p.parse_args()

    n, e = args.vertices, args.edges
    file_bytes = n * args.features * 4 + e * 8
    print(f"2-layer SAGE {args.features}-{args.hidden}-{args.classes}, {n:.0e} vertices, {e:.0e} edges, "
          f"{args.cores} cores per node, {args.link_gbit:.0f} Gb/s at {args.efficiency:.0%}, "
          f"file system {args.storage_gbs:.0f} GB/s, {args.node_memory_gb:.0f} GB per node\n")
    print("| nodes | ranks | edges per rank | ghost rows per rank | read + write s | load s | compute s "
          "| network s | total s | memory per node GB | within 2 h |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for nodes in (16, 32, 64, 128, 256, 512, 1024):
        ranks = nodes * args.cores
        e_rank, n_rank = e / ranks, n / ranks
        ghosts = n * (1 - math.exp(-e_rank / n))
        compute = (e_rank / args.gather64 + 2 * n_rank / args.dense64          # layer 1: gather, W_l and W_r
                   + e_rank / args.gather16 + 2 * n_rank / args.dense16)       # layer 2: W_l first, W_r
        row_bytes = 4 * (args.hidden + args.classes)  # layer 1 rows (64 wide) + layer 2 rows (16 wide)
        off_node = 1 - 1 / nodes
        link = args.link_gbit / 8 * GB * args.efficiency
        network = (args.cores * ghosts * row_bytes * off_node / link
                   + ghosts * row_bytes * (1 - off_node) / (args.shm_gbs * GB))
        io = (file_bytes + n * args.classes * 4) / (args.storage_gbs * GB)
        load = e_rank * args.load
        total = io + load + compute + network
        memory = args.cores * (e_rank * args.bytes_per_edge + ghosts * 4 * args.features) / GB
        verdict = ("no: memory" if memory > args.node_memory_gb else "yes" if total < 7200 else "no: time")
        print(f"| {nodes:,} | {ranks:,} | {e_rank / 1e6:,.1f} M | {ghosts / 1e6:,.1f} M | {io:,.0f} | {load:,.1f} "
              f"| {compute:,.1f} | {network:,.0f} | {total:,.0f} | {memory:,.0f} | {verdict} |")


if __name__ == "__main__":
    main()
