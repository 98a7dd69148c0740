"""A small text progress bar with an ETA, written to stderr.

Tasks can carry weights (a study weights each fit by its sample size, since a fit's cost grows
about linearly in ``n``); the ETA is ``elapsed × remaining weight / finished weight``, which is
honest when tasks of different sizes finish in any order. On a terminal the bar redraws in
place; otherwise (a log file, CI) it prints a line at most every ``min_interval`` seconds and at
the end.
"""

import sys
import time

__all__ = ["ProgressBar", "format_duration"]


def format_duration(seconds):
    """``h:mm:ss`` or ``m:ss`` for a number of seconds; ``"?"`` if unknown."""
    if seconds is None or seconds != seconds or seconds == float("inf"):
        return "?"
    seconds = int(round(max(0.0, seconds)))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


class ProgressBar:
    """Progress of ``total`` weighted tasks.

    Parameters
    ----------
    total : int
        Number of tasks.
    total_weight : float or None, default=None
        Sum of the task weights (None: every task weighs 1).
    label : str, default="fits"
    stream : file-like or None, default=None
        Where to write (None: ``sys.stderr`` at construction time).
    width : int, default=30
        Characters of the bar.
    min_interval : float, default=0.2 on a terminal, 30 otherwise
        Minimum seconds between redraws (the last update always draws).
    enabled : bool, default=True
        False makes every method a no-op.
    """

    def __init__(self, total, total_weight=None, *, label="fits", stream=None, width=30,
                 min_interval=None, enabled=True):
        self.total = int(total)
        self.total_weight = float(total if total_weight is None else total_weight)
        self.label = label
        self.stream = sys.stderr if stream is None else stream
        self.width = int(width)
        isatty = getattr(self.stream, "isatty", lambda: False)
        try:
            self.tty = bool(isatty())
        except (ValueError, OSError):
            self.tty = False
        self.min_interval = (0.2 if self.tty else 30.0) if min_interval is None else min_interval
        self.enabled = enabled and self.total > 0
        self.done = 0
        self.done_weight = 0.0
        self.start = time.monotonic()
        self._last_draw = -float("inf")
        self._closed = False

    def eta(self):
        """Seconds left, estimated from the finished weight; None before the first task."""
        if self.done_weight <= 0:
            return None
        elapsed = time.monotonic() - self.start
        left = max(self.total_weight - self.done_weight, 0.0)
        return elapsed * left / self.done_weight

    def render(self):
        """The current line (without carriage return or newline)."""
        frac = self.done_weight / self.total_weight if self.total_weight > 0 else 1.0
        frac = min(max(frac, 0.0), 1.0)
        filled = int(round(frac * self.width))
        bar = "#" * filled + "-" * (self.width - filled)
        elapsed = time.monotonic() - self.start
        return (
            f"[{bar}] {self.done}/{self.total} {self.label} {100 * frac:5.1f}%  "
            f"elapsed {format_duration(elapsed)}  ETA {format_duration(self.eta())}"
        )

    def _draw(self, force=False):
        if not self.enabled:
            return
        now = time.monotonic()
        if not force and now - self._last_draw < self.min_interval:
            return
        self._last_draw = now
        line = self.render()
        if self.tty:
            self.stream.write("\r" + line)
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def update(self, weight=1.0, n=1):
        """Mark ``n`` tasks of total ``weight`` as finished and redraw if due."""
        self.done += n
        self.done_weight += float(weight)
        self._draw(force=self.done >= self.total)

    def start_draw(self):
        """Draw the empty bar (call once before the first task finishes)."""
        self._draw(force=True)

    def close(self):
        """Draw the final state and end the line."""
        if self._closed or not self.enabled:
            self._closed = True
            return
        self._closed = True
        if self.tty:
            self._draw(force=True)
            self.stream.write("\n")
            self.stream.flush()
        elif self.done < self.total:
            self._draw(force=True)

    def __enter__(self):
        self.start_draw()
        return self

    def __exit__(self, *exc):
        self.close()
        return False
