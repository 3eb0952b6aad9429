"""The distributed trainer's settings (``OdinOptions``) and their defaults, the default number of cells
(``default_cells``, which the simulator uses too) and the check of the settings before training
(``check_options``). Kept free of heavy imports, so that the command line and the simulator's config read
their defaults from here."""
from dataclasses import dataclass

from odin_sched.odin.modes import MODES

#: the share of an image's predicted visible Gaussians that it may read stale (odin-fast; ``relax_reads``)
STALE_IMPACT = 0.25
#: the default ``PlanConfig.batches_ahead``: a rank starts an image only once all its images of batches more than
#: this many before it have begun (0: of every earlier batch; docs/simulator-measurements.md, "A rank's images in
#: batch order", has 0-3 measured)
BATCHES_AHEAD = 0
#: the default ``PlanConfig.hold_share``: a rank with nothing else to fire holds an image of a later batch back
#: for at most this share of its mean image's seconds, then starts it (``DataflowPlan.hold_share``;
#: docs/simulator-measurements.md, "A hold that gives up", has 0.05-0.5 measured)
HOLD_SHARE = 0.25


@dataclass
class OdinOptions:
    """The distributed trainer's settings, besides the ``TrainConfig`` it shares with the single-process
    trainer (``pregel train``'s flags of the same names set them)."""

    mode: str = "odin"         # one of MODES (``odin_sched.odin.modes``)
    cells: int | None = None   # default: ``default_cells`` of the initial Gaussians and the ranks
    window: int = 10           # batches per planning window
    timeline: str | None = None       # write a Chrome trace of the run here
    schedule_out: str | None = None   # write the first window's step graph and schedule here
    max_staleness: int = 1     # odin-fast: updates of a low-impact cell an image may miss
    stale_impact: float = STALE_IMPACT  # odin-fast: the largest share of an image's Gaussians read stale
    split_above: int | None = None     # a cell with more Gaussians splits in two at a window end (None: never)
    max_imbalance: float = 1.25        # cells migrate when a rank owns more than this x the mean Gaussians
    send_thread: bool = False  # post the dataflow's messages from a thread beside the compute (``pregel.sends``)
    batches_ahead: int = BATCHES_AHEAD  # a rank starts an image once its images of batches more than this before began
    hold_share: float = HOLD_SHARE  # ... or once it has waited this share of its mean image with nothing to fire

    @property
    def staleness(self) -> int:
        """The staleness bound in force: ``max_staleness`` in odin-fast mode, else 0 (exact)."""
        return self.max_staleness if self.mode == "odin-fast" else 0

    CELLS_PER_RANK = 16  # the fewest cells per rank by default (``default_cells``, which the simulator uses too)

    def resolved_cells(self, size: int, num_gaussians: int) -> int:
        """The number of cells asked for, ``cells`` or else ``default_cells`` (a window uses at most one
        per Gaussian)."""
        return self.cells if self.cells is not None else default_cells(num_gaussians, size)


#: default cells hold about this many initial Gaussians: a cell version sums, Adam-steps and sends all of
#: its cell's rows, however few an image touched (docs/odin-measurements.md, "At real model sizes")
GAUSSIANS_PER_CELL = 8192
#: ... but no more than this many cells per rank: planning and per-cell work grow with the cells
MAX_CELLS_PER_RANK = 512


def default_cells(num_gaussians: int, size: int) -> int:
    """The default number of cells for ``num_gaussians`` initial Gaussians on ``size`` ranks: about
    ``GAUSSIANS_PER_CELL`` a cell (rounded up), at least ``OdinOptions.CELLS_PER_RANK`` and at most
    ``MAX_CELLS_PER_RANK`` per rank."""
    wanted = -(-num_gaussians // GAUSSIANS_PER_CELL)
    return max(OdinOptions.CELLS_PER_RANK * size, min(wanted, MAX_CELLS_PER_RANK * size))


def check_options(options: OdinOptions, size: int, num_gaussians: int, threads: bool = True) -> str | None:
    """A one-line problem with the distributed options, or None; ``threads``: whether MPI runs with
    ``MPI_THREAD_MULTIPLE`` (``pregel.sends.thread_multiple``)."""
    if options.mode not in MODES:
        return f"OdinOptions.mode must be one of {', '.join(MODES)}, got {options.mode!r}"
    if options.max_staleness < 0:
        return f"OdinOptions.max_staleness must be at least 0, got {options.max_staleness}"
    if not 0.0 <= options.stale_impact <= 1.0:
        return f"OdinOptions.stale_impact must be in [0, 1], got {options.stale_impact}"
    if options.split_above is not None and options.split_above < 1:
        return f"OdinOptions.split_above must be at least 1, got {options.split_above}"
    if not options.max_imbalance >= 1.0:
        return f"OdinOptions.max_imbalance must be at least 1, got {options.max_imbalance}"
    if options.window < 1:
        return f"OdinOptions.window must be at least 1, got {options.window}"
    if options.batches_ahead < 0:
        return f"OdinOptions.batches_ahead must be at least 0, got {options.batches_ahead}"
    if not options.hold_share >= 0:
        return f"OdinOptions.hold_share must be at least 0 (inf: never), got {options.hold_share}"
    if options.send_thread and options.mode == "barrier":
        return ("OdinOptions.send_thread: barrier mode exchanges a phase's messages in one Alltoallv; "
                "a send thread serves odin and odin-fast only")
    for name, default in (("batches_ahead", BATCHES_AHEAD), ("hold_share", HOLD_SHARE)):
        if getattr(options, name) != default and options.mode == "barrier":
            return (f"OdinOptions.{name}: barrier mode fires a phase's vertices in turn; the batch order "
                    "serves odin and odin-fast only")
    if options.send_thread and not threads:
        return "OdinOptions.send_thread needs MPI initialised with MPI_THREAD_MULTIPLE (mpi4py's default)"
    cells = options.resolved_cells(size, num_gaussians)
    if cells < 1:
        return f"OdinOptions.cells must be at least 1, got {cells}"
    if cells < size:
        return f"OdinOptions.cells {cells} is fewer than the {size} ranks: every rank must own at least one cell"
    if options.cells is not None and cells > num_gaussians:
        return f"OdinOptions.cells {cells} is more than the {num_gaussians} initial Gaussians"
    return None

