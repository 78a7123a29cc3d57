"""Progress bars for :func:`kvmm.plan.plan`: one bar per stage (``kvmm plan`` and the plan section
of ``kvmm reproduce`` draw them)."""

from __future__ import annotations

from kvmm._progress import Progress

__all__ = ["StageProgress"]


class StageProgress:
    """``progress(stage, done, total)`` for :func:`kvmm.plan.plan`: one :class:`kvmm._progress.Progress`
    bar on stderr per stage, opened when the stage first reports and closed when the next begins.
    Runtime complexity: O(1) per call."""

    def __init__(self, *, enabled: bool = True, stream=None) -> None:
        self.enabled = enabled
        self.stream = stream
        self.stage: str | None = None
        self._bar = None
        self._done = 0

    def __call__(self, stage: str, done: int, total: int) -> None:
        if stage != self.stage:
            self.close()
            self.stage = stage
            self._bar = Progress(total, f"plan: {stage}", enabled=self.enabled, stream=self.stream)
            self._bar.__enter__()
            self._done = 0
        if done > self._done:
            self._bar.update(done - self._done)
            self._done = done

    def close(self) -> None:
        if self._bar is not None:
            self._bar.__exit__(None, None, None)
            self._bar = None
