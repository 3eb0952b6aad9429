"""Per-superstep statistics on every rank, and their summary across ranks."""

from dataclasses import asdict, dataclass

import numpy as np

#: The counters each rank records per superstep, in the order of ``SuperstepStats``.
FIELDS = ("compute_seconds", "comm_seconds", "messages_sent", "messages_received",
          "bytes_sent", "bytes_received", "active", "edges_processed")


@dataclass
class SuperstepStats:
    """One rank's counters for one superstep (messages and bytes exclude the rank itself)."""

    compute_seconds: float = 0.0
    comm_seconds: float = 0.0
    messages_sent: int = 0
    messages_received: int = 0
    bytes_sent: int = 0
    bytes_received: int = 0
    active: int = 0
    edges_processed: int = 0  # every edge of the rank, or the edges a superstep on a small front read

    def as_row(self) -> list[float]:
        """The counters as floats [fields], in ``FIELDS`` order."""
        return [float(v) for v in asdict(self).values()]

    @classmethod
    def from_row(cls, row) -> "SuperstepStats":
        """Inverse of ``as_row`` (row: [fields])."""
        return cls(*(float(v) if isinstance(getattr(cls, name), float) else int(v)
                     for name, v in zip(FIELDS, row)))


def summarize(table: np.ndarray) -> dict:
    """Summary of a [ranks, supersteps, fields] array of counters.

    For each field: the total over ranks and supersteps, the per-rank totals, and the imbalance
    max/mean of the per-rank totals (1.0 is perfect balance). Returned as a flat dict of
    ``{field}_total``, ``{field}_per_rank`` and ``{field}_imbalance``.
    """
    per_rank = table.sum(axis=1)  # [ranks, fields]
    summary = {}
    for i, name in enumerate(FIELDS):
        column = per_rank[:, i]
        mean = column.mean() if len(column) else 0.0
        summary[f"{name}_total"] = float(column.sum())
        summary[f"{name}_per_rank"] = column.tolist()
        summary[f"{name}_imbalance"] = float(column.max() / mean) if mean > 0 else 1.0
    return summary


def format_table(table: np.ndarray) -> str:
    """Per-superstep totals over ranks (one line per superstep) plus the per-rank balance of ``table``
    [ranks, supersteps, fields] (``FIELDS``)."""
    lines = ["superstep  compute_s  comm_s(max)  messages   bytes        active     edges"]
    for s in range(table.shape[1]):
        step = table[:, s, :]
        lines.append(f"{s:>9}  {step[:, 0].max():>9.4f}  {step[:, 1].max():>11.4f}  "
                     f"{int(step[:, 2].sum()):>9,}  {int(step[:, 4].sum()):>11,}  "
                     f"{int(step[:, 6].sum()):>9,}  {int(step[:, 7].sum()):>9,}")
    summary = summarize(table)
    lines.append("per rank:  " + "  ".join(
        f"{name.replace('_', ' ')} [{', '.join(fmt.format(v) for v in summary[name + '_per_rank'])}] "
        f"(imbalance {summary[name + '_imbalance']:.2f})"
        for name, fmt in (("edges_processed", "{:,.0f}"), ("messages_sent", "{:,.0f}"),
                          ("compute_seconds", "{:.3f}"))))
    return "\n".join(lines)
