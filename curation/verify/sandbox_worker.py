"""Sandbox worker: a long-lived supervisor that runs untrusted programs in forked processes.

Started by `curation.verify.sandbox.Sandbox` with a clean environment, it reads jobs (a
program and its tests) on stdin and writes results on stdout, as pickle frames: that channel
joins two trusted processes, and no sandboxed process ever holds it.

Once per worker: enter the namespaces and build the jail (`sandbox_jail`), load the usual
imports and the LeetCode prelude (`sandbox_prelude`), and fork the *zygote*, the init of a
fresh PID namespace, which forks every program process. The zygote exists before the first
job and is never sent a test, an expected output or a digest, so no program process can find
one in its memory (not even in freed memory of an earlier job).

Per run of a program (one fork runs all of a job's tests in a row, the throughput trick):
- a fresh tmpfs work dir, and a private uid as root; the program's stdin per test and a memfd
  for its stdout, which the worker holds too;
- stdio tests: the worker tells the program process to run test i, starts the clock, and on
  its "ended" reads the memfd and compares the tokens' digest with the expected one. The
  program never sees the expected output (nor its digest); its own word can only fail it;
- functional tests: the worker forks a checker (`sandbox_checker`, another private uid) that
  runs the test code and calls the program's functions by message; the checker's start/end
  reports are the verdict, on a pipe the program process does not hold;
- every deadline is the worker's; on a timeout and at the end the zygote kills every process
  of the run (`kill(-1)` inside its PID namespace) and reaps them; the tmpfs is unmounted.
Everything read from a sandboxed process is a size-capped JSON frame (`framing.JsonFrames`);
nothing it writes is ever unpickled.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import marshal
import os
import pickle
import select
import signal
import socket
import sys
import time
import traceback
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from curation.verify.framing import FrameError, JsonFrames, recv_frame, send_frame
from curation.verify.sandbox_checker import PreparedTest, checker_main, prepare_test
from curation.verify.sandbox_jail import (
    CLONE_NEWPID,
    IsolationUnavailable,
    Jail,
    Unconfined,
    become_subreaper,
    drop_bounding_set,
    enter_worker_namespaces,
    libc,
    python_paths,
)
from curation.verify.sandbox_prelude import PRELOADED, program_builtins
from curation.verify.sandbox_program import (
    MESSAGE_LIMIT,
    STATUS_FRAME_LIMIT,
    STDIO_ENDINGS,
    close_other_fds,
    program_main,
)

PROJECT_ROOT = str(Path(__file__).resolve().parents[2])
SETUP_GRACE_S = 5.0  # before the first test and between tests
STATUSES = ("passed", "failed", "error", "timeout", "memory", "output_limit", "crashed")
Outcome = tuple[str, str, float]  # status, detail, seconds


def output_digest(text: str) -> str:
    """Digest of the output's tokens (whitespace-tolerant): what the worker compares."""
    return hashlib.sha256(" ".join(text.split()).encode()).hexdigest()


class ZygoteError(RuntimeError):
    """The zygote died or stopped answering: this worker cannot go on."""


# --------------------------------------------------------------------------- the zygote


def _receive(sock: socket.socket) -> tuple[Any, list[int]]:
    """(message, descriptors) from the worker; (None, []) once it is gone."""
    try:
        data, fds, _, _ = socket.recv_fds(sock, 1 << 16, 16)
    except OSError:
        return None, []
    return (pickle.loads(data) if data else None), fds


def _kill_run(pid: int, pid_namespace: bool) -> None:
    """SIGKILL to the program and everything it started."""
    if pid_namespace:
        with contextlib.suppress(ProcessLookupError):
            os.kill(-1, signal.SIGKILL)  # all of our namespace but ourselves
    else:
        for kill in (os.killpg, os.kill):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                kill(pid, signal.SIGKILL)


def _reap(pid_namespace: bool) -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, 0 if pid_namespace else os.WNOHANG)
        except ChildProcessError:
            return
        except InterruptedError:
            continue
        if pid == 0:
            return


def _watch_program(sock: socket.socket, pid: int, pid_namespace: bool) -> int | None:
    """Wait for the program process to end (killing its run when asked); its wait status,
    or None when the worker is gone."""
    pidfd = os.pidfd_open(pid)
    try:
        while True:
            ready, _, _ = select.select([sock, pidfd], [], [])
            if pidfd in ready:
                break
            message, fds = _receive(sock)
            for fd in fds:
                os.close(fd)
            _kill_run(pid, pid_namespace)
            if message is None:
                return None
        _, status = os.waitpid(pid, 0)
        _kill_run(pid, pid_namespace)
        _reap(pid_namespace)
        return status
    finally:
        os.close(pidfd)


def zygote_main(sock: socket.socket, jail: Jail | Unconfined, pid_namespace: bool) -> NoReturn:
    """Fork a program process per request, report how it ended; exit with the worker."""
    try:
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        close_other_fds({0, 1, 2, sock.fileno()})
        libc().prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE: no ptrace of the zygote by anyone
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        gc.freeze()
        sock.send(pickle.dumps(("ready",)))
        while True:
            message, fds = _receive(sock)
            if message is None:
                break
            if message[0] != "spawn":
                for fd in fds:
                    os.close(fd)
                continue  # a kill for a run that already ended
            pid = os.fork()
            if pid == 0:
                sock.close()
                program_main(message[1], fds, jail)
            for fd in fds:
                os.close(fd)
            status = _watch_program(sock, pid, pid_namespace)
            if status is None:
                break
            sock.send(pickle.dumps(("exited", status)))
    finally:
        if pid_namespace:
            _kill_run(0, pid_namespace)
        os._exit(0)


class Zygote:
    """The worker's end of its zygote."""

    def __init__(self, jail: Jail | Unconfined, pid_namespace: bool) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        helper = os.fork()
        if helper == 0:  # a helper, so that the worker's own children stay in its namespace
            try:
                ours.close()
                if pid_namespace and libc().unshare(CLONE_NEWPID) != 0:
                    os._exit(1)
                if os.fork() == 0:
                    zygote_main(theirs, jail, pid_namespace)
            finally:
                os._exit(0)
        os.waitpid(helper, 0)  # the zygote is re-parented to us (a subreaper)
        theirs.close()
        self.sock = ours
        self.running = False
        if self._next(30.0) != ("ready",):
            raise ZygoteError("the zygote did not start")

    def _next(self, timeout: float) -> Any:
        ready, _, _ = select.select([self.sock], [], [], timeout)
        if not ready:
            raise ZygoteError("the zygote stopped answering")
        data = self.sock.recv(1 << 16)
        if not data:
            raise ZygoteError("the zygote died")
        return pickle.loads(data)

    def spawn(self, header: dict[str, Any], fds: list[int]) -> None:
        self.collect()  # the last run is over, every process of it reaped
        socket.send_fds(self.sock, [pickle.dumps(("spawn", header))], fds)
        self.running = True

    def kill(self) -> None:
        """Kill the current run's processes (the zygote reaps them before anything else)."""
        self.sock.send(pickle.dumps(("kill",)))

    def collect(self) -> int:
        """The wait status of the last run's program process, once the zygote has reaped it
        and every process it started (0 when there was no run)."""
        if not self.running:
            return 0
        message = self._next(30.0)
        if message[0] != "exited":
            raise ZygoteError(f"unexpected zygote message {message!r}")
        self.running = False
        return message[1]


def describe_exit(status: int) -> str:
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig == signal.SIGXCPU:
            return "killed by SIGXCPU (CPU time limit)"
        if sig == signal.SIGSEGV:
            return "killed by SIGSEGV (deep recursion or native crash)"
        return f"killed by {signal.Signals(sig).name}"
    return f"exited with code {os.WEXITSTATUS(status)} mid-test"


# --------------------------------------------------------------------------- the supervisor


_EOF, _TIMEOUT = object(), object()  # never equal to anything a process can send
MAX_TESTS_PER_RUN = 200  # stdout memfds passed in one message (the kernel allows 253)


@dataclass
class _Run:
    """One run of the program (a program process, and a checker for functional tests)."""

    fds: list[int] = field(default_factory=list)
    checker: _Reader | None = None
    crash: int | None = None  # the test whose detail is the program's exit status


class _Reader:
    """JSON frames from one sandboxed process."""

    def __init__(self, fd: int, limit: int) -> None:
        self.fd = fd
        self.frames = JsonFrames(limit)
        self.ready: deque[Any] = deque()
        self.ended = False

    def pump(self) -> None:
        """Read what is there (FrameError on a broken protocol)."""
        chunk = os.read(self.fd, 1 << 16)
        if not chunk:
            self.ended = True
        else:
            self.ready.extend(self.frames.feed(chunk))


def _next(readers: list[_Reader], deadline: float) -> tuple[_Reader | None, Any]:
    """The next frame of any reader: (reader, frame), (reader, _EOF), or (None, _TIMEOUT).
    Raises FrameError (with `.reader` set) for a frame past its limit or not JSON."""
    while True:
        for reader in readers:
            if reader.ready:
                return reader, reader.ready.popleft()
            if reader.ended:
                return reader, _EOF
        remaining = deadline - time.monotonic()
        ready = select.select([r.fd for r in readers], [], [], max(remaining, 0))[0]
        if not ready:
            return None, _TIMEOUT
        for reader in readers:
            if reader.fd in ready:
                try:
                    reader.pump()
                except FrameError as exc:
                    exc.reader = reader  # type: ignore[attr-defined]
                    raise


def _text(value: Any) -> str:
    return value[:MESSAGE_LIMIT] if isinstance(value, str) else ""


class Checker:
    """The worker's end of its checker process (`sandbox_checker.checker_main`)."""

    def __init__(self, jail: Jail | Unconfined, uid: int | None) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.pid = os.fork()
        if self.pid == 0:
            ours.close()
            checker_main(theirs, jail, uid)
        theirs.close()
        self.sock = ours

    def check(self, body: dict[str, Any], fds: list[int]) -> None:
        """Hand it a job: its description and (verdicts, requests, replies) descriptors."""
        job_r, job_w = os.pipe()
        try:
            socket.send_fds(self.sock, [b"j"], [*fds, job_r])
        finally:
            os.close(job_r)
        try:
            send_frame(job_w, body)
        finally:
            os.close(job_w)

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(self.pid, 0)
        self.sock.close()


class Worker:
    """Runs jobs one at a time, each in fresh sandboxed processes under its deadlines."""

    def __init__(self, mode: str, jail: Jail | Unconfined, zygote: Zygote) -> None:
        self.mode = mode
        self.jail = jail
        self.zygote = zygote
        # private uids as root, in a block no other live worker uses (derived from our pid):
        # the last for the checker, the others for the programs, one per job in turn
        self.uid_base = 2_000_000_000 + (os.getpid() % 4_000_000) * 512
        self.jobs = 0
        self._checker: Checker | None = None
        self.checker()  # forked now, before any job

    def checker(self) -> Checker:
        if self._checker is None:
            uid = self.uid_base + 511 if self.mode == "root" else None
            self._checker = Checker(self.jail, uid)
        return self._checker

    def drop_checker(self) -> None:
        if self._checker is not None:
            self._checker.kill()
            self._checker = None

    def _uids(self) -> tuple[int | None, int | None]:
        if self.mode != "root":
            return None, None
        return self.uid_base + self.jobs % 511, self.uid_base + 511

    def run_job(self, job: dict[str, Any]) -> dict[str, Any]:
        tests = job["tests"]
        kinds = {t["kind"] for t in tests}
        if len(kinds) != 1:
            return {"harness_error": "a job's tests must be all stdio or all functional"}
        prepared = None
        if kinds == {"functional"}:
            try:
                prepared = [prepare_test(t["code"]) for t in tests]
            except SyntaxError as exc:
                return {"harness_error": f"a functional test does not compile: {exc}"}
        self.jobs += 1
        uids = self._uids()
        outcomes: list[Outcome] = [("not_run", "", 0.0)] * len(tests)
        started = time.perf_counter()
        start: int | None = 0
        compile_error: str | None = None
        gc.freeze()  # keep the heap out of the collector: fewer copy-on-write pages per fork
        while start is not None and start < len(tests):
            try:
                start, compile_error = self._run(job, start, uids, prepared, outcomes)
            except _CompileError as exc:
                start, compile_error = None, str(exc)
            if compile_error is not None:
                break
        return {
            "outcomes": outcomes,
            "compile_error": compile_error,
            "seconds": time.perf_counter() - started,
        }

    @staticmethod
    def _resume(index: int, job: dict[str, Any]) -> int | None:
        """Where a fresh run continues after test `index` timed out or crashed its run."""
        if job["stop_on_failure"] or index + 1 >= len(job["tests"]):
            return None
        return index + 1

    def _run(
        self,
        job: dict[str, Any],
        start: int,
        uids: tuple[int | None, int | None],
        prepared: list[PreparedTest] | None,
        outcomes: list[Outcome],
    ) -> tuple[int | None, str | None]:
        """Run the program from test `start`; (where to resume, compile error)."""
        tests = job["tests"]
        stdio = prepared is None
        end = min(len(tests), start + MAX_TESTS_PER_RUN) if stdio else len(tests)
        run = _Run()
        self.jail.mount_work(uids[0] or 0)
        spawned = False
        try:
            status_r, status_w = os.pipe()
            job_r, job_w = os.pipe()
            run.fds += [status_r, job_w]
            outputs = [os.memfd_create("stdout") for _ in range(end - start if stdio else 1)]
            run.fds += outputs
            theirs = [job_r, status_w]
            if not stdio:
                requests_r, requests_w = os.pipe()
                replies_r, replies_w = os.pipe()
                theirs += [requests_r, replies_w]
            kind = "stdio" if stdio else "functional"
            self.zygote.spawn(
                {"uid": uids[0], "kind": kind}, [job_r, status_w, *outputs, *theirs[2:]]
            )
            spawned = True
            for fd in theirs:
                os.close(fd)
            body = {
                "program": job["program"],
                "inputs": [tests[i]["input"] for i in range(start, end)] if stdio else [],
                "n_tests": end - start,
                "limits": job["limits"],
                "prelude": job["prelude"],
            }
            status = _Reader(status_r, STATUS_FRAME_LIMIT)
            readers = [status]
            if not stdio:  # the checker starts while the program sets up
                assert prepared is not None
                checker = self._start_checker(job, start, prepared, run, requests_w, replies_r)
                readers.append(checker)
            with contextlib.suppress(BrokenPipeError):  # if it died, its status pipe says so
                send_frame(job_w, body)
            if stdio:
                return self._stdio(job, start, end, status, outputs, outcomes, run), None
            return self._functional(job, start, status, readers[1], outputs[0], outcomes, run)
        finally:
            if spawned:
                self.zygote.kill()
            if run.checker is not None:
                self._settle_checker(run.checker)
            if run.crash is not None and outcomes[run.crash][0] == "crashed":
                _, _, seconds = outcomes[run.crash]
                outcomes[run.crash] = ("crashed", describe_exit(self.zygote.collect()), seconds)
            for fd in run.fds:
                os.close(fd)
            self.jail.unmount_work()

    def _stdio(
        self,
        job: dict[str, Any],
        start: int,
        end: int,
        status: _Reader,
        outputs: list[int],
        outcomes: list[Outcome],
        run: _Run,
    ) -> int | None:
        """The program runs the tests in a row; each "ended" starts the next test's clock."""
        tests = job["tests"]
        limit = job["limits"]["time_limit_s"]
        cap = job["limits"]["max_output_bytes"]
        began = time.monotonic()
        try:
            _, first = _next([status], began + SETUP_GRACE_S)
        except FrameError:
            first = None
        if first is _TIMEOUT or first is _EOF:
            outcomes[start] = ("timeout" if first is _TIMEOUT else "crashed", "", 0.0)
            if first is _EOF:
                run.crash = start
            return self._resume(start, job)
        if isinstance(first, dict) and first.get("k") == "compile_error":
            raise _CompileError(_text(first.get("d")) or "does not compile")
        if not (isinstance(first, dict) and first.get("k") == "ready"):
            outcomes[start] = ("error", "the program broke the sandbox protocol", 0.0)
            return None
        for i in range(start, end):
            began = time.monotonic()
            try:
                _, message = _next([status], began + limit)
            except FrameError:
                message = None
            seconds = time.monotonic() - began
            if message is _TIMEOUT:
                outcomes[i] = ("timeout", f"over {limit:g}s", seconds)
                return self._resume(i, job)
            if message is _EOF:
                outcomes[i] = ("crashed", "", seconds)
                run.crash = i
                return self._resume(i, job)
            if not (
                isinstance(message, dict)
                and message.get("k") == "end"
                and message.get("i") == i - start
                and message.get("s") in STDIO_ENDINGS
            ):
                outcomes[i] = ("error", "the program broke the sandbox protocol", seconds)
                return self._resume(i, job)
            verdict, detail = self._judge_stdio(message, tests[i], outputs[i - start], cap)
            outcomes[i] = (verdict, detail, seconds)
            if verdict != "passed" and job["stop_on_failure"]:
                return None
        return end if end < len(tests) else None

    @staticmethod
    def _judge_stdio(
        message: dict[str, Any], test: dict[str, Any], stdout: int, cap: int
    ) -> tuple[str, str]:
        """The verdict of a stdio test, from the captured output: the program's own report
        can only fail it."""
        ending, detail = message["s"], _text(message.get("d"))
        size = os.fstat(stdout).st_size
        if size > cap:
            return "output_limit", f"output of {size} bytes passed the cap of {cap}"
        if ending == "error" and "File too large" in detail:
            return "output_limit", detail
        if test.get("capture"):  # a tool run: what it printed, and how it ended
            got = os.pread(stdout, cap + 1, 0).decode("utf-8", errors="replace")
            return ("passed", got) if ending == "ok" else (ending, f"{got}{detail}")
        if ending != "ok":
            return ending, detail
        got = os.pread(stdout, cap + 1, 0).decode("utf-8", errors="replace")
        if output_digest(got) == test["output_digest"]:
            return "passed", ""
        return "failed", f"wrong output: got {got[:80]!r}"

    def _start_checker(
        self,
        job: dict[str, Any],
        start: int,
        prepared: list[PreparedTest],
        run: _Run,
        requests_w: int,
        replies_r: int,
    ) -> _Reader:
        verdict_r, verdict_w = os.pipe()
        run.fds.append(verdict_r)
        body = {
            "tests": [(marshal.dumps(t.code), t.exprs, t.names) for t in prepared],
            "start": start,
            "prelude": job["prelude"],
            "stop_on_failure": job["stop_on_failure"],
        }
        fds = [verdict_w, requests_w, replies_r]
        try:
            try:
                self.checker().check(body, fds)
            except OSError:  # it died (killed after a timeout): a fresh one
                self.drop_checker()
                self.checker().check(body, fds)
        finally:
            for fd in fds:  # now only the checker holds them
                os.close(fd)
        run.checker = _Reader(verdict_r, STATUS_FRAME_LIMIT)
        return run.checker

    def _settle_checker(self, reader: _Reader) -> None:
        """Wait for the checker to finish the job (the program's process is gone, so a call
        it waited on has failed); one that does not, or died, is replaced."""
        deadline = time.monotonic() + 1.0
        try:
            while _next([reader], deadline)[1] not in (_EOF, _TIMEOUT):
                pass
            finished = reader.ended
        except FrameError:
            finished = False
        alive = self._checker is not None and os.waitpid(self._checker.pid, os.WNOHANG)[0] == 0
        if not (finished and alive):
            self.drop_checker()

    def _functional(
        self,
        job: dict[str, Any],
        start: int,
        status: _Reader,
        checker: _Reader,
        stdout: int,
        outcomes: list[Outcome],
        run: _Run,
    ) -> tuple[int | None, str | None]:
        """The checker reports each test's start and end: its verdicts; the program's own
        status pipe can only say it does not compile."""
        tests = job["tests"]
        limit = job["limits"]["time_limit_s"]
        cap = job["limits"]["max_output_bytes"]
        pending, running = start, False
        began = time.monotonic()
        deadline = began + SETUP_GRACE_S
        readers = [status, checker]
        while pending < len(tests):
            try:
                source, message = _next(readers, deadline)
            except FrameError as exc:
                if exc.reader is status:  # type: ignore[attr-defined]
                    readers = [checker]  # a flood on the program's own pipe: ignore it
                    continue
                source, message = checker, None
            now = time.monotonic()
            if source is status:
                if isinstance(message, dict) and message.get("k") == "compile_error":
                    return None, _text(message.get("d")) or "does not compile"
                if message is _EOF or not isinstance(message, dict) or message.get("k") != "ready":
                    readers = [checker]  # nothing more to learn from it
                continue
            if message is _TIMEOUT:
                detail = f"over {limit:g}s" if running else "stuck before the test started"
                outcomes[pending] = ("timeout", detail, now - began)
                return self._resume(pending, job), None
            if message is _EOF:
                if running:
                    outcomes[pending] = ("crashed", "the checker died", now - began)
                    return self._resume(pending, job), None
                return None, None
            if not isinstance(message, dict):
                outcomes[pending] = ("error", "the checker broke the protocol", now - began)
                return None, None
            if message.get("k") == "start" and message.get("i") == pending and not running:
                running, began, deadline = True, now, now + limit
                continue
            if not (message.get("k") == "end" and message.get("i") == pending and running):
                outcomes[pending] = ("error", "the checker broke the protocol", now - began)
                return None, None
            verdict = message.get("s") if message.get("s") in STATUSES else "error"
            detail = _text(message.get("d"))
            size = os.fstat(stdout).st_size
            if size > cap or (verdict == "error" and "File too large" in detail):
                verdict, detail = "output_limit", detail or f"output of {size} bytes"
            if verdict == "crashed":
                compile_error = self._compile_error(status)
                if compile_error is not None:
                    return None, compile_error
                run.crash = pending
            outcomes[pending] = (verdict, detail, now - began)
            if verdict == "crashed":
                return self._resume(pending, job), None
            if verdict != "passed" and job["stop_on_failure"]:
                return None, None
            pending, running, deadline = pending + 1, False, now + SETUP_GRACE_S
        return None, None

    @staticmethod
    def _compile_error(status: _Reader) -> str | None:
        """A compile error the program process reported before it exited, if any."""
        deadline = time.monotonic() + 1.0
        while True:
            try:
                _, message = _next([status], deadline)
            except FrameError:
                return None
            if not isinstance(message, dict):
                return None
            if message.get("k") == "compile_error":
                return _text(message.get("d")) or "does not compile"


class _CompileError(Exception):
    """The program does not compile (its process said so: it can only hurt itself)."""


def main() -> None:
    for name in PRELOADED.split():
        with contextlib.suppress(ImportError):
            __import__(name)
    program_builtins("leetcode")  # (runs the prelude) before anything is forked
    in_fd = os.dup(0)
    out_fd = os.dup(1)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    libc()
    try:
        if "--unsafe-no-isolation" in sys.argv:
            mode, jail = "none", Unconfined()
        else:
            mode = enter_worker_namespaces(force_userns="--userns" in sys.argv)
            jail = Jail(python_paths(PROJECT_ROOT))
            drop_bounding_set()
        become_subreaper()
        zygote = Zygote(jail, pid_namespace=mode != "none")
    except (IsolationUnavailable, OSError, ZygoteError) as exc:
        send_frame(out_fd, {"error": str(exc)})
        return
    worker = Worker(mode, jail, zygote)
    network = {"root": "netns", "userns": "userns+netns", "none": "none"}[mode]
    info = {
        "pid": os.getpid(),
        "isolation": mode,
        "network": network,
        # the programs' private uids [low, high), and the checker's
        "uids": [worker.uid_base, worker.uid_base + 511] if mode == "root" else None,
        "checker_uid": worker.uid_base + 511 if mode == "root" else None,
    }
    send_frame(out_fd, info)
    while True:
        job = recv_frame(in_fd)
        if job is None:
            break
        try:
            result = worker.run_job(job)
        except ZygoteError:
            send_frame(out_fd, {"harness_error": traceback.format_exc()[-2000:]})
            break
        except Exception:
            result = {"harness_error": traceback.format_exc()[-2000:]}
        send_frame(out_fd, result)
    if isinstance(jail, Unconfined):
        jail.unmount_work()


if __name__ == "__main__":
    main()
