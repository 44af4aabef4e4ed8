"""How the CLI shows long work (`lake.progress` phases): a live display in a terminal, a
line every few seconds elsewhere (CI logs, `nohup`, a pipe), nothing with --quiet."""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Column

from cli.console import CascadeError, err_console, state
from lake.progress import PhaseStatus, watching

LOG_SECONDS = 5.0  # without a terminal: a line this often ($CASCADE_PROGRESS_SECONDS)


def log_seconds() -> float:
    """Seconds between progress lines in a log: $CASCADE_PROGRESS_SECONDS or LOG_SECONDS."""
    raw = os.environ.get("CASCADE_PROGRESS_SECONDS")
    if raw is None:
        return LOG_SECONDS
    try:
        seconds = float(raw)
    except ValueError:
        seconds = 0.0
    if not seconds > 0:
        raise CascadeError(f"CASCADE_PROGRESS_SECONDS must be a positive number, got {raw!r}")
    return seconds


def duration(seconds: float) -> str:
    """`42s`, `3m05s`, `1h02m`."""
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def describe(status: PhaseStatus, now: float | None = None, *, elapsed: bool = True) -> str:
    """One phase as words: `generate math_sft 120/500 samples, 3.1 samples/s, eta 2m03s`."""
    now = now or time.monotonic()
    parts = [status.name]
    if status.total is not None:
        parts.append(f"{status.done:,}/{status.total:,} {status.unit}")
    elif status.done:
        parts.append(f"{status.done:,} {status.unit}")
    details = []
    if status.done and status.estimate:
        details.append(f"{status.rate(now):,.2f} {status.unit}/s")
    eta = status.eta_seconds(now)
    if eta is not None and status.done < (status.total or 0):
        details.append(f"eta {duration(eta)}")
    if elapsed and not details:
        details.append(duration(now - status.started))
    if status.note:
        details.append(status.note)
    return " ".join(parts) + (f" ({', '.join(details)})" if details else "")


class LiveProgress:
    """Every open phase as a row of one rich display (nested phases indented)."""

    def __init__(self, console: Console) -> None:
        self._progress = Progress(  # names stay whole; the words shrink first
            TextColumn("{task.description}", table_column=Column(no_wrap=True)),
            BarColumn(bar_width=24),
            TimeElapsedColumn(),
            TextColumn(
                "{task.fields[words]}",
                table_column=Column(no_wrap=True, overflow="ellipsis", ratio=1),
            ),
            console=console,
            transient=True,
            expand=True,
        )
        self._tasks: dict[int, TaskID] = {}

    def __enter__(self) -> LiveProgress:
        self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.stop()

    def opened(self, status: PhaseStatus) -> None:
        self._tasks[id(status)] = self._progress.add_task(
            "  " * status.depth + status.name,
            total=status.total,
            completed=status.done,
            words=self._words(status),
        )

    def advanced(self, status: PhaseStatus) -> None:
        task = self._tasks.get(id(status))
        if task is not None:
            self._progress.update(task, completed=status.done, words=self._words(status))

    def closed(self, status: PhaseStatus) -> None:
        task = self._tasks.pop(id(status), None)
        if task is not None:
            self._progress.remove_task(task)

    @staticmethod
    def _words(status: PhaseStatus) -> str:
        return describe(status, elapsed=False).removeprefix(status.name).strip()


class LogLines:
    """A line every `seconds` naming every open phase, innermost last, and a line when a phase
    that ran longer than that ends: readable in a CI log, no control characters."""

    def __init__(self, seconds: float, write: Callable[[str], None]) -> None:
        self._write = write
        self._seconds = seconds
        self._open: list[PhaseStatus] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._started = time.monotonic()
        self._thread = threading.Thread(target=self._beat_until_stopped, daemon=True)

    def __enter__(self) -> LogLines:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def opened(self, status: PhaseStatus) -> None:
        with self._lock:
            self._open.append(status)

    def advanced(self, status: PhaseStatus) -> None:
        pass  # lines come on the beat, however often work advances

    def closed(self, status: PhaseStatus) -> None:
        now = time.monotonic()
        with self._lock:
            if status in self._open:
                self._open.remove(status)
        took = now - status.started
        if took >= self._seconds:
            self._line(f"done: {describe(status, now, elapsed=False)} in {duration(took)}", now)

    def beat(self) -> None:
        """Write the line for the phases open now (nothing when none is)."""
        now = time.monotonic()
        with self._lock:
            chain = " > ".join(describe(s, now) for s in self._open)
        if chain:
            self._line(chain, now)

    def _beat_until_stopped(self) -> None:
        while not self._stop.wait(self._seconds):
            self.beat()

    def _line(self, text: str, now: float) -> None:
        self._write(f"[{duration(now - self._started):>6}] {text}")


def _quiet_library_bars() -> None:
    """Phases replace the bars of huggingface_hub and transformers (unless the user set
    HF_HUB_DISABLE_PROGRESS_BARS), which would interleave raw tqdm lines with them."""
    if os.environ.get("HF_HUB_DISABLE_PROGRESS_BARS") is not None:
        return
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"  # read when these libraries are imported
    if "huggingface_hub" in sys.modules:
        sys.modules["huggingface_hub"].utils.disable_progress_bars()
    if "transformers" in sys.modules:
        sys.modules["transformers"].utils.logging.disable_progress_bar()


@contextlib.contextmanager
def show_progress(enabled: bool = True) -> Iterator[None]:
    """Show the phases of the work inside this block the way this terminal (or log) wants:
    off with --quiet or `enabled=False`, and on ranks other than 0 of a multi-process run."""
    _quiet_library_bars()
    rank = os.environ.get("RANK", "0")
    if not enabled or state.quiet or rank != "0":
        with watching(None):
            yield
        return
    if err_console.is_terminal:
        reporter: LiveProgress | LogLines = LiveProgress(err_console)
    else:
        reporter = LogLines(
            log_seconds(),
            lambda text: err_console.print(text, highlight=False, markup=False, soft_wrap=True),
        )
    with reporter, watching(reporter):
        yield
