"""`pregel inspect`: validate a graph file and describe it (sizes, degrees, hubs, attributes)."""

from dataclasses import dataclass

import numpy as np

from pregel.graph_io import GraphHeader, GraphSlice, scan_graph


@dataclass
class GraphSummary:
    """Statistics gathered in one validating pass over a graph file."""

    header: GraphHeader
    out_degree: np.ndarray   # [N] int64
    in_degree: np.ndarray    # [N] int64
    self_loops: int
    weight_range: tuple[float, float] | None

    def top(self, degree: np.ndarray, k: int) -> list[tuple[int, int]]:
        """The ``k`` vertices of largest ``degree`` ([N] int64, per vertex) as (vertex, degree), largest first
        (ties: the lower vertex first)."""
        k = min(k, len(degree))
        best = np.argpartition(degree, len(degree) - k)[len(degree) - k:] if k else np.empty(0, int)
        best = best[np.lexsort((best, -degree[best]))]
        return [(int(v), int(degree[v])) for v in best]


def summarize(path) -> GraphSummary:
    """Validate the whole file at ``path`` chunk by chunk and collect its degree statistics."""
    out_parts, in_degree, loops, w_lo, w_hi = [], None, 0, np.inf, -np.inf

    def visit(part: GraphSlice) -> None:
        nonlocal in_degree, loops, w_lo, w_hi
        n = part.header.num_nodes
        if in_degree is None:
            in_degree = np.zeros(n, dtype=np.int64)
        out_parts.append(np.diff(part.indptr))
        in_degree += np.bincount(part.indices, minlength=n)
        sources = np.repeat(np.arange(part.start, part.stop), np.diff(part.indptr))
        loops += int(np.count_nonzero(sources == part.indices))
        if part.weights is not None and part.weights.size:
            w_lo, w_hi = min(w_lo, float(part.weights.min())), max(w_hi, float(part.weights.max()))

    header = scan_graph(path, visit)
    weight_range = (w_lo, w_hi) if header.has_weights and header.num_edges else None
    out_degree = np.concatenate(out_parts) if out_parts else np.zeros(0, dtype=np.int64)
    if in_degree is None:
        in_degree = np.zeros(0, dtype=np.int64)
    return GraphSummary(header, out_degree, in_degree, loops, weight_range)


def format_summary(summary: GraphSummary, top: int = 5) -> str:
    """A human-readable report of ``summary``."""
    h = summary.header
    n, e = h.num_nodes, h.num_edges
    lines = [
        f"file        {h.path}",
        f"vertices    {n:,}",
        f"edges       {e:,} ({'directed' if h.directed else 'undirected, both directions stored'})",
        f"self-loops  {summary.self_loops:,}",
    ]
    if n:
        for name, degree in (("out-degree", summary.out_degree), ("in-degree", summary.in_degree)):
            hubs = ", ".join(f"{v} ({d:,})" for v, d in summary.top(degree, top))
            lines.append(f"{name:<11} mean {degree.mean():.2f}, max {degree.max():,}, "
                         f"zero for {np.count_nonzero(degree == 0):,} vertices; top: {hubs}")
    if summary.weight_range is not None:
        lines.append(f"weights     float32, range [{summary.weight_range[0]:.6g}, {summary.weight_range[1]:.6g}]")
    else:
        lines.append("weights     none")
    lines.append(f"features    {'float32 [N, %d]' % h.num_features if h.num_features else 'none'}")
    lines.append(f"labels      {'int64 [N]' if h.has_labels else 'none'}")
    return "\n".join(lines)
