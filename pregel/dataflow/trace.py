"""A traced run's spans as a Chrome trace file (``write_chrome_trace``), to look at in Perfetto or
chrome://tracing."""

import json

from pregel.atomic import atomic_output


def write_chrome_trace(path, spans_per_rank: list, labels: dict | None = None) -> None:
    """Write the ``Span`` lists of every rank (``spans_per_rank[r]``) as a Chrome trace JSON file.

    One thread per rank ("rank r"), one complete event per span (µs); args carry the vertex and,
    for vertices in ``labels``, its label. Opens in Perfetto (ui.perfetto.dev) or chrome://tracing.
    """
    labels = labels or {}
    events = [{"name": "thread_name", "ph": "M", "pid": 0, "tid": r, "args": {"name": f"rank {r}"}}
              for r in range(len(spans_per_rank))]
    for r, spans in enumerate(spans_per_rank):
        for kind, start, end, vertex in spans:
            args = {"vertex": int(vertex)}
            if vertex in labels:
                args["label"] = str(labels[vertex])
            events.append({"name": f"{kind} {labels[vertex]}" if vertex in labels else kind, "cat": kind,
                           "ph": "X", "pid": 0, "tid": r, "ts": start * 1e6, "dur": (end - start) * 1e6,
                           "args": args})
    with atomic_output(path, ".json") as temp, open(temp, "w") as f:
        json.dump({"traceEvents": events, "displayTimeUnit": "ms"}, f)
