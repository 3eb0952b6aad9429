"""Progress of a long loop on rank 0: a bar on a terminal; otherwise (under mpiexec, whose output is a
pipe, or in a log) one plain line every ``LINE_SECONDS``, never a stream of carriage returns."""

import sys
import time


class Progress:
    """``update(done, note)`` after each unit of work; ``close()`` at the end.

    limit: the number of units (None if unknown); unit: what one is called ('superstep', 'step');
    enabled: False on every rank but 0 (and with --quiet).
    """

    LINE_SECONDS = 10.0

    def __init__(self, limit, enabled: bool, unit: str = "superstep"):
        self.enabled, self.limit, self.unit = enabled, limit, unit
        self.terminal = enabled and sys.stderr.isatty()
        # no tqdm off a terminal: importing it (about 10 ms) and creating a bar, which sets up a
        # multiprocessing lock (about 6 ms), are for a terminal's bar alone
        self.bar = None
        if self.terminal:
            from tqdm import tqdm

            self.bar = tqdm(total=limit, desc=f"{unit}s", unit=unit, leave=False)
        self.started = self.last_line = time.perf_counter()

    def update(self, done: int, note: str = "") -> None:
        """Record that ``done`` units are complete; ``note`` is shown beside the count."""
        if self.bar is not None:
            self.bar.update(done - self.bar.n)
            if note:
                self.bar.set_postfix_str(note)
        now = time.perf_counter()
        if self.enabled and not self.terminal and now - self.last_line >= self.LINE_SECONDS:
            of = f"/{self.limit}" if self.limit is not None else ""
            print(f"{self.unit} {done}{of}: {note + ', ' if note else ''}{now - self.started:.1f} s",
                  file=sys.stderr, flush=True)
            self.last_line = now

    def write(self, line: str) -> None:
        """Print a line on rank 0 without breaking the bar."""
        if self.enabled:
            (self.bar.write if self.terminal else print)(line)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
