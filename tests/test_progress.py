"""kvmm._progress.Progress: lines in logs at least every few seconds, a bar on a terminal."""

from __future__ import annotations

import io
import re
import time

from kvmm._progress import Progress

LINE = re.compile(r"^run: (\d+)% \((\d+)/(\d+), ([0-9.]+)s(?:, ~\d+s left)?\)$")


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class FakeTTY(io.StringIO):
    def isatty(self) -> bool:
        return True


def _elapsed_of_lines(text: str) -> list[float]:
    lines = text.splitlines()
    assert lines and all(LINE.match(line) for line in lines), lines
    return [float(LINE.match(line).group(4)) for line in lines]


def test_off_a_terminal_a_long_run_prints_a_line_at_least_every_10_seconds():
    # 100 units of 3.7 s each (370 s of mocked time): the old display printed only at each 25 %
    # (gaps of ~92 s here); now no two lines are more than 10 s apart
    clock, out = FakeClock(), io.StringIO()
    with Progress(100, "run", stream=out, clock=clock) as bar:
        for _ in range(100):
            clock.now += 3.7
            bar.update(1)
    stamps = _elapsed_of_lines(out.getvalue())
    gaps = [b - a for a, b in zip(stamps, stamps[1:])]
    assert stamps[0] == 0.0 and abs(stamps[-1] - 370.0) < 1e-6
    assert max(gaps) <= 10.0
    assert len(stamps) < 100  # and not a line per update: about one per 5 s (plus the 25 % steps)
    assert out.getvalue().splitlines()[-1].startswith("run: 100% (100/100, 370.0s)")
    assert out.getvalue().count("run: 100%") == 1  # the closing line is not repeated


def test_a_single_long_unit_of_work_still_gets_lines_from_the_heartbeat():
    # one update that takes 60 s of mocked time: tick() (what the heartbeat thread calls each
    # interval) prints lines in between, with no update
    clock, out = FakeClock(), io.StringIO()
    bar = Progress(2, "run", stream=out, clock=clock, interval=5.0)
    bar._draw(force=True)
    for _ in range(12):
        clock.now += 5.0
        bar.tick()
    stamps = _elapsed_of_lines(out.getvalue())
    assert stamps == [5.0 * k for k in range(13)]
    assert out.getvalue().splitlines()[1] == "run: 0% (0/2, 5.0s)"  # no estimate before any progress


def test_the_heartbeat_thread_prints_while_the_caller_is_busy_and_stops_on_exit():
    out = io.StringIO()
    with Progress(4, "run", stream=out, interval=0.02) as bar:
        time.sleep(0.3)  # one long unit of work, no update
        bar.update(4)
    lines = out.getvalue().splitlines()
    assert len(lines) >= 5  # the opening line, >= 3 heartbeats, the closing line
    assert lines[-1].startswith("run: 100% (4/4, ")
    n = len(out.getvalue())
    time.sleep(0.1)
    assert len(out.getvalue()) == n  # the thread ended with the block


def test_time_left_is_estimated_from_the_rate_so_far():
    clock, out = FakeClock(), io.StringIO()
    with Progress(4, "run", stream=out, clock=clock) as bar:
        clock.now += 10.0
        bar.update(1)  # 25 % in 10 s: 30 s left
    assert out.getvalue().splitlines()[1] == "run: 25% (1/4, 10.0s, ~30s left)"


def test_on_a_terminal_the_bar_is_redrawn_in_place_and_ends_with_a_newline():
    clock, out = FakeClock(), FakeTTY()
    with Progress(10, "run", stream=out, clock=clock) as bar:
        for _ in range(10):
            clock.now += 1.0
            bar.update(1)
    text = out.getvalue()
    assert text.endswith("\n") and text.count("\n") == 1
    assert text.count("\r") == 12  # the opening draw, one per update (1 s apart), the closing draw
    assert "100.0%" in text.rsplit("\r", 1)[1]


def test_disabled_progress_writes_nothing_and_starts_no_thread():
    out = io.StringIO()
    with Progress(3, "run", enabled=False, stream=out) as bar:
        bar.update(3)
        assert bar._thread is None
    assert out.getvalue() == ""


def test_an_exception_keeps_the_count_done_so_far():
    clock, out = FakeClock(), io.StringIO()
    try:
        with Progress(4, "run", stream=out, clock=clock) as bar:
            bar.update(1)
            raise RuntimeError("boom")
    except RuntimeError:
        pass
    assert out.getvalue().splitlines()[-1].startswith("run: 25% (1/4, ")
