"""``pregel plot``: pictures of result files and timelines, with matplotlib.

* a ``pregel run`` / ``pregel infer`` result (``/stats/per_superstep``): compute and communication
  seconds per rank for every superstep (layer) as stacked bars, and the per-rank balance of edges,
  messages and bytes (each rank's share of the mean, the imbalance max/mean in the legend);
* a ``pregel train`` result (``/metrics/loss``, ``/metrics/psnr_steps``, ``/metrics/psnr``): training
  loss and held-out PSNR against steps, plus per-rank compute/comm/wait seconds when the file has
  ``/metrics/per_rank`` (a compound table with those fields, one row per rank, or a [ranks, 3] array
  whose ``fields`` attribute names the columns);
* a ``pregel simulate`` result (``/gpus``, ``/steps_per_second/{mode}``): steps/s against GPUs and
  each mode's speed-up over grendel (else barrier), one line per mode, dashed the ceiling no schedule
  can pass, and as crosses Grendel-GS's published runs (``/published_grendel``) when the file has them;
* Chrome-trace JSON files (``traceEvents`` with ``ph = "X"``, ``tid`` = rank, ``cat`` or else ``name`` the kind):
  a Gantt chart with ranks as rows and a colour per kind; several traces are stacked on one time axis.
"""

import json
import os

import h5py
import numpy as np

from pregel.errors import InputError

KIND_COLOURS = {"compute": "tab:blue", "send": "tab:orange", "recv": "tab:green", "wait": "tab:red",
                "barrier": "tab:gray"}
RANK_TIMES = ("compute_seconds", "comm_seconds", "wait_seconds")
DPI = 100


#: file extension of ``--out`` -> the format matplotlib writes
FORMATS = {".png": "png", ".pdf": "pdf", ".svg": "svg", ".jpg": "jpeg", ".jpeg": "jpeg"}


def plot(paths: list, out, labels: list | None = None) -> str:
    """Draw ``paths`` (one result .h5, or one or more trace .json) to ``out``, in the format its extension
    names (``FORMATS``); returns the plot's kind."""
    import matplotlib

    extension = os.path.splitext(os.fspath(out))[1].lower()
    if extension not in FORMATS:
        raise InputError.at(out, None, f"cannot tell the format from the extension {extension or '(none)'!r}: "
                                       f"use one of {', '.join(FORMATS)}")
    matplotlib.use("Agg")
    for path in paths:
        if not os.path.isfile(path):
            raise InputError.at(path, None, "no such file")
    if labels is not None and len(labels) != len(paths):
        raise InputError(f"`labels` has {len(labels)} names for {len(paths)} files")
    if all(str(p).endswith(".json") for p in paths):
        fig, kind = _gantt([_read_trace(p) for p in paths], labels or [os.path.basename(p) for p in paths]), "trace"
    elif len(paths) == 1:
        fig, kind = _result_figure(paths[0])
    else:
        raise InputError("plot one result file, or one or more trace .json files")
    from pregel.atomic import atomic_output

    with atomic_output(out, extension) as temp:
        fig.savefig(temp, dpi=DPI, format=FORMATS[extension])
    import matplotlib.pyplot as plt

    plt.close(fig)
    return kind


def _result_figure(path):
    try:
        f = h5py.File(path, "r")
    except OSError as err:
        raise InputError.at(path, None, f"cannot be opened as HDF5 ({err})") from None
    with f:
        if "stats/per_superstep" in f:
            table = f["stats/per_superstep"][()]
            fields = [str(v) for v in f["stats/per_superstep"].attrs["fields"]]
            algorithm = str(f.attrs.get("algorithm", ""))
            return _run_figure(table, fields, algorithm, "layer" if algorithm == "gnn" else "superstep"), "run"
        if "gpus" in f and "steps_per_second" in f:
            curves = {m: f[f"steps_per_second/{m}"][()] for m in f["steps_per_second"]}
            if "ceiling_steps_per_second" in f:
                curves["ceiling (any schedule)"] = f["ceiling_steps_per_second"][()]
            title = f"{f.attrs.get('layout', '')}, {int(f.attrs.get('gaussians', 0)):,} Gaussians, " \
                    f"{f.attrs.get('profile_name', '')}"
            published = ((f["published_grendel/gpus"][()], f["published_grendel/steps_per_second"][()])
                         if "published_grendel" in f else None)
            return _scaling_figure(f["gpus"][()], curves, title, published), "simulate"
        if "metrics/loss" in f:
            metrics = {name: f[f"metrics/{name}"] for name in f["metrics"]}
            per_rank = _per_rank(path, metrics.get("per_rank"))
            values = {k: v[()] for k, v in metrics.items() if k != "per_rank"}
            return _train_figure(path, values, per_rank), "train"
    raise InputError.at(path, None, "neither a run/infer result (/stats/per_superstep) nor a train "
                        "result (/metrics/loss)")


def _scaling_figure(gpus: np.ndarray, curves: dict, title: str, published=None):
    """A ``pregel simulate`` result: steps/s against GPUs, and each mode's speed-up over grendel when
    simulated, else over barrier. gpus: [n]; curves: mode -> [n] steps per second (a name starting with
    'ceiling' is drawn dashed); published: (GPUs [k], steps/s [k]) of Grendel-GS's published runs, drawn
    as crosses on the same axes."""
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
    base = "grendel" if "grendel" in curves else "barrier" if "barrier" in curves else None
    for mode, speed in curves.items():
        style = dict(linestyle="--", color="grey") if mode.startswith("ceiling") else dict(marker="o")
        left.plot(gpus, speed, label=mode, **style)
        if base:
            right.plot(gpus, speed / curves[base], label=mode, **style)
    ticks = np.asarray(gpus)
    if published is not None:
        left.plot(published[0], published[1], "kx", markersize=9, label="Grendel-GS published")
        ticks = np.union1d(ticks, published[0])
    for ax, label in ((left, "steps / s (batch = GPUs)"), (right, f"speed-up over {base}")):
        ax.set_xscale("log", base=2)
        ax.set_xticks(ticks, [str(g) for g in ticks])
        ax.set_xlabel("GPUs")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def _run_figure(table: np.ndarray, fields: list, title: str, unit: str):
    """table: [ranks, supersteps, fields] counters named by ``fields``."""
    import matplotlib.pyplot as plt

    ranks, steps, _ = table.shape
    col = {name: table[:, :, fields.index(name)] for name in fields}
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4), gridspec_kw={"width_ratios": [3, 2]})
    width = 0.8 / ranks
    x = np.arange(steps)
    for r in range(ranks):
        pos = x - 0.4 + width * (r + 0.5)
        left.bar(pos, col["compute_seconds"][r], width, color="tab:blue", label="compute" if r == 0 else None)
        left.bar(pos, col["comm_seconds"][r], width, bottom=col["compute_seconds"][r], color="tab:orange",
                 label="communication" if r == 0 else None)
    left.set(xlabel=f"{unit} (one bar per rank, ranks 0..{ranks - 1})", ylabel="seconds",
             title=f"{title}: time per {unit} and rank")
    left.legend()
    balance = [("edges_processed", "edges"), ("messages_sent", "messages"), ("bytes_sent", "bytes")]
    width = 0.8 / len(balance)
    for i, (name, label) in enumerate(balance):
        per_rank = col[name].sum(axis=1)
        mean = per_rank.mean()
        share = per_rank / mean if mean > 0 else np.ones(ranks)
        right.bar(np.arange(ranks) - 0.4 + width * (i + 0.5), share, width,
                  label=f"{label} (max/mean {share.max():.2f})")
    right.axhline(1.0, color="black", linewidth=0.8)
    right.set(xlabel="rank", ylabel="share of the mean", title="per-rank balance", xticks=np.arange(ranks))
    right.legend(fontsize="small")
    fig.tight_layout()
    return fig


def _per_rank(path, dataset):
    """{field: [ranks]} of /metrics/per_rank, or None."""
    if dataset is None:
        return None
    data = dataset[()]
    if data.dtype.names:
        names = data.dtype.names
        columns = {name: np.asarray(data[name], float) for name in names}
    else:
        names = [str(v) for v in dataset.attrs.get("fields", dataset.file.attrs.get("per_rank_fields", RANK_TIMES))]
        if data.ndim != 2 or data.shape[1] != len(names):
            raise InputError.at(path, "/metrics/per_rank", f"shape {list(data.shape)} does not match fields {names}")
        columns = dict(zip(names, np.asarray(data, float).T))
    missing = [name for name in RANK_TIMES if name not in columns]
    if missing:
        raise InputError.at(path, "/metrics/per_rank", f"missing columns {', '.join(missing)}")
    return columns


def _train_figure(path, metrics: dict, per_rank):
    import matplotlib.pyplot as plt

    loss = np.asarray(metrics["loss"], float)
    panels = 3 if per_rank is not None else 2
    fig, axes = plt.subplots(1, panels, figsize=(5 * panels, 4))
    steps = np.arange(1, len(loss) + 1)
    axes[0].plot(steps, loss, color="tab:blue", alpha=0.3, linewidth=0.8, label="per step")
    window = max(1, len(loss) // 50)
    smooth = np.convolve(loss, np.ones(window) / window, mode="valid")
    axes[0].plot(steps[window - 1:], smooth, color="tab:blue", label=f"mean of {window}")
    axes[0].set(xlabel="step", ylabel="training loss", title="loss", yscale="log")
    axes[0].legend()
    if "psnr" in metrics and "psnr_steps" in metrics:
        axes[1].plot(metrics["psnr_steps"], metrics["psnr"], "o-", color="tab:green")
    axes[1].set(xlabel="step", ylabel="PSNR (dB)", title="held-out PSNR")
    if per_rank is not None:
        ranks = np.arange(len(per_rank["compute_seconds"]))
        bottom = np.zeros(len(ranks))
        for name, colour in zip(RANK_TIMES, ("tab:blue", "tab:orange", "tab:red")):
            axes[2].bar(ranks, per_rank[name], bottom=bottom, color=colour, label=name.replace("_seconds", ""))
            bottom += per_rank[name]
        axes[2].set(xlabel="rank", ylabel="seconds", title="per-rank time", xticks=ranks)
        axes[2].legend()
    fig.suptitle(os.path.basename(path))
    fig.tight_layout()
    return fig


def _read_trace(path) -> dict:
    """{rank: [(start s, duration s, kind)]} of a Chrome trace's complete ('X') events."""
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise InputError.at(path, None, f"not JSON ({err})") from None
    events = doc.get("traceEvents") if isinstance(doc, dict) else doc
    if not isinstance(events, list):
        raise InputError.at(path, None, "no traceEvents list: not a Chrome trace")
    rows = {}
    try:
        for ev in events:
            if ev.get("ph") == "X":
                rows.setdefault(int(ev["tid"]), []).append((float(ev["ts"]) * 1e-6, float(ev["dur"]) * 1e-6,
                                                            str(ev.get("cat", ev.get("name", "?")))))
    except (KeyError, TypeError, ValueError, AttributeError):
        raise InputError.at(path, None, "an 'X' event lacks a numeric tid, ts or dur") from None
    if not rows:
        raise InputError.at(path, None, "has no complete ('X') events")
    return rows


def _gantt(traces: list, labels: list):
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    heights = [len(t) for t in traces]
    fig, axes = plt.subplots(len(traces), 1, figsize=(10, 1.2 + 0.45 * sum(heights) + 0.6 * len(traces)),
                             sharex=True, squeeze=False, gridspec_kw={"height_ratios": heights})
    origin = min(start for t in traces for row in t.values() for start, _, _ in row)
    kinds = set()
    for ax, trace, label in zip(axes[:, 0], traces, labels):
        for rank, row in trace.items():
            for kind in {k for _, _, k in row}:
                spans = [(start - origin, dur) for start, dur, k in row if k == kind]
                ax.broken_barh(spans, (rank - 0.4, 0.8), facecolors=KIND_COLOURS.get(kind, "tab:purple"))
                kinds.add(kind)
        ax.set(ylabel="rank", title=label, yticks=sorted(trace))
        ax.invert_yaxis()
    axes[-1, 0].set_xlabel("seconds")
    handles = [Patch(color=KIND_COLOURS.get(k, "tab:purple"), label=k) for k in sorted(kinds)]
    fig.legend(handles=handles, loc="upper right", ncol=len(handles), fontsize="small")
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    return fig
