"""Run untrusted Python programs against tests, fast and contained.

`Sandbox` keeps a pool of worker processes (`curation.verify.sandbox_worker`) started with a
clean environment. A job (one program + its tests) goes to an idle worker, which forks one
locked-down child that runs all the tests in a row under per-test wall-clock deadlines,
memory / CPU / file-size / process limits, no network and a private temp directory. Jobs run
in parallel over the workers. The worker module's docstring lists the isolation layers.

    with Sandbox(workers=2) as box:
        result = box.run("print(int(input()) * 2)", [StdioTest("3\\n", "6")])
        result.passed  # True
"""

from __future__ import annotations

import atexit
import os
import pickle
import selectors
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from curation.verify.framing import recv_frame, send_frame
from curation.verify.sandbox_worker import output_digest

Status = Literal[
    "passed", "failed", "error", "timeout", "memory", "output_limit", "crashed", "not_run"
]


@dataclass(frozen=True)
class SandboxLimits:
    """Per-run limits. Memory is headroom above the forked interpreter's own address space."""

    time_limit_s: float = 4.0  # wall-clock seconds per test
    memory_mb: int = 1024  # RLIMIT_AS headroom
    max_output_bytes: int = 1 << 20  # stdout cap per test, and the size cap of any written file
    max_processes: int = 16  # RLIMIT_NPROC (enforced per private uid when running as root)


@dataclass(frozen=True)
class StdioTest:
    """Feed `input` on stdin, expect `output` on stdout (compared token by token)."""

    input: str
    output: str


@dataclass(frozen=True)
class FunctionalTest:
    """Python source run after the program in the same namespace; it passes if it raises
    nothing (LeetCode/HumanEval style: `def check(candidate): ...` then `check(...)`)."""

    code: str


Test = StdioTest | FunctionalTest


@dataclass(frozen=True)
class TestOutcome:
    status: Status
    detail: str
    seconds: float


@dataclass(frozen=True)
class ProgramResult:
    """All tests' outcomes; `passed` is the strict reward: every test passed."""

    outcomes: list[TestOutcome]
    compile_error: str | None = None
    seconds: float = 0.0
    harness_error: str | None = None

    @property
    def passed(self) -> bool:
        return (
            self.compile_error is None
            and self.harness_error is None
            and bool(self.outcomes)
            and all(o.status == "passed" for o in self.outcomes)
        )

    @property
    def n_passed(self) -> int:
        return sum(o.status == "passed" for o in self.outcomes)

    @property
    def timed_out(self) -> bool:
        return any(o.status == "timeout" for o in self.outcomes)

    def summary(self) -> str:
        """One line saying why: the first failing test and its status, or 'passed k/k'."""
        if self.harness_error:
            return f"sandbox error: {self.harness_error.strip().splitlines()[-1]}"
        if self.compile_error:
            return f"compile error: {self.compile_error}"
        n = len(self.outcomes)
        for i, o in enumerate(self.outcomes):
            if o.status != "passed":
                return f"test {i + 1}/{n} {o.status}" + (f": {o.detail}" if o.detail else "")
        return f"passed {n}/{n}"


class SandboxError(RuntimeError):
    """The sandbox itself failed (not the program under test)."""


_PROJECT_ROOT = str(Path(__file__).resolve().parents[2])


def _clean_env() -> dict[str, str]:
    """The only environment a worker (and so any program) ever sees."""
    return {
        "PATH": "/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "PYTHONPATH": _PROJECT_ROOT,
        "PYTHONDONTWRITEBYTECODE": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "OMP_NUM_THREADS": "1",
    }


class _WorkerHandle:
    def __init__(self, os_isolation: bool) -> None:
        flags = [] if os_isolation else ["--no-os-isolation"]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "curation.verify.sandbox_worker", *flags],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=_clean_env(),
            close_fds=True,
            cwd=_PROJECT_ROOT,  # `-m` puts the working directory on sys.path: only ours
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.wfd = self.proc.stdin.fileno()
        self.rfd = self.proc.stdout.fileno()
        hello = recv_frame(self.rfd)
        if hello is None:
            raise SandboxError("sandbox worker failed to start")
        self.info: dict[str, Any] = hello
        self.buffer = bytearray()

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()


class Sandbox:
    """A pool of sandbox workers; thread-safe (calls are serialized, jobs run in parallel)."""

    def __init__(
        self,
        workers: int | None = None,
        limits: SandboxLimits | None = None,
        *,
        os_isolation: bool = True,
    ) -> None:
        """`os_isolation=False` skips namespaces and the private uid (rlimits, the clean
        environment and the audit hook remain): what a machine without those privileges
        gets anyway, selectable so that path can be tested everywhere."""
        self.os_isolation = os_isolation
        self.limits = limits or SandboxLimits()
        self.n_workers = workers or os.cpu_count() or 1
        self._workers: list[_WorkerHandle] = []
        self._lock = threading.Lock()

    @property
    def network_isolation(self) -> str:
        """How workers cut the network: 'netns', 'userns+netns' or 'audit-hook-only'."""
        self._start()
        return self._workers[0].info["network"]

    def _start(self) -> None:
        while len(self._workers) < self.n_workers:
            self._workers.append(_WorkerHandle(self.os_isolation))

    def close(self) -> None:
        for worker in self._workers:
            try:
                worker.proc.stdin.close()  # type: ignore[union-attr]
                worker.proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                worker.kill()
        self._workers = []

    def __enter__(self) -> Sandbox:
        self._start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def run(
        self,
        program: str,
        tests: Sequence[Test],
        *,
        limits: SandboxLimits | None = None,
        prelude: Literal["leetcode"] | str | None = "leetcode",
        stop_on_failure: bool = True,
    ) -> ProgramResult:
        """Run one program against its tests."""
        return self.run_many(
            [(program, tests)], limits=limits, prelude=prelude, stop_on_failure=stop_on_failure
        )[0]

    def run_many(
        self,
        jobs: Sequence[tuple[str, Sequence[Test]]],
        *,
        limits: SandboxLimits | None = None,
        prelude: Literal["leetcode"] | str | None = "leetcode",
        stop_on_failure: bool = True,
    ) -> list[ProgramResult]:
        """Run many (program, tests) jobs in parallel over the workers, results in order.

        `prelude` is source run before a functional test ("leetcode" = the usual LeetCode
        imports and ListNode/TreeNode helpers); `stop_on_failure` stops a program at its
        first failing test (enough for the strict reward, and faster).
        """
        limits = limits or self.limits
        payloads = [
            {
                "program": program,
                "tests": [_test_payload(t) for t in tests],
                "limits": asdict(limits),
                "prelude": prelude,
                "stop_on_failure": stop_on_failure,
            }
            for program, tests in jobs
        ]
        with self._lock:
            self._start()
            return self._dispatch(payloads, [tests for _, tests in jobs], limits)

    def _dispatch(
        self,
        payloads: list[dict[str, Any]],
        jobs: list[Sequence[Test]],
        limits: SandboxLimits,
    ) -> list[ProgramResult]:
        results: list[ProgramResult | None] = [None] * len(payloads)
        queue = [i for i, p in enumerate(payloads) if p["tests"]]
        queue.reverse()  # pop() from the end = submission order
        for i, p in enumerate(payloads):
            if not p["tests"]:
                results[i] = ProgramResult(outcomes=[], harness_error="no tests to run")
        idle = list(self._workers)
        busy: dict[int, tuple[_WorkerHandle, int, float]] = {}
        selector = selectors.DefaultSelector()
        while queue or busy:
            while queue and idle:
                worker, index = idle.pop(), queue.pop()
                try:
                    send_frame(worker.wfd, payloads[index])
                except OSError:
                    results[index] = ProgramResult(outcomes=[], harness_error="sandbox worker died")
                    idle.append(self._replace(worker))
                    continue
                # workers enforce every deadline themselves; this only guards against a wedged one
                guard = 30.0 + 2 * limits.time_limit_s * len(payloads[index]["tests"])
                busy[worker.rfd] = (worker, index, time.monotonic() + guard)
                selector.register(worker.rfd, selectors.EVENT_READ)
            if not busy:
                continue
            timeout = max(0.0, min(d for _, _, d in busy.values()) - time.monotonic())
            for key, _ in selector.select(timeout=timeout):
                worker, index, _ = busy[key.fd]
                reply = self._read_reply(worker)
                if reply is _PENDING:
                    continue
                selector.unregister(key.fd)
                del busy[key.fd]
                if reply is None:
                    results[index] = ProgramResult(outcomes=[], harness_error="sandbox worker died")
                    worker = self._replace(worker)
                else:
                    results[index] = _to_result(reply, jobs[index])
                idle.append(worker)
            now = time.monotonic()
            for rfd, (worker, index, deadline) in list(busy.items()):
                if now > deadline:
                    selector.unregister(rfd)
                    del busy[rfd]
                    results[index] = ProgramResult(
                        outcomes=[], harness_error="sandbox worker wedged"
                    )
                    idle.append(self._replace(worker))
        selector.close()
        return [r for r in results if r is not None]

    def _read_reply(self, worker: _WorkerHandle) -> Any:
        chunk = os.read(worker.rfd, 1 << 16)
        if not chunk:
            return None
        worker.buffer += chunk
        if len(worker.buffer) < 8:
            return _PENDING
        (size,) = struct.unpack("<Q", worker.buffer[:8])
        if len(worker.buffer) < 8 + size:
            return _PENDING
        reply = pickle.loads(bytes(worker.buffer[8 : 8 + size]))
        del worker.buffer[: 8 + size]
        return reply

    def _replace(self, worker: _WorkerHandle) -> _WorkerHandle:
        worker.kill()
        fresh = _WorkerHandle(self.os_isolation)
        self._workers[self._workers.index(worker)] = fresh
        return fresh


_PENDING = object()


def _test_payload(test: Test) -> dict[str, Any]:
    if isinstance(test, StdioTest):
        # the expected output itself never leaves this process (see output_digest)
        return {"kind": "stdio", "input": test.input, "output_digest": output_digest(test.output)}
    if isinstance(test, FunctionalTest):
        return {"kind": "functional", "code": test.code}
    raise TypeError(f"not a sandbox test: {test!r}")


def _to_result(reply: dict[str, Any], tests: Sequence[Test]) -> ProgramResult:
    """Build the result, re-checking every reported stdio pass against the real expected
    output (a program that forges a pass message still has to produce the right output)."""
    if "harness_error" in reply:
        return ProgramResult(outcomes=[], harness_error=reply["harness_error"])
    outcomes = []
    for test, (status, detail, seconds, output) in zip(tests, reply["outcomes"], strict=True):
        if isinstance(test, StdioTest):
            if status == "passed" and (output is None or output.split() != test.output.split()):
                status, detail = "failed", "a reported pass whose output does not match"
            elif status == "failed":
                detail = f"{detail}, expected {test.output[:80]!r}"
        outcomes.append(TestOutcome(status, detail, seconds))
    return ProgramResult(
        outcomes=outcomes, compile_error=reply["compile_error"], seconds=reply["seconds"]
    )


_DEFAULT: Sandbox | None = None
_DEFAULT_LOCK = threading.Lock()


def default_sandbox() -> Sandbox:
    """A process-wide sandbox (one worker per CPU), started on first use, closed at exit."""
    global _DEFAULT
    with _DEFAULT_LOCK:
        if _DEFAULT is None:
            _DEFAULT = Sandbox()
            atexit.register(_DEFAULT.close)
        return _DEFAULT
