"""Run untrusted Python programs against tests, fast, contained, with verdicts they cannot forge.

`Sandbox` keeps a pool of worker processes (`curation.verify.sandbox_worker`) started with a
clean environment. A job (one program + its tests) goes to an idle worker, which runs the
program in one forked, jailed process for all its tests in a row, under per-test wall-clock
deadlines, memory / CPU / file-size / process limits, no network, a private uid and a fresh
tmpfs. Jobs run in parallel over the workers. The program never decides its verdict: the
worker compares a stdio test's captured output, and a functional test runs in a separate
checker process that calls the program's functions by message (`sandbox_checker`). The
worker's docstring tells how; `sandbox_jail`'s lists the operating-system boundary.

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
import warnings
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
    """Python test code that passes if it raises nothing (LeetCode/HumanEval style:
    `def check(candidate): ...` then `check(X)`). It runs in a checker process, not in the
    program's: X, and any other name the test uses but does not define (a helper of the
    program's, a value such as `__outcome__`), are looked up in the program's namespace and
    reach the test as functions called by message, or as plain data."""

    code: str


@dataclass(frozen=True)
class CaptureRun:
    """Feed `input` on stdin and give back what the program printed (in the outcome's
    `detail`; status `passed` when it ran to its end): a tool that runs code, not a test."""

    input: str = ""


Test = StdioTest | FunctionalTest | CaptureRun


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
    """The sandbox itself failed (not the program under test), or cannot isolate here."""


class UnsafeSandboxWarning(UserWarning):
    """A sandbox runs programs without isolation (`unsafe_no_isolation=True`)."""


UNSAFE_WARNING = (
    "Sandbox(unsafe_no_isolation=True) runs programs without namespaces, jail or private "
    "uid: a program can read every file and secret its user can (the parent's environment "
    "under /proc, the project, the lake), signal and kill processes of that user (the "
    "verifier included), write wherever that user can, and open the network; only rlimits, "
    "the clean environment and the audit hook remain, and the audit hook can be switched "
    "off from inside. Verdicts still come from the worker and the checker, not the program."
)
UNSAFE_ENV = "CASCADE_SANDBOX_UNSAFE_NO_ISOLATION"


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
    def __init__(self, unsafe: bool) -> None:
        flags = ["--unsafe-no-isolation"] if unsafe else []
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
        if "error" in hello:
            self.kill()
            raise SandboxError(hello["error"])
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
        unsafe_no_isolation: bool = False,
    ) -> None:
        """Needs root or unprivileged user namespaces, and says so in one sentence
        (SandboxError) where neither is available. `unsafe_no_isolation=True` runs programs
        without isolation instead, and warns what that gives up (UNSAFE_WARNING)."""
        self.unsafe = unsafe_no_isolation
        if self.unsafe:
            warnings.warn(UNSAFE_WARNING, UnsafeSandboxWarning, stacklevel=2)
        else:
            _check_isolation_available()
        self.limits = limits or SandboxLimits()
        self.n_workers = workers or os.cpu_count() or 1
        self._workers: list[_WorkerHandle] = []
        self._lock = threading.Lock()

    @property
    def network_isolation(self) -> str:
        """How workers cut the network: 'netns', 'userns+netns' or 'none' (unsafe)."""
        self._start()
        return self._workers[0].info["network"]

    def _start(self) -> None:
        while len(self._workers) < self.n_workers:
            self._workers.append(_WorkerHandle(self.unsafe))

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
        for _, tests in jobs:
            if len({type(t) for t in tests}) > 1:
                raise ValueError("a job's tests must be all StdioTest or all FunctionalTest")
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
        fresh = _WorkerHandle(self.unsafe)
        self._workers[self._workers.index(worker)] = fresh
        return fresh


_PENDING = object()


def _check_isolation_available() -> None:
    """SandboxError, in one sentence, where this machine can isolate nothing (not root and
    no user namespaces); probed in a fresh interpreter (unshare needs a single thread)."""
    if os.geteuid() == 0:
        return
    probe = "import ctypes, sys; sys.exit(ctypes.CDLL(None, use_errno=True).unshare(0x10000000))"
    done = subprocess.run([sys.executable, "-S", "-I", "-c", probe], capture_output=True)
    if done.returncode != 0:
        raise SandboxError(
            "the sandbox cannot isolate programs on this machine: it is not root and cannot "
            "create a user namespace; run as root, enable unprivileged user namespaces, or "
            "pass unsafe_no_isolation=True to run programs without isolation"
        )


def _test_payload(test: Test) -> dict[str, Any]:
    if isinstance(test, StdioTest):
        # the expected output itself never leaves this process; the worker compares the
        # digest of the program's output tokens, and no sandboxed process sees either
        return {"kind": "stdio", "input": test.input, "output_digest": output_digest(test.output)}
    if isinstance(test, FunctionalTest):
        return {"kind": "functional", "code": test.code}
    if isinstance(test, CaptureRun):
        return {"kind": "stdio", "input": test.input, "output_digest": None, "capture": True}
    raise TypeError(f"not a sandbox test: {test!r}")


def _to_result(reply: dict[str, Any], tests: Sequence[Test]) -> ProgramResult:
    if "harness_error" in reply:
        return ProgramResult(outcomes=[], harness_error=reply["harness_error"])
    outcomes = []
    for test, (status, detail, seconds) in zip(tests, reply["outcomes"], strict=True):
        if isinstance(test, StdioTest) and status == "failed":
            detail = f"{detail}, expected {test.output[:80]!r}"
        outcomes.append(TestOutcome(status, detail, seconds))
    return ProgramResult(
        outcomes=outcomes, compile_error=reply["compile_error"], seconds=reply["seconds"]
    )


_DEFAULT: Sandbox | None = None
_DEFAULT_LOCK = threading.Lock()


def default_sandbox() -> Sandbox:
    """A process-wide sandbox (one worker per CPU), started on first use, closed at exit.
    `CASCADE_SANDBOX_UNSAFE_NO_ISOLATION=1` makes it an unsafe one (for the CLI, on a
    machine that cannot isolate; it warns what it gives up)."""
    global _DEFAULT
    with _DEFAULT_LOCK:
        if _DEFAULT is None:
            _DEFAULT = Sandbox(unsafe_no_isolation=os.environ.get(UNSAFE_ENV) == "1")
            atexit.register(_DEFAULT.close)
        return _DEFAULT
