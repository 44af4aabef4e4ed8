"""Run a function in persistent worker processes with a hard per-call deadline.

Signal-based timeouts (math-verify's default) only work in the main thread of the main
process; a trainer's reward thread or a thread pool cannot use them. Here each call runs in a
worker process (a fresh interpreter running `python -m curation.verify.deadline_pool
module:function`, so nothing of the caller's `__main__`, threads or CUDA state is inherited);
a call that passes its deadline gets its worker killed and replaced, and is reported as a
timeout rather than as a wrong answer. Works from any thread.
"""

from __future__ import annotations

import atexit
import importlib
import os
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

from curation.verify.framing import recv_frame, send_frame

Outcome = tuple[Literal["ok", "timeout", "error"], Any]


class _Worker:
    def __init__(self, target: str) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [str(Path(__file__).resolve().parents[2]), env.get("PYTHONPATH", "")]
        ).rstrip(os.pathsep)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "curation.verify.deadline_pool", target],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.wfd = self.proc.stdin.fileno()
        self.rfd = self.proc.stdout.fileno()
        if recv_frame(self.rfd) != "ready":  # imports done: deadlines exclude start-up
            raise RuntimeError(f"deadline-pool worker for {target} failed to start")

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                stream.close()


class DeadlinePool:
    """`map(calls)` runs `fn(*call)` over `workers` processes; each call gets `timeout_s`.

    `fn` must be a module-level function (it is imported by name in the workers). Workers
    start lazily and live until `close()` or interpreter exit.
    """

    def __init__(self, fn: Callable[..., Any], workers: int = 2, timeout_s: float = 5.0) -> None:
        self.target = f"{fn.__module__}:{fn.__qualname__}"
        self.n_workers = workers
        self.timeout_s = timeout_s
        self._workers: list[_Worker] = []
        self._lock = threading.Lock()
        atexit.register(self.close)

    def close(self) -> None:
        for worker in self._workers:
            worker.kill()
        self._workers = []

    def map(self, calls: Sequence[tuple[Any, ...]]) -> list[Outcome]:
        """Run every call; each outcome is ("ok", value), ("timeout", None) or ("error", msg)."""
        import select

        with self._lock:
            while len(self._workers) < min(self.n_workers, max(len(calls), 1)):
                self._workers.append(_Worker(self.target))
            results: list[Outcome | None] = [None] * len(calls)
            pending = list(range(len(calls)))[::-1]
            idle = list(self._workers)
            busy: dict[int, tuple[_Worker, int, float]] = {}
            while pending or busy:
                while pending and idle:
                    worker, index = idle.pop(), pending.pop()
                    try:
                        send_frame(worker.wfd, calls[index])
                    except OSError:
                        results[index] = ("error", "worker process died")
                        idle.append(self._replace(worker))
                        continue
                    busy[worker.rfd] = (worker, index, time.monotonic() + self.timeout_s)
                if not busy:
                    continue
                soonest = min(deadline for _, _, deadline in busy.values())
                ready, _, _ = select.select(
                    list(busy), [], [], max(0.0, soonest - time.monotonic())
                )
                for rfd in ready:
                    worker, index, _ = busy.pop(rfd)
                    reply = recv_frame(rfd)
                    if reply is None:
                        results[index] = ("error", "worker process died")
                        idle.append(self._replace(worker))
                    else:
                        results[index] = reply
                        idle.append(worker)
                now = time.monotonic()
                for rfd, (worker, index, deadline) in list(busy.items()):
                    if now >= deadline:
                        del busy[rfd]
                        results[index] = ("timeout", None)
                        idle.append(self._replace(worker))
            return [r if r is not None else ("error", "lost") for r in results]

    def _replace(self, worker: _Worker) -> _Worker:
        worker.kill()
        fresh = _Worker(self.target)
        self._workers[self._workers.index(worker)] = fresh
        return fresh


def _serve(target: str) -> None:
    module, _, name = target.partition(":")
    fn = getattr(importlib.import_module(module), name)
    in_fd, out_fd = sys.stdin.fileno(), sys.stdout.fileno()
    send_frame(out_fd, "ready")
    while True:
        call = recv_frame(in_fd)
        if call is None:
            return
        try:
            send_frame(out_fd, ("ok", fn(*call)))
        except Exception as exc:
            send_frame(
                out_fd, ("error", f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=2)}")
            )


if __name__ == "__main__":
    _serve(sys.argv[1])
