"""The untrusted side of the sandbox: the process that runs the program under test.

The worker's zygote forks it (the zygote never holds an expected output, a test or a digest,
so neither does this process's memory). It reads its job from the worker, locks itself down
(`sandbox_jail.lock_down`) and only then runs the program. Nothing it writes decides a
verdict, and everything it writes is a size-capped JSON frame (`framing.send_json`):
- stdio tests: it runs the program on each test's stdin in a row, stdout in that test's
  memfd (which the worker also holds), and says how each run ended (an exception,
  `MemoryError`, ...). The worker reads the memfd and compares it with the expected output.
- functional tests: it serves the checker (`sandbox_checker`): "begin" runs the program in a
  fresh namespace and resolves the test's free names and candidate expressions; "call" calls
  a resolved value with arguments sent as data and answers with the result (and the
  arguments after the call, for in-place tasks) as data (`plain_data`), or the exception;
  "attr" reads an attribute. A value that is not data travels as a handle the checker can
  only call or read attributes of (`Solution().f` in `assert Solution().f(1) == 2`).
"""

from __future__ import annotations

import builtins
import contextlib
import errno
import io
import os
import signal
import sys
from types import CodeType
from typing import Any, NoReturn

from curation.verify.framing import FrameError, recv_frame, recv_json, send_json
from curation.verify.plain_data import NODE_KINDS, DataError, NotData, decode, encode
from curation.verify.sandbox_jail import (
    WORK_DIR,
    Jail,
    Unconfined,
    install_audit_hook,
    lock_down,
)
from curation.verify.sandbox_prelude import prelude_namespace, program_builtins

MESSAGE_LIMIT = 400  # characters of an error message sent back per test
STATUS_FRAME_LIMIT = 4096  # bytes of one frame the program sends the worker
REPLY_FRAME_LIMIT = 64 << 20  # bytes of one answer the program sends the checker
STDIO_ENDINGS = ("ok", "error", "memory", "output_limit")
_MUTABLE = (list, dict, set, bytearray)


class OutputLimitExceeded(BaseException):
    """Raised when a test's output passes the cap (not catchable by `except Exception`)."""


def short(exc: BaseException) -> str:
    """'Type: message', cut to MESSAGE_LIMIT (an unprintable message is replaced)."""
    try:
        text = f"{type(exc).__name__}: {exc}"
    except Exception:
        text = f"{type(exc).__name__}: <unprintable>"
    return text[:MESSAGE_LIMIT]


def close_other_fds(keep: set[int]) -> None:
    """Close every descriptor but `keep` (the worker's protocol pipes above all)."""
    low = 0
    for fd in sorted(keep):
        if fd > low:
            os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, 1 << 20)


def ending_of(exc: BaseException | None) -> tuple[str, str]:
    """How a run ended, as (stdio ending, detail)."""
    if exc is None:
        return "ok", ""
    if isinstance(exc, OutputLimitExceeded):
        return "output_limit", "output passed the cap"
    if isinstance(exc, MemoryError):
        return "memory", "MemoryError: memory limit reached"
    if isinstance(exc, OSError) and exc.errno == errno.EFBIG:
        return "output_limit", short(exc)
    if isinstance(exc, SystemExit):
        return "error", f"exit code {exc.code}"
    return "error", short(exc)


def _raised(exc: BaseException) -> dict[str, Any]:
    """An exception of the program, as data for the checker."""
    category = "error"
    if isinstance(exc, MemoryError):
        category = "memory"
    elif isinstance(exc, SystemExit):
        category = "exit"
    elif isinstance(exc, OutputLimitExceeded) or (
        isinstance(exc, OSError) and exc.errno == errno.EFBIG
    ):
        category = "output"
    elif not isinstance(exc, Exception):
        category = "base"
    message = repr(exc.code) if isinstance(exc, SystemExit) else short(exc)
    name = type(exc).__name__
    if message.startswith(name + ": "):
        message = message[len(name) + 2 :]
    return {"k": "raised", "t": name[:100], "m": message, "c": category}


class ProgramProcess:
    """One run of a program: its job, its namespace per test, its handles for the checker."""

    def __init__(self, job: dict[str, Any], code: CodeType) -> None:
        self.job = job
        self.code = code
        self.prelude = prelude_namespace(job["prelude"])
        # the prelude's names reach a functional test's program as builtins: found when
        # used, with no copy into each namespace (a copy touches every object of it, and
        # in a forked process every touched page is copied)
        self.scope = program_builtins(job["prelude"])
        self.namespace: dict[str, Any] = {}
        self.handles: list[Any] = []
        self.classes = {
            kind: v for name, kind in NODE_KINDS.items() if (v := self.prelude.get(name))
        }

    # ----------------------------------------------------------------------- stdio

    def run_stdio(self, input_fd: int, output_fd: int, cap: int) -> tuple[str, str]:
        os.lseek(input_fd, 0, os.SEEK_SET)
        os.dup2(input_fd, 0)
        os.dup2(output_fd, 1)
        sys.stdin = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "r", closefd=False)))
        sys.stdout = io.TextIOWrapper(io.BufferedWriter(io.FileIO(1, "w", closefd=False)))
        failure: BaseException | None = None
        try:
            try:
                exec(self.code, {"__name__": "__main__", "__builtins__": builtins})
            except SystemExit as exc:
                if exc.code not in (None, 0):
                    raise
            sys.stdout.flush()
        except BaseException as exc:  # the program's own failure, whatever it is
            failure = exc
        ending, detail = ending_of(failure)
        if os.fstat(1).st_size > cap:
            return "output_limit", f"output passed the cap of {cap} bytes"
        return ending, detail

    # ----------------------------------------------------------------------- functional

    def describe(self, value: Any) -> list[Any]:
        """A value for the checker: plain data, or a reference (a handle) to a value of the
        program's that is not data (a function, a class, an instance), which the checker may
        only call or read attributes of; it never compares or tests it."""
        if not callable(value):
            try:
                return ["data", encode(value)]
            except NotData:
                pass
        self.handles.append(value)
        return ["ref", len(self.handles) - 1, type(value).__name__[:100], callable(value)]

    def begin(self, request: dict[str, Any]) -> dict[str, Any]:
        """Run the program afresh for a new test; resolve the names the test asked for."""
        os.ftruncate(1, 0)
        os.lseek(1, 0, os.SEEK_SET)
        sys.stdout = io.TextIOWrapper(io.BufferedWriter(io.FileIO(1, "w", closefd=False)))
        self.handles = []
        self.namespace = {"__name__": "__main__", "__builtins__": self.scope}
        try:
            exec(self.code, self.namespace)
            sys.stdout.flush()
        except BaseException as exc:
            return _raised(exc)
        names: dict[str, list[Any]] = {}
        for name in request.get("names", [])[:1000]:
            if not isinstance(name, str):
                continue
            if name in self.namespace and self.namespace[name] is not self.prelude.get(name):
                names[name] = self.describe(self.namespace[name])
            else:
                names[name] = ["prelude"] if name in self.prelude else ["absent"]
        exprs: list[list[Any]] = []
        for expr in request.get("exprs", [])[:100]:
            try:
                exprs.append(self.describe(eval(str(expr), self.namespace)))
            except BaseException as exc:
                exprs.append(["raised", _raised(exc)])
        return {"k": "ready", "names": names, "exprs": exprs}

    def call(self, request: dict[str, Any]) -> dict[str, Any]:
        handle = request.get("h")
        if type(handle) is not int or not 0 <= handle < len(self.handles):
            return {"k": "raised", "t": "RuntimeError", "m": "no such handle", "c": "error"}
        received: list[Any] = []
        try:
            args, kwargs = decode(request.get("a"), self.classes, made=received)
        except (DataError, TypeError, ValueError) as exc:
            return {"k": "raised", "t": "RuntimeError", "m": f"bad arguments: {exc}", "c": "error"}
        try:
            result = self.handles[handle](*args, **kwargs)
            sys.stdout.flush()
        except BaseException as exc:
            return _raised(exc)
        after_args = [a if isinstance(a, _MUTABLE) or _is_node(a) else None for a in args]
        after_kwargs = {k: v for k, v in kwargs.items() if isinstance(v, _MUTABLE) or _is_node(v)}
        try:
            return {"k": "ok", "v": encode([result, after_args, after_kwargs], known=received)}
        except NotData as exc:
            try:  # the result is not data: its arguments may still be
                after = encode([None, after_args, after_kwargs], known=received)
            except NotData:
                return {"k": "nondata", "t": str(exc)[:MESSAGE_LIMIT]}
            return {"k": "ok", "v": after, "r": self.describe(result)}

    def attribute(self, request: dict[str, Any]) -> dict[str, Any]:
        """An attribute of a referenced value (`Solution().f` in `assert Solution().f(1) == 2`)."""
        handle, name = request.get("h"), request.get("n")
        if type(handle) is not int or not 0 <= handle < len(self.handles):
            return {"k": "raised", "t": "RuntimeError", "m": "no such handle", "c": "error"}
        if not isinstance(name, str):
            return {"k": "raised", "t": "RuntimeError", "m": "bad attribute", "c": "error"}
        try:
            value = getattr(self.handles[handle], name)
        except BaseException as exc:
            return _raised(exc)
        return {"k": "ok", "d": self.describe(value)}

    def serve(self, requests: int, replies: int) -> None:
        """Answer the checker until it hangs up."""
        while True:
            try:
                request = recv_json(requests, REPLY_FRAME_LIMIT)
            except FrameError:
                return
            if not isinstance(request, dict):
                return
            op = request.get("op")
            try:
                if op == "begin":
                    reply = self.begin(request)
                elif op == "call":
                    reply = self.call(request)
                elif op == "attr":
                    reply = self.attribute(request)
                else:
                    return
            except BaseException as exc:  # e.g. MemoryError while encoding a result
                reply = _raised(exc)
            try:
                send_json(replies, reply)
            except (ValueError, OverflowError, RecursionError, MemoryError) as exc:
                send_json(replies, _raised(exc))


def _is_node(value: Any) -> bool:
    return type(value).__name__ in NODE_KINDS


def program_main(header: dict[str, Any], fds: list[int], jail: Jail | Unconfined) -> NoReturn:
    """Entry point of the forked program process; never returns."""
    with contextlib.suppress(BaseException):
        _program(header, fds, jail)
    os._exit(0)


def _program(header: dict[str, Any], fds: list[int], jail: Jail | Unconfined) -> None:
    job_fd, status_fd = fds[:2]
    functional = header["kind"] == "functional"
    outputs = fds[2:3] if functional else fds[2:]
    serving = fds[3:5] if functional else []
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(outputs[0] if functional else devnull, 1)
    os.dup2(devnull, 2)
    close_other_fds({0, 1, 2, job_fd, status_fd, *outputs, *serving})
    job = recv_frame(job_fd)  # from the worker: the trusted direction
    if job is None:
        return
    limits = job["limits"]
    inputs: list[int] = []
    for text in job["inputs"]:
        fd = os.memfd_create("stdin")
        view = memoryview(text.encode())
        while view:
            view = view[os.write(fd, view) :]
        inputs.append(fd)
    cap = limits["max_output_bytes"]
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    nproc, n_tests = limits["max_processes"], job["n_tests"]
    files = 64 + 2 * n_tests
    lock_down(jail, header["uid"], limits, n_tests, nproc=nproc, fsize=cap + 1, files=files)
    work = WORK_DIR if jail.root is not None else jail.work
    os.environ.clear()
    os.environ.update({"PATH": "/usr/bin:/bin", "HOME": work, "TMPDIR": work, "LANG": "C.UTF-8"})
    try:
        code = compile(job["program"], "<program>", "exec")
    except (SyntaxError, ValueError) as exc:
        send_json(status_fd, {"k": "compile_error", "d": short(exc)})
        return
    process = ProgramProcess(job, code)
    install_audit_hook(os.path.realpath(work))
    send_json(status_fd, {"k": "ready"})
    if functional:
        process.serve(*serving)
        return
    for i, (input_fd, output_fd) in enumerate(zip(inputs, outputs, strict=True)):
        ending, detail = process.run_stdio(input_fd, output_fd, cap)
        with contextlib.suppress(OSError):
            send_json(status_fd, {"k": "end", "i": i, "s": ending, "d": detail})
