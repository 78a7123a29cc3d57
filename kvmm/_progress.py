"""A dependency-free progress bar on stderr (redrawn in place on a TTY, sparse lines otherwise)."""

from __future__ import annotations

import sys
import time


class Progress:
    """``with Progress(total, "replay") as bar: bar.update(k)``.

    Draws at most ~10 times a second; when stderr is not a terminal (CI logs) it prints one line
    per 25 % so logs stay short.  ``enabled=False`` makes every call a no-op.
    """

    def __init__(self, total: int, desc: str = "", *, enabled: bool = True, stream=None) -> None:
        self.total = max(int(total), 1)
        self.desc = desc
        self.done = 0
        self.enabled = enabled
        self.stream = stream if stream is not None else sys.stderr
        self._tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self._start = time.perf_counter()
        self._last_draw = 0.0
        self._last_quarter = -1

    def __enter__(self) -> "Progress":
        self._draw(force=True)
        return self

    def __exit__(self, *exc) -> None:
        self.done = max(self.done, self.total) if exc[0] is None else self.done
        self._draw(force=True)
        if self.enabled and self._tty:
            self.stream.write("\n")
            self.stream.flush()

    def update(self, n: int = 1) -> None:
        self.done += int(n)
        self._draw()

    def _draw(self, force: bool = False) -> None:
        if not self.enabled:
            return
        frac = min(self.done / self.total, 1.0)
        elapsed = time.perf_counter() - self._start
        if self._tty:
            if not force and elapsed - self._last_draw < 0.1:
                return
            self._last_draw = elapsed
            width = 30
            fill = int(frac * width)
            bar = "#" * fill + "-" * (width - fill)
            self.stream.write(f"\r{self.desc:<28} [{bar}] {frac:6.1%} {elapsed:6.1f}s")
            self.stream.flush()
        else:
            quarter = int(frac * 4)
            if quarter != self._last_quarter:
                self._last_quarter = quarter
                self.stream.write(f"{self.desc}: {frac:.0%} ({elapsed:.1f}s)\n")
                self.stream.flush()
