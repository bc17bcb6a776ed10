"""A one-line progress bar on stderr, redrawn in place with a carriage return."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class ProgressBar:
    """`[#####-----] 150/300 dqn/clean 1.2s`, redrawn at most every `min_interval` seconds.

    On a stream that is not a terminal (CI logs, pipes) it prints only the final
    line of each run, so logs stay readable.
    """

    def __init__(
        self,
        label: str,
        total: int,
        stream: TextIO | None = None,
        width: int = 30,
        min_interval: float = 0.1,
    ):
        self._label = label
        self._total = max(total, 1)
        self._stream = stream if stream is not None else sys.stderr
        self._width = width
        self._min_interval = min_interval
        self._start = time.perf_counter()
        self._last_draw = 0.0
        self._live = bool(getattr(self._stream, "isatty", lambda: False)())

    def update(self, done: int) -> None:
        """Shows `done` of `total` steps (cheap when called every step)."""
        now = time.perf_counter()
        if self._live and now - self._last_draw >= self._min_interval:
            self._last_draw = now
            self._stream.write("\r" + self._line(done, now))
            self._stream.flush()

    def finish(self, done: int | None = None) -> float:
        """Draws the final line, ends it, and returns the elapsed seconds."""
        now = time.perf_counter()
        line = self._line(self._total if done is None else done, now)
        self._stream.write(("\r" if self._live else "") + line + "\n")
        self._stream.flush()
        return now - self._start

    def _line(self, done: int, now: float) -> str:
        filled = int(self._width * min(done, self._total) / self._total)
        bar = "#" * filled + "-" * (self._width - filled)
        return f"[{bar}] {done}/{self._total} {self._label} {now - self._start:.1f}s"
