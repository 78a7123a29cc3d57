"""A dependency-free progress display on stderr: a bar redrawn in place on a TTY, lines in logs.

Why not tqdm or rich (both installed by the ``hf`` extra, neither a core dependency): what this
module is for is the log of a long run off a terminal (CI, ``nohup``, a pipe), and there neither
fits.  tqdm writes every refresh as ``\\r``-separated updates with no newline, so a log file gets
one ever-growing line, and its monitor thread refreshes only bars with ``miniters > 1``; rich's
live progress draws nothing off a terminal until the end.  A line per interval is about 40 lines
of code here, keeps ``import kvmm`` free of both, and keeps the API the callers use
(``with Progress(total, desc) as bar: bar.update(k)``).
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable

#: off a terminal, the longest gap between two lines (seconds); a heartbeat thread keeps it even
#: while one unit of work (one simulation) takes longer than that
LOG_INTERVAL_S = 5.0
#: on a terminal, the shortest gap between two redraws (seconds)
TTY_REDRAW_S = 0.1


class Progress:
    """``with Progress(total, "replay") as bar: bar.update(k)``.

    On a terminal the bar is redrawn in place at most every 0.1 s (and every second by a
    heartbeat thread, so the elapsed time moves).  Off a terminal (CI logs, pipes) it prints one line at
    each 25 % step and at least every ``interval`` seconds (default 5 s) while the work runs,
    with the count done, the elapsed time and an estimate of the time left.  ``enabled=False``
    makes every call a no-op and starts no thread.  ``clock`` (seconds, monotonic) is for tests.

    Runtime complexity: O(1) per :meth:`update`.
    """

    def __init__(self, total: int, desc: str = "", *, enabled: bool = True, stream=None,
                 interval: float = LOG_INTERVAL_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.total = max(int(total), 1)
        self.desc = desc
        self.done = 0
        self.enabled = enabled
        self.stream = stream if stream is not None else sys.stderr
        self.interval = float(interval)
        self._clock = clock
        self._tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self._start = clock()
        self._last_draw = -float("inf")
        self._last_quarter = -1
        self._drawn_done = -1  # the count the last line showed (off a terminal)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Progress:
        self._draw(force=True)
        if self.enabled:
            self._thread = threading.Thread(target=self._heartbeat, name=f"kvmm progress {self.desc}", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self.done = max(self.done, self.total) if exc[0] is None else self.done
        if self._tty or self.done != self._drawn_done:  # a log never gets the last line twice
            self._draw(force=True)
        if self.enabled and self._tty:
            self.stream.write("\n")
            self.stream.flush()

    def update(self, n: int = 1) -> None:
        self.done += int(n)
        self._draw()

    def tick(self) -> None:
        """Print a line (or redraw) if one is due by time alone: what the heartbeat thread calls."""
        self._draw()

    def _heartbeat(self) -> None:
        # wake when the next line is due (off a terminal) or every second (to move a TTY's clock)
        wait = min(1.0, self.interval)
        while not self._stop.wait(wait):
            self.tick()
            if not self._tty:
                wait = min(max(self._last_draw + self.interval - self._clock(), 0.05), self.interval)

    def _draw(self, force: bool = False) -> None:
        if not self.enabled:
            return
        with self._lock:
            now = self._clock()
            frac = min(self.done / self.total, 1.0)
            elapsed = now - self._start
            if self._tty:
                if not force and now - self._last_draw < TTY_REDRAW_S:
                    return
                self._last_draw = now
                width = 30
                fill = int(frac * width)
                bar = "#" * fill + "-" * (width - fill)
                self.stream.write(f"\r{self.desc:<28} [{bar}] {frac:6.1%} {elapsed:6.1f}s")
            else:
                quarter = int(frac * 4)
                # a small slack so a heartbeat woken exactly one interval later is never skipped
                if not force and quarter == self._last_quarter and now - self._last_draw < self.interval - 1e-3:
                    return
                self._last_quarter = quarter
                self._last_draw = now
                self._drawn_done = self.done
                self.stream.write(f"{self.desc}: {frac:.0%} ({min(self.done, self.total)}/{self.total}, "
                                  f"{elapsed:.1f}s{_time_left(frac, elapsed)})\n")
            self.stream.flush()


def _time_left(frac: float, elapsed: float) -> str:
    """``", ~12s left"`` from the rate so far; empty before any progress or once done."""
    if frac <= 0.0 or frac >= 1.0:
        return ""
    return f", ~{elapsed * (1.0 - frac) / frac:.0f}s left"
