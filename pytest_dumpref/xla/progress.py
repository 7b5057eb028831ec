"""A progress bar on one line of a terminal, for long runs of the command line.

Drawn only when the stream is a terminal: piped or captured output (tests, CI logs, ``2>
file``) stays free of carriage returns.  Redrawn at most five times a second, so a batch of
thousands of small files costs nothing.  ``callback(label)`` gives the ``(i, n)`` function
that analyses such as ``passes.pass_changes(progress=...)`` call, for ``tour`` as well.
"""
from __future__ import annotations

import shutil
import sys
import time

__all__ = ["ProgressBar"]


class ProgressBar:
    """``ProgressBar(total, label)``; ``step(note)`` after each item, ``close()`` at the end."""

    def __init__(self, total: int, label: str = "", stream=None, *, min_interval: float = 0.2):
        self.total = max(0, total)
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.done = 0
        self.min_interval = min_interval
        self._last = 0.0
        self._drawn = False
        isatty = getattr(self.stream, "isatty", None)
        self.enabled = bool(isatty and isatty())

    def step(self, note: str = "", n: int = 1) -> None:
        self.done += n
        self._draw(note)

    def update(self, done: int, total: int | None = None, note: str = "") -> None:
        if total is not None:
            self.total = total
        self.done = done
        self._draw(note)

    def callback(self, label: str | None = None):
        """An ``(i, n)`` callable that updates this bar (for analyses that report steps)."""
        if label is not None:
            self.label = label

        def report(i: int, n: int) -> None:
            self.update(i, n)
        return report

    def _draw(self, note: str) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self._last < self.min_interval and self.done < self.total:
            return
        self._last = now
        width = shutil.get_terminal_size((80, 20)).columns
        total = self.total or 1
        frac = min(1.0, self.done / total)
        head = f"{self.label} " if self.label else ""
        count = f" {self.done}/{self.total}"
        bar_width = max(10, min(40, width // 3))
        filled = int(frac * bar_width)
        bar = "[" + "#" * filled + "-" * (bar_width - filled) + "]"
        line = head + bar + count
        if note:
            room = width - len(line) - 2
            if room > 8:
                line += "  " + (note if len(note) <= room else "..." + note[-(room - 3):])
        self.stream.write("\r" + line[:width - 1].ljust(width - 1))
        self.stream.flush()
        self._drawn = True

    def close(self) -> None:
        """Clear the bar's line, so that what follows starts on a clean line."""
        if self.enabled and self._drawn:
            width = shutil.get_terminal_size((80, 20)).columns
            self.stream.write("\r" + " " * (width - 1) + "\r")
            self.stream.flush()
            self._drawn = False

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()
