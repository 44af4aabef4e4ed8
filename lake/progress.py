"""Progress of long phases, shown by whichever command started the work.

Work that takes long (a recipe step, training a model inside a build, generation,
verification, pass-rate measurement) opens a `phase` and advances it as it goes; the command
that started the work decides how phases are shown by `watching` them with a reporter: a live
display in a terminal, a line every few seconds in a log, or nothing. Phases nest (a build's
step holds a generation that holds a model's training). Progress is observation only: a
phase never changes what the work computes, and without a reporter it costs a function call.
The reporter is a context variable, like a logging handler, so operators stay plain functions.
"""

from __future__ import annotations

import contextlib
import contextvars
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Protocol


@dataclass
class PhaseStatus:
    """What a reporter knows about one open phase."""

    name: str
    total: int | None
    unit: str
    depth: int
    done: int = 0
    note: str = ""
    estimate: bool = True  # units take similar time, so a rate and an ETA mean something
    started: float = field(default_factory=time.monotonic)

    def rate(self, now: float | None = None) -> float:
        """Units per second since the phase opened."""
        seconds = (now or time.monotonic()) - self.started
        return self.done / seconds if seconds > 0 else 0.0

    def eta_seconds(self, now: float | None = None) -> float | None:
        """Seconds left at the rate so far; None when unknown."""
        rate = self.rate(now)
        if self.total is None or not rate or not self.estimate:
            return None
        return max(self.total - self.done, 0) / rate


class Reporter(Protocol):
    """Receives phases as they open, advance and close (from the thread that runs them)."""

    def opened(self, status: PhaseStatus) -> None: ...

    def advanced(self, status: PhaseStatus) -> None: ...

    def closed(self, status: PhaseStatus) -> None: ...


_REPORTER: contextvars.ContextVar[Reporter | None] = contextvars.ContextVar(
    "cascade_progress_reporter", default=None
)
_DEPTH: contextvars.ContextVar[int] = contextvars.ContextVar("cascade_progress_depth", default=0)


class Phase:
    """An open phase: `advance` it by units done, optionally with a short note (loss, tok/s)."""

    def __init__(self, status: PhaseStatus, reporter: Reporter | None) -> None:
        self.status = status
        self._reporter = reporter

    def advance(self, units: int = 1, note: str | None = None) -> None:
        self.update(self.status.done + units, note)

    def update(self, done: int, note: str | None = None) -> None:
        """Set the units done so far (a resumed phase starts above zero)."""
        self.status.done = done
        if note is not None:
            self.status.note = note
        if self._reporter is not None:
            self._reporter.advanced(self.status)


@contextlib.contextmanager
def phase(
    name: str,
    total: int | None = None,
    unit: str = "rows",
    note: str = "",
    *,
    estimate: bool = True,
) -> Iterator[Phase]:
    """Open a phase of `total` units (None when unknown) for the current reporter, if any;
    `estimate=False` when units differ too much in cost for a rate or ETA (a build's steps)."""
    reporter = _REPORTER.get()
    depth = _DEPTH.get()
    status = PhaseStatus(name, total, unit, depth, note=note, estimate=estimate)
    token = _DEPTH.set(depth + 1)
    if reporter is not None:
        reporter.opened(status)
    try:
        yield Phase(status, reporter)
    finally:
        _DEPTH.reset(token)
        if reporter is not None:
            reporter.closed(status)


@contextlib.contextmanager
def watching(reporter: Reporter | None) -> Iterator[None]:
    """Show the phases opened inside this block with `reporter` (None: show nothing)."""
    token = _REPORTER.set(reporter)
    depth = _DEPTH.set(0)
    try:
        yield
    finally:
        _DEPTH.reset(depth)
        _REPORTER.reset(token)
