"""The checker of functional tests: it runs the test code and never the program.

`check(candidate)` tests (LeetCode's `check(Solution().twoSum)`, HumanEval's
`check(entry_point)`) run here, in a process of their own (its own uid, the same jail and
rlimits), forked by the worker. Every top-level `check(X)` is rewritten so that X is
evaluated in the program's process instead, and the test's other free names (a helper the
program defines, a value such as `__outcome__`) are looked up there too: what comes back is
a `RemoteValue` (called, or its attributes read, by message) or plain data (`plain_data`).
Assertions, expected values and the prelude's helpers (`is_same_list`, ...) exist only
here; a result that is not data (an object with its own `__eq__`, say) is a failure; the
verdict goes to the worker on a pipe the program's process does not hold. One checker per
worker serves its jobs one after the other (its own uid, forked before the first job).
"""

from __future__ import annotations

import ast
import builtins
import functools
import marshal
import os
import socket
import sys
from dataclasses import dataclass
from types import CodeType
from typing import Any, NoReturn

from curation.verify.framing import FrameError, recv_frame, recv_json, send_json
from curation.verify.plain_data import NODE_KINDS, DataError, NotData, decode, encode
from curation.verify.sandbox_jail import Jail, Unconfined, install_audit_hook, lock_down
from curation.verify.sandbox_prelude import prelude_helpers, prelude_namespace
from curation.verify.sandbox_program import (
    MESSAGE_LIMIT,
    REPLY_FRAME_LIMIT,
    close_other_fds,
    short,
)

CANDIDATE = "__cascade_candidate_{}__"
_BUILTIN_NAMES = frozenset(dir(builtins))


@dataclass(frozen=True)
class PreparedTest:
    """A functional test compiled for the checker: its code (each top-level `check(X)`
    now reads `check(__cascade_candidate_k__)`), the X sources, and its free names."""

    code: CodeType
    exprs: tuple[str, ...]
    names: frozenset[str]


def _bound_and_loaded(tree: ast.AST) -> tuple[set[str], set[str]]:
    loaded: set[str] = set()
    bound: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (loaded if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.alias):
            bound.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.ExceptHandler | ast.MatchAs | ast.MatchStar) and node.name:
            bound.add(node.name)
    return bound, loaded


@functools.lru_cache(maxsize=4096)  # RL checks the same tests for many responses
def prepare_test(source: str) -> PreparedTest:
    """Compile a functional test for the checker (SyntaxError if it does not parse)."""
    tree = ast.parse(source)
    exprs: list[str] = []
    for statement in tree.body:
        call = statement.value if isinstance(statement, ast.Expr) else None
        if (
            isinstance(call, ast.Call)
            and isinstance(call.func, ast.Name)
            and call.func.id == "check"
            and len(call.args) == 1
            and not call.keywords
        ):
            exprs.append(ast.unparse(call.args[0]))
            call.args[0] = ast.Name(CANDIDATE.format(len(exprs) - 1), ast.Load())
    ast.fix_missing_locations(tree)
    bound, loaded = _bound_and_loaded(tree)
    names = loaded - bound - _BUILTIN_NAMES - {CANDIDATE.format(k) for k in range(len(exprs))}
    return PreparedTest(compile(tree, "<test>", "exec"), tuple(exprs), frozenset(names))


class ProgramFailure(BaseException):
    """The program failed in a way the test must not catch (BaseException: not caught by
    its `except Exception`); carries the test's status."""

    def __init__(self, status: str, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail[:MESSAGE_LIMIT]


class ProgramError(Exception):
    """An exception of a class of the program's own (only its name and message came)."""


def raise_program_exception(reply: dict[str, Any]) -> NoReturn:
    """Raise, in the test, what the program raised."""
    name, message, category = str(reply.get("t")), str(reply.get("m")), reply.get("c")
    if category == "memory":
        raise ProgramFailure("memory", "MemoryError: memory limit reached")
    if category == "output":
        raise ProgramFailure("output_limit", f"{name}: {message}")
    if category == "exit":
        raise ProgramFailure("error", f"exit code {message}")
    if category != "error":
        raise ProgramFailure("error", f"{name}: {message}")
    kind = getattr(builtins, name, None) if name in _BUILTIN_NAMES else None
    if isinstance(kind, type) and issubclass(kind, Exception):
        try:
            error = kind(message)
        except Exception:
            error = None
        if error is not None:
            raise error
    raise ProgramError(f"{name}: {message}")


class Channel:
    """Requests to the program's process and its answers (data only, size-capped)."""

    def __init__(self, requests: int, replies: int, classes: dict[str, Any]) -> None:
        self.requests = requests
        self.replies = replies
        self.classes = classes

    def ask(self, request: dict[str, Any]) -> dict[str, Any]:
        try:
            send_json(self.requests, request)
        except BrokenPipeError:
            raise ProgramFailure("crashed", "the program's process died") from None
        try:
            reply = recv_json(self.replies, REPLY_FRAME_LIMIT)
        except FrameError as exc:
            raise ProgramFailure("error", f"the program broke the call protocol: {exc}") from None
        if reply is None:
            raise ProgramFailure("crashed", "the program's process died")
        if not isinstance(reply, dict):
            raise ProgramFailure("error", "the program broke the call protocol")
        return reply

    def value(self, message: Any, reuse: list[Any] | None = None) -> Any:
        try:
            return decode(message, self.classes, reuse=reuse)
        except DataError as exc:
            raise ProgramFailure("error", f"the program sent a malformed value: {exc}") from None

    def call(self, handle: int, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        sent: list[Any] = []
        try:
            message = encode([list(args), dict(kwargs)], made=sent)
        except NotData as exc:
            raise TypeError(f"the test passed the program something not data: {exc}") from None
        reply = self.ask({"op": "call", "h": handle, "a": message})
        kind = reply.get("k")
        if kind == "raised":
            raise_program_exception(reply)
        if kind == "nondata":
            raise ProgramFailure(
                "error", f"the program returned a non-data value ({reply.get('t')})"
            )
        if kind != "ok":
            raise ProgramFailure("error", "the program broke the call protocol")
        value = self.value(reply.get("v"), reuse=sent)
        if not (isinstance(value, list) and len(value) == 3):
            raise ProgramFailure("error", "the program sent a malformed answer")
        result, after_args, after_kwargs = value
        if "r" in reply:
            result = _bind(self, "result", reply["r"])
        if isinstance(after_args, list) and len(after_args) == len(args):
            for original, after in zip(args, after_args, strict=True):
                _write_back(original, after)
        if isinstance(after_kwargs, dict):
            for name, after in after_kwargs.items():
                if name in kwargs:
                    _write_back(kwargs[name], after)
        return result

    def attribute(self, handle: int, name: str) -> Any:
        reply = self.ask({"op": "attr", "h": handle, "n": name})
        if reply.get("k") == "raised":
            raise_program_exception(reply)
        if reply.get("k") != "ok":
            raise ProgramFailure("error", "the program broke the call protocol")
        return _bind(self, name, reply.get("d"))


def _write_back(original: Any, after: Any) -> None:
    """An argument as the program left it, copied into the test's own object (in-place
    tasks: `nums.sort()`-style; nodes were updated in place by `decode`)."""
    if after is None or original is after:
        return
    kind = type(original)
    if kind in (list, bytearray) and isinstance(after, list | bytes | bytearray):
        original[:] = after
    elif kind in (dict, set) and type(after) is kind:
        original.clear()
        original.update(after)


class RemoteValue:
    """A value of the program's that is not data (a function, a class, an instance): the
    test may call it or read its attributes, both by message; anything that would judge it
    (comparing, truth, hashing, iterating, converting) is a failure of the program, as a
    non-data result always was, so no object of the program's decides an assertion."""

    def __init__(self, channel: Channel, handle: int, name: str, kind: str) -> None:
        object.__setattr__(self, "_channel", channel)
        object.__setattr__(self, "_handle", handle)
        object.__setattr__(self, "_kind", kind)
        object.__setattr__(self, "__name__", name)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._channel.call(self._handle, args, kwargs)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return self._channel.attribute(self._handle, name)

    def __setattr__(self, name: str, value: Any) -> None:
        raise TypeError("the test cannot change a value of the program's")

    def __repr__(self) -> str:
        return f"<program value {self.__name__} of type {self._kind}>"

    def _judged(self, *_: Any) -> NoReturn:
        raise ProgramFailure(
            "error", f"the program returned a non-data value (a {self._kind} is not plain data)"
        )

    __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = _judged  # type: ignore[assignment]
    __bool__ = __len__ = __iter__ = __contains__ = __hash__ = _judged  # type: ignore[assignment]
    __int__ = __float__ = __index__ = __complex__ = __getitem__ = _judged  # type: ignore[assignment]


def _bind(channel: Channel, name: str, description: Any) -> Any:
    """The test's value for a resolved name or expression; raises what its lookup raised."""
    if not isinstance(description, list) or not description:
        raise ProgramFailure("error", "the program broke the call protocol")
    kind = description[0]
    if kind == "ref" and len(description) == 4 and type(description[1]) is int:
        return RemoteValue(channel, description[1], name, str(description[2])[:100])
    if kind == "data" and len(description) == 2:
        return channel.value(description[1])
    if kind == "raised" and len(description) == 2 and isinstance(description[1], dict):
        raise_program_exception(description[1])
    raise ProgramFailure("error", "the program broke the call protocol")


def run_test(
    test: PreparedTest, channel: Channel, prelude: dict[str, Any], own: set[str]
) -> tuple[str, str]:
    """Run one test against the program; returns (status, detail). `own`: the names that
    stay the checker's (the prelude's helpers)."""
    namespace: dict[str, Any] = {"__name__": "__main__", "__builtins__": builtins}
    namespace.update(prelude)
    try:
        asked = sorted(test.names - own)
        reply = channel.ask({"op": "begin", "names": asked, "exprs": list(test.exprs)})
        if reply.get("k") == "raised":
            raise_program_exception(reply)
        names, exprs = reply.get("names"), reply.get("exprs")
        if reply.get("k") != "ready" or not isinstance(names, dict) or not isinstance(exprs, list):
            raise ProgramFailure("error", "the program broke the call protocol")
        if len(exprs) != len(test.exprs):
            raise ProgramFailure("error", "the program broke the call protocol")
        for name in asked:
            description = names.get(name, ["absent"])
            if description == ["absent"]:
                namespace.pop(name, None)
            elif description != ["prelude"]:
                namespace[name] = _bind(channel, name, description)
        for k, (source, description) in enumerate(zip(test.exprs, exprs, strict=True)):
            namespace[CANDIDATE.format(k)] = _bind(channel, source, description)
        exec(test.code, namespace)
    except ProgramFailure as exc:
        return exc.status, exc.detail
    except AssertionError as exc:
        return "failed", ("assertion failed: " + str(exc))[:MESSAGE_LIMIT]
    except MemoryError:
        return "memory", "MemoryError: memory limit reached"
    except ProgramError as exc:
        return "error", str(exc)[:MESSAGE_LIMIT]
    except BaseException as exc:  # the test's own error, or one the program raised
        return "error", short(exc)
    return "passed", ""


# the checker is long-lived: generous fixed limits (the worker's deadlines bound each test)
CHECKER_LIMITS = {"memory_mb": 4096, "time_limit_s": 10**7}


def checker_main(sock: socket.socket, jail: Jail | Unconfined, uid: int | None) -> NoReturn:
    """Entry point of a worker's checker: forked once, before the worker's first job, it
    checks one job after the other (no fork per job); never returns."""
    try:
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        close_other_fds({0, 1, 2, sock.fileno()})
        lock_down(jail, uid, CHECKER_LIMITS, 1, nproc=1, fsize=1, files=64)
        os.chdir("/")  # not a run's work tmpfs: it would outlive its unmount while we live
        os.environ.clear()
        sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
        install_audit_hook("/nonexistent")  # the checker writes no file at all
        while True:
            _, fds, _, _ = socket.recv_fds(sock, 16, 4)
            if len(fds) != 4:
                break
            try:
                job = recv_frame(fds[3])  # from the worker: the trusted direction
                if job is not None:
                    check_job(job, *fds[:3])
            except BaseException:
                pass
            finally:
                for fd in fds:
                    os.close(fd)
    except BaseException:
        pass
    os._exit(0)


def check_job(job: dict[str, Any], verdicts: int, requests: int, replies: int) -> None:
    """Run a job's functional tests from `job["start"]`, reporting each start and end."""
    prelude = prelude_namespace(job["prelude"])
    classes = {kind: prelude[name] for name, kind in NODE_KINDS.items() if name in prelude}
    channel = Channel(requests, replies, classes)
    own = prelude_helpers(prelude)
    tests = job["tests"]
    for i in range(job["start"], len(tests)):
        send_json(verdicts, {"k": "start", "i": i})
        code, exprs, names = tests[i]  # compiled by the worker (`prepare_test`)
        test = PreparedTest(marshal.loads(code), exprs, names)
        status, detail = run_test(test, channel, prelude, own)
        send_json(verdicts, {"k": "end", "i": i, "s": status, "d": detail})
        if status == "crashed" or (status != "passed" and job["stop_on_failure"]):
            break
