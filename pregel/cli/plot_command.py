"""``pregel plot``: a result file or Chrome-trace timelines drawn to a picture (``pregel.plot``)."""


def add_plot(sub) -> None:
    """Register ``pregel plot`` and its flags on the subparsers ``sub``."""
    p = sub.add_parser("plot", help="plot a run/infer/train result or Chrome-trace timelines to a PNG",
                       description="RESULT.h5 of pregel run/infer: per-superstep compute and communication "
                                   "seconds per rank and the per-rank balance; of pregel train: loss and "
                                   "held-out PSNR against steps; of pregel simulate: scaling curves. "
                                   "TRACE.json files: a Gantt chart per trace.")
    p.add_argument("files", nargs="+", metavar="FILE", help="one result .h5, or one or more trace .json")
    p.add_argument("--out", required=True, help="picture file: .png, .pdf, .svg or .jpg")
    p.add_argument("--labels", default=None, help="comma-separated titles for the traces")
    p.set_defaults(run=_run_plot)


def _run_plot(args) -> None:
    from pregel.plot import plot

    kind = plot(args.files, args.out, labels=args.labels.split(",") if args.labels else None)
    print(f"wrote {args.out}: {kind} plot of {', '.join(args.files)}")
