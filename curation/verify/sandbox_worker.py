"""Sandbox worker: a long-lived process that runs untrusted Python programs in forked children.

Started by `curation.verify.sandbox.Sandbox` with a clean environment (no parent secrets even in
/proc/<pid>/environ), it reads jobs from stdin and writes results to stdout, both as
length-prefixed pickles. Per job it forks one child that runs *all* the job's tests in a row
(the throughput trick: one fork instead of one interpreter start per test), and watches each
test against a wall-clock deadline, killing the child's whole process group (and, when root,
every process of the child's private uid) on timeout.

Isolation layers, each enough on its own for the threat it names:
- network: the worker enters an empty network namespace at start (directly when root, via a
  user namespace otherwise); the child's audit hook also refuses socket creation.
- processes: RLIMIT_NPROC under a per-worker uid when root; the audit hook refuses fork/exec.
- memory, CPU, file size, open files: rlimits on the child.
- files: the child runs in a fresh 0700 temp dir under its own uid (root) and the audit hook
  refuses writes outside it.
- secrets: clean environment from process start; /proc/*/environ reads are refused.
"""

from __future__ import annotations

import ast
import contextlib
import ctypes
import ctypes.util
import functools
import gc
import hashlib
import io
import os
import pickle
import resource
import select
import shutil
import signal
import stat
import struct
import sys
import tempfile
import time
import traceback
from pathlib import Path
from types import CodeType, FunctionType
from typing import Any

from curation.verify.framing import recv_frame, send_frame

# Modules competitive-programming and LeetCode programs commonly import, loaded once here so a
# forked child finds them warm.
PRELOADED = (
    "array bisect collections copy decimal fractions functools heapq itertools json math "
    "operator random re statistics string typing sortedcontainers"
)

LEETCODE_PRELUDE = """
from typing import *
from collections import *
from heapq import *
from bisect import *
from itertools import *
from functools import *
from math import *
from string import *
from operator import *
import collections, heapq, bisect, itertools, functools, math, string, re, random, operator
import datetime
try:
    from sortedcontainers import SortedList, SortedDict, SortedSet
except ImportError:
    pass
inf = float("inf")


class ListNode:
    def __init__(self, val=0, next=None):
        self.val = val
        self.next = next


class TreeNode:
    def __init__(self, val=0, left=None, right=None):
        self.val = val
        self.left = left
        self.right = right


def list_node(values):
    head = ListNode()
    node = head
    for v in values:
        node.next = ListNode(v)
        node = node.next
    return head.next


def is_same_list(a, b):
    while a is not None and b is not None:
        if a.val != b.val:
            return False
        a, b = a.next, b.next
    return a is None and b is None


def tree_node(values):
    if not values or values[0] is None:
        return None
    root = TreeNode(values[0])
    queue = deque([root])
    i = 1
    while queue and i < len(values):
        node = queue.popleft()
        for side in ("left", "right"):
            if i < len(values) and values[i] is not None:
                child = TreeNode(values[i])
                setattr(node, side, child)
                queue.append(child)
            i += 1
    return root


def is_same_tree(a, b):
    if a is None or b is None:
        return a is b
    return a.val == b.val and is_same_tree(a.left, b.left) and is_same_tree(a.right, b.right)
"""

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_BLOCKED_EVENTS = {
    "socket.__new__": "network access",
    "socket.connect": "network access",
    "socket.bind": "network access",
    "socket.getaddrinfo": "network access",
    "os.fork": "creating processes",
    "os.forkpty": "creating processes",
    "os.system": "creating processes",
    "os.exec": "creating processes",
    "os.posix_spawn": "creating processes",
    "os.spawn": "creating processes",
    "subprocess.Popen": "creating processes",
    "os.kill": "signalling processes",
    "os.killpg": "signalling processes",
    "ctypes.dlopen": "native code",
    "ctypes.dlsym": "native code",
    "ctypes.cdata": "native code",
    "os.setuid": "changing identity",
    "os.chroot": "changing identity",
}
_PATH_EVENTS = {
    "os.remove",
    "os.rename",
    "os.mkdir",
    "os.rmdir",
    "os.symlink",
    "os.link",
    "os.chmod",
    "os.chown",
    "os.truncate",
    "os.utime",
    "os.chflags",
    "shutil.rmtree",
    "shutil.copyfile",
    "shutil.move",
}
_CLONE_NEWUSER = 0x10000000
_CLONE_NEWNET = 0x40000000
_CLONE_NEWNS = 0x00020000
_MS_RDONLY = 1
_MS_REMOUNT = 32
_MS_BIND = 4096
_MS_REC = 16384
_MS_PRIVATE = 1 << 18
_PR_SET_CHILD_SUBREAPER = 36
_PR_SET_PDEATHSIG = 1
MESSAGE_LIMIT = 400  # characters of an error message sent back per test


Outcome = tuple[str, str, float, "str | None"]  # status, detail, seconds, output of a stdio pass


class OutputLimitExceeded(BaseException):
    """Raised in the child when a test's output passes the cap (BaseException: not catchable
    by the program's `except Exception`)."""


# --------------------------------------------------------------------------- isolation setup


@functools.cache
def _libc() -> ctypes.CDLL:
    """libc, loaded once per worker (find_library runs ldconfig: far too slow per child)."""
    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def enter_empty_network_namespace() -> str:
    """Move this process into a fresh network namespace (only a down loopback). Returns how."""
    libc = _libc()
    if libc.unshare(_CLONE_NEWNET) == 0:
        return "netns"
    uid, gid = os.getuid(), os.getgid()
    if libc.unshare(_CLONE_NEWUSER | _CLONE_NEWNET) == 0:
        try:  # keep our own identity inside the user namespace
            with open("/proc/self/setgroups", "w") as f:
                f.write("deny")
            with open("/proc/self/uid_map", "w") as f:
                f.write(f"{uid} {uid} 1")
            with open("/proc/self/gid_map", "w") as f:
                f.write(f"{gid} {gid} 1")
        except OSError:
            pass
        return "userns+netns"
    return "audit-hook-only"


def _blocked_ancestor(path: str) -> str | None:
    """The first directory on `path` that other users cannot traverse, if any."""
    current = "/"
    for part in Path(path).parts[1:]:
        current = os.path.join(current, part)
        try:
            mode = os.stat(current).st_mode
        except OSError:
            return None
        if stat.S_ISDIR(mode) and not mode & stat.S_IXOTH:
            return current
    return None


def _python_paths() -> set[str]:
    """Directories a sandboxed program needs to read to import the standard library and
    installed packages."""
    return {sys.base_prefix, sys.prefix, *(p for p in sys.path if p and os.path.isdir(p))}


def python_reachable_by_others() -> bool:
    """Whether an unprivileged uid can reach the Python installation as mounted now."""
    return all(_blocked_ancestor(path) is None for path in _python_paths())


def _inside_dir(path: str, directory: str) -> bool:
    return path.startswith(directory.rstrip(os.sep) + os.sep)


def _overmount_keeping(directory: str, options: bytes, keep: set[str]) -> bool:
    """Mount a fresh tmpfs on `directory`, then bind the paths `keep` (below it) back in,
    read-only, through a descriptor of the directory as it was (no staging copy anywhere).
    New parent directories are 0755, so an unprivileged uid can reach the kept paths."""
    libc = _libc()
    keep = {p for p in keep if _inside_dir(p, directory)}  # never the whole directory
    top = sorted(p for p in keep if not any(_inside_dir(p, q) for q in keep))
    old = os.open(directory, os.O_PATH | os.O_DIRECTORY)
    try:
        if libc.mount(b"tmpfs", directory.encode(), b"tmpfs", 0, options) != 0:
            return False
        for path in top:
            relative = os.path.relpath(path, directory)
            current = directory
            for part in Path(relative).parts:
                current = os.path.join(current, part)
                if not os.path.isdir(current):
                    os.mkdir(current)
                    os.chmod(current, 0o755)
            source = f"/proc/self/fd/{old}/{relative}".encode()
            if libc.mount(source, path.encode(), None, _MS_BIND | _MS_REC, None) != 0:
                return False
            libc.mount(None, path.encode(), None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY, None)
    finally:
        os.close(old)
    return True


def private_mounts() -> str:
    """Give this (root) worker its own mount namespace: fresh tmpfs on /tmp, /var/tmp and
    /dev/shm (so nothing a program writes reaches the host, and nothing there is visible),
    with the Python installation bound back read-only when it lives there (a venv under
    /tmp), and the installation made reachable for an unprivileged uid when it lives under
    a private directory such as /root. Returns 'private-mounts' or why not."""
    libc = _libc()
    if libc.unshare(_CLONE_NEWNS) != 0:
        return "shared-mounts"
    libc.mount(b"none", b"/", None, _MS_REC | _MS_PRIVATE, None)
    paths = _python_paths()
    for scratch in ("/tmp", "/var/tmp", "/dev/shm"):
        fresh = os.path.isdir(scratch) and not os.path.islink(scratch)
        if fresh and not _overmount_keeping(scratch, b"mode=1777,size=512m", paths):
            return "shared-mounts"
    by_blocker: dict[str, set[str]] = {}
    for path in paths:
        blocker = _blocked_ancestor(path)
        if blocker is not None:
            by_blocker.setdefault(blocker, set()).add(path)
    for blocker, inside in sorted(by_blocker.items()):
        if not _overmount_keeping(blocker, b"mode=0755,size=1m", inside):
            return "shared-mounts"
    return "private-mounts"


def become_subreaper() -> None:
    """Orphaned grandchildren of a run get re-parented to this worker, which reaps them."""
    with contextlib.suppress(OSError, AttributeError):
        _libc().prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def _inside(path: Any, root: str) -> bool:
    if isinstance(path, int):
        return True  # an already-open descriptor
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    if not isinstance(path, str):
        return False
    real = os.path.realpath(path)
    return real == root or real.startswith(root + os.sep)


def install_audit_hook(root: str) -> None:
    """Refuse network, process creation, native code, secrets and writes outside `root`."""

    def hook(event: str, args: tuple[Any, ...]) -> None:
        reason = _BLOCKED_EVENTS.get(event)
        if reason is None and event.startswith("os.exec"):
            reason = "creating processes"
        if reason is not None:
            raise PermissionError(f"sandbox: {reason} is not allowed ({event})")
        if event == "open":
            path, mode, flags = args
            if isinstance(path, (str, bytes)):
                text = os.fsdecode(path)
                if text.startswith("/proc/") and text.endswith("environ"):
                    raise PermissionError("sandbox: reading process environments is not allowed")
            writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or bool(
                isinstance(flags, int) and flags & _WRITE_FLAGS
            )
            if writing and not _inside(path, root):
                raise PermissionError(f"sandbox: writing outside the work directory ({path!r})")
        elif event in _PATH_EVENTS:
            for arg in args:
                if isinstance(arg, (str, bytes)) and not _inside(arg, root):
                    raise PermissionError(f"sandbox: {event} outside the work directory")

    sys.addaudithook(hook)


# --------------------------------------------------------------------------- the child


def _set_limits(job: dict[str, Any], n_tests: int) -> None:
    limits = job["limits"]
    with open("/proc/self/statm") as f:
        baseline = int(f.read().split()[0]) * resource.getpagesize()
    memory = baseline + limits["memory_mb"] * 2**20
    cpu = int(limits["time_limit_s"] * n_tests) + 2
    settings = [
        (resource.RLIMIT_AS, memory),
        (resource.RLIMIT_CPU, cpu),
        (resource.RLIMIT_FSIZE, limits["max_output_bytes"] + 1),
        (resource.RLIMIT_NOFILE, 64 + n_tests),
        (resource.RLIMIT_CORE, 0),
        (resource.RLIMIT_NPROC, limits["max_processes"]),
    ]
    for kind, value in settings:
        _, hard = resource.getrlimit(kind)
        if hard != resource.RLIM_INFINITY:
            value = min(value, hard)
        resource.setrlimit(kind, (value, value))
    soft, hard = resource.getrlimit(resource.RLIMIT_STACK)
    stack = 256 * 2**20 if hard == resource.RLIM_INFINITY else min(hard, 256 * 2**20)
    if soft != resource.RLIM_INFINITY and soft < stack:
        resource.setrlimit(resource.RLIMIT_STACK, (stack, hard))


def output_digest(text: str) -> str:
    """Digest of the output's tokens (whitespace-tolerant). Sandboxed processes only ever see
    this digest, never the expected output itself, so a program cannot read it and print it;
    the parent re-checks real outputs of reported passes."""
    return hashlib.sha256(" ".join(text.split()).encode()).hexdigest()


GUARD_NAME = "__cascade_guard__"
_PLAIN_TYPES = (bool, int, float, complex, str, bytes, type(None))
_COMPARISONS = ("__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__")


def _overrides_comparison(kind: type) -> bool:
    """Whether a non-builtin class in `kind`'s MRO defines a comparison operator."""
    return any(
        name in klass.__dict__
        for klass in kind.__mro__
        if klass.__module__ != "builtins"
        for name in _COMPARISONS
    )


def check_plain_result(value: Any, budget: int = 1_000_000) -> None:
    """Raise TypeError if a returned value holds an object with its own comparison operators
    (the `__eq__`-always-true reward hack); builtin data, and objects such as ListNode or
    TreeNode whose fields are builtin data, pass. Walks containers and object fields."""
    stack, seen = [value], set()
    while stack and budget > 0:
        item = stack.pop()
        budget -= 1
        kind = type(item)
        if kind in _PLAIN_TYPES:
            continue
        if id(item) in seen:
            continue
        seen.add(id(item))
        if _overrides_comparison(kind):
            raise TypeError(f"candidate returned a {kind.__name__} with its own comparison")
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (list, tuple, set, frozenset)):
            stack.extend(item)
        fields = getattr(item, "__dict__", None)
        if isinstance(fields, dict):
            stack.extend(fields.values())


def guard_candidate(candidate: Any) -> Any:
    """Wrap the function under test so that every result is checked by check_plain_result."""

    def guarded(*args: Any, **kwargs: Any) -> Any:
        result = candidate(*args, **kwargs)
        check_plain_result(result)
        return result

    return guarded


def compile_functional_test(source: str) -> CodeType:
    """Compile a `check(candidate)` test so that its final `check(X)` call gets a guarded X."""
    tree = ast.parse(source)
    last = tree.body[-1] if tree.body else None
    if (
        isinstance(last, ast.Expr)
        and isinstance(last.value, ast.Call)
        and isinstance(last.value.func, ast.Name)
        and last.value.func.id == "check"
        and len(last.value.args) == 1
    ):
        guard = ast.Name(GUARD_NAME, ast.Load())
        last.value.args[0] = ast.Call(guard, [last.value.args[0]], [])
        ast.fix_missing_locations(tree)
    return compile(tree, "<test>", "exec")


def _short(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return text[:MESSAGE_LIMIT]


def _run_one(
    code: Any, test: dict[str, Any], prelude: dict[str, Any], input_fd: int | None, cap: int
) -> tuple[str, str, str | None]:
    """Run one test in this (child) process; returns (status, detail, stdout of a stdio pass)."""
    if input_fd is not None:
        os.lseek(input_fd, 0, os.SEEK_SET)
        os.dup2(input_fd, 0)
    out_fd = os.memfd_create("stdout")
    os.dup2(out_fd, 1)
    os.close(out_fd)
    sys.stdin = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "r", closefd=False)))
    sys.stdout = io.TextIOWrapper(io.BufferedWriter(io.FileIO(1, "w", closefd=False)))
    namespace: dict[str, Any] = {"__name__": "__main__", "__builtins__": __builtins__}
    status, detail = "passed", ""
    try:
        if test["kind"] == "functional":
            namespace.update(prelude)
            exec(code, namespace)
            # the program may have replaced the test helpers (is_same_list = lambda *a: True)
            namespace.update(
                {
                    name: value
                    for name, value in prelude.items()
                    if isinstance(value, FunctionType) and value.__module__ == "__main__"
                }
            )
            namespace[GUARD_NAME] = guard_candidate
            exec(test["compiled"], namespace)
        else:
            try:
                exec(code, namespace)
            except SystemExit as exc:
                if exc.code not in (None, 0):
                    raise
        sys.stdout.flush()
    except OutputLimitExceeded:
        status, detail = "output_limit", "output passed the cap"
    except MemoryError:
        status, detail = "memory", "MemoryError: memory limit reached"
    except RecursionError as exc:
        status, detail = "error", _short(exc)
    except AssertionError as exc:
        status, detail = "failed", ("assertion failed: " + str(exc))[:MESSAGE_LIMIT]
    except SystemExit as exc:
        status, detail = "error", f"exit code {exc.code}"
    except BaseException as exc:  # the program's own failure, whatever it is
        status, detail = "error", _short(exc)
    size = os.fstat(1).st_size
    if size > cap:
        return "output_limit", f"output of {size} bytes passed the cap of {cap}", None
    if status == "error" and "File too large" in detail:
        return "output_limit", detail, None
    if status != "passed" or test["kind"] == "functional":
        return status, detail, None
    os.lseek(1, 0, os.SEEK_SET)
    got = os.read(1, cap + 1).decode("utf-8", errors="replace")
    if output_digest(got) == test["output_digest"]:
        return "passed", "", got
    return "failed", f"wrong output: got {got[:80]!r}", None


def child_main(job: dict[str, Any], start: int, wfd: int, workdir: str, uid: int | None) -> None:
    """Entry point of the forked child; never returns."""
    worker_pid = os.getppid()
    try:
        os.setsid()
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        tests = job["tests"]
        input_fds: dict[int, int] = {}
        for i in range(start, len(tests)):
            if tests[i]["kind"] == "stdio":
                fd = os.memfd_create(f"stdin{i}")
                data = tests[i]["input"].encode()
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                input_fds[i] = fd
        keep = {0, 1, 2, wfd, *input_fds.values()}
        for name in os.listdir("/proc/self/fd"):  # above all the worker's own protocol pipes
            if int(name) not in keep:
                with contextlib.suppress(OSError):
                    os.close(int(name))
        os.chdir(workdir)
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        _set_limits(job, len(tests) - start)
        if uid is not None:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
        # die with the worker (set after setuid, which clears it); the worker may already
        # be gone, then the parent is someone else
        _libc().prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != worker_pid:
            os._exit(1)
        os.environ.clear()
        os.environ.update(
            {"PATH": "/usr/bin:/bin", "HOME": workdir, "TMPDIR": workdir, "LANG": "C.UTF-8"}
        )
        try:
            code = compile(job["program"], "<program>", "exec")
            for test in tests:
                if test["kind"] == "functional":
                    test["compiled"] = compile_functional_test(test["code"])
        except SyntaxError as exc:
            send_frame(wfd, ("compile_error", _short(exc)))
            os._exit(0)
        prelude = prelude_namespace(job["prelude"])
        sweep = _libc().kill if uid is not None else None  # resolved before the hook blocks it
        install_audit_hook(os.path.realpath(workdir))
        cap = job["limits"]["max_output_bytes"]
        for i in range(start, len(tests)):
            send_frame(wfd, ("start", i))
            status, detail, output = _run_one(code, tests[i], prelude, input_fds.get(i), cap)
            send_frame(wfd, ("done", i, status, detail, output))
            if status != "passed" and job["stop_on_failure"]:
                break
        if sweep is not None and sweep(-1, signal.SIGKILL) in (0, -1):
            # every other process of our private uid is gone (-1: there was none)
            send_frame(wfd, ("swept",))
    except BaseException:
        with contextlib.suppress(BaseException):
            send_frame(wfd, ("harness_error", traceback.format_exc()[-MESSAGE_LIMIT:]))
    os._exit(0)


# --------------------------------------------------------------------------- the worker


_PRELUDES: dict[str, dict[str, Any]] = {}


def prelude_namespace(source: str | None) -> dict[str, Any]:
    """Globals a functional test starts from: the prelude run once per worker (not per test;
    children inherit the result through fork)."""
    if not source:
        return {}
    if source not in _PRELUDES:
        namespace: dict[str, Any] = {"__name__": "__main__"}
        exec(compile(source, "<prelude>", "exec"), namespace)
        namespace.pop("__builtins__", None)
        _PRELUDES[source] = namespace
    return _PRELUDES[source]


class Worker:
    """Runs jobs one at a time; each job's tests run in forked children with deadlines."""

    def __init__(self, network: str, mounts: str, private_uid: bool) -> None:
        self.network = network
        self.mounts = mounts
        # a uid no one else uses, unique among live workers (derived from our pid)
        self.uid = 200_000 + os.getpid() if private_uid else None
        self.root_dir = tempfile.mkdtemp(prefix="cascade-sandbox-")
        os.chmod(self.root_dir, 0o711)

    def _reap_all(self) -> None:
        """Wait for every child (ours and re-parented orphans); all were sent SIGKILL."""
        while True:
            try:
                os.waitpid(-1, 0)
            except ChildProcessError:
                return
            except InterruptedError:
                continue

    def _fresh_workdir(self) -> str:
        """The job's private directory: one per worker, emptied between runs (cheaper than a
        new directory per run; a program that wrote nothing leaves nothing to remove)."""
        workdir = os.path.join(self.root_dir, "work")
        if os.path.isdir(workdir) and os.listdir(workdir):
            shutil.rmtree(workdir, ignore_errors=True)
        if not os.path.isdir(workdir):
            os.mkdir(workdir, 0o700)
            if self.uid is not None:
                os.chown(workdir, self.uid, self.uid)
        os.chmod(workdir, 0o700)
        return workdir

    def _kill_everything(self, pgid: int, swept: bool) -> None:
        """Kill the child's process group and, when root, every process of the job's uid
        (unless the child already did that itself on a clean finish: `swept`)."""
        for kill, target in ((os.killpg, pgid), (os.kill, pgid)):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                kill(target, signal.SIGKILL)
        if self.uid is not None and not swept:
            pid = os.fork()
            if pid == 0:
                try:
                    os.setgid(self.uid)
                    os.setuid(self.uid)
                    os.kill(-1, signal.SIGKILL)  # all processes of this uid except us
                finally:
                    os._exit(0)
            os.waitpid(pid, 0)

    def run_job(self, job: dict[str, Any]) -> dict[str, Any]:
        tests = job["tests"]
        limit = job["limits"]["time_limit_s"]
        outcomes: list[Outcome] = [("not_run", "", 0.0, None)] * len(tests)
        started = time.perf_counter()
        start = 0
        compile_error: str | None = None
        prelude_namespace(job["prelude"])
        gc.freeze()  # keep the heap out of the collector: fewer copy-on-write pages per child
        while start < len(tests):
            workdir = self._fresh_workdir()
            rfd, wfd = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.close(rfd)
                child_main(job, start, wfd, workdir, self.uid)
            os.close(wfd)
            next_start, compile_error, swept = self._watch(pid, rfd, start, limit, job, outcomes)
            os.close(rfd)
            self._kill_everything(pid, swept)
            self._reap_all()
            if compile_error is not None or next_start is None:
                break
            start = next_start
        return {
            "outcomes": outcomes,
            "compile_error": compile_error,
            "seconds": time.perf_counter() - started,
        }

    def _watch(
        self,
        pid: int,
        rfd: int,
        start: int,
        limit: float,
        job: dict[str, Any],
        outcomes: list[Outcome],
    ) -> tuple[int | None, str | None, bool]:
        """Follow one child's messages; returns (where a new child should resume, compile
        error, whether the child finished cleanly after killing its uid's other processes).

        Between tests (setup, or after a test finished) the child gets a 5 s grace; a test
        itself gets `limit` seconds of wall-clock time from its "start" message.
        """
        pending = start  # the test we expect next (or the one running)
        running = False
        swept = False
        test_started = time.perf_counter()
        deadline = test_started + limit + 5.0
        buffer = bytearray()
        while True:
            remaining = deadline - time.perf_counter()
            ready = select.select([rfd], [], [], remaining)[0] if remaining > 0 else []
            if not ready:
                detail = f"over {limit:g}s" if running else "stuck before the test started"
                outcomes[pending] = ("timeout", detail, time.perf_counter() - test_started, None)
                return self._resume(pending, job), None, False
            chunk = os.read(rfd, 1 << 16)
            if not chunk:
                status = self._exit_status(pid)
                if running:
                    outcomes[pending] = (
                        "crashed",
                        status,
                        time.perf_counter() - test_started,
                        None,
                    )
                    return self._resume(pending, job), None, False
                return None, None, swept
            buffer += chunk
            while len(buffer) >= 8:
                (size,) = struct.unpack("<Q", buffer[:8])
                if len(buffer) < 8 + size:
                    break
                message = pickle.loads(bytes(buffer[8 : 8 + size]))
                del buffer[: 8 + size]
                kind = message[0]
                if kind == "start":
                    pending, running = message[1], True
                    test_started = time.perf_counter()
                    deadline = test_started + limit
                elif kind == "done":
                    _, i, status, detail, output = message
                    outcomes[i] = (status, detail, time.perf_counter() - test_started, output)
                    pending, running = i + 1, False
                    deadline = time.perf_counter() + 5.0
                elif kind == "swept":
                    swept = True
                elif kind == "compile_error":
                    return None, message[1], False
                elif kind == "harness_error":
                    outcomes[min(pending, len(outcomes) - 1)] = ("error", message[1], 0.0, None)
                    return None, None, False

    @staticmethod
    def _resume(index: int, job: dict[str, Any]) -> int | None:
        """Where a fresh child continues after test `index` timed out or crashed the child."""
        if job["stop_on_failure"] or index + 1 >= len(job["tests"]):
            return None
        return index + 1

    @staticmethod
    def _exit_status(pid: int) -> str:
        try:
            _, status = os.waitpid(pid, 0)
        except ChildProcessError:
            return "process died"
        if os.WIFSIGNALED(status):
            sig = os.WTERMSIG(status)
            name = signal.Signals(sig).name
            if sig == signal.SIGXCPU:
                return "killed by SIGXCPU (CPU time limit)"
            if sig == signal.SIGSEGV:
                return "killed by SIGSEGV (deep recursion or native crash)"
            return f"killed by {name}"
        return f"exited with code {os.WEXITSTATUS(status)} mid-test"

    def close(self) -> None:
        shutil.rmtree(self.root_dir, ignore_errors=True)


def main() -> None:
    for name in PRELOADED.split():
        with contextlib.suppress(ImportError):
            __import__(name)
    prelude_namespace(LEETCODE_PRELUDE)
    in_fd = os.dup(0)
    out_fd = os.dup(1)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    _libc()
    if "--no-os-isolation" in sys.argv:
        network, mounts, private_uid = "audit-hook-only", "shared-mounts", False
    else:
        network = enter_empty_network_namespace()
        mounts = private_mounts() if os.geteuid() == 0 else "shared-mounts"
        # as root, drop to a private uid when it can still import Python
        private_uid = os.geteuid() == 0 and python_reachable_by_others()
    become_subreaper()
    worker = Worker(network, mounts, private_uid)
    info = {"network": network, "mounts": mounts, "uid": worker.uid, "pid": os.getpid()}
    send_frame(out_fd, info)
    try:
        while True:
            job = recv_frame(in_fd)
            if job is None:
                break
            if job["prelude"] == "leetcode":
                job["prelude"] = LEETCODE_PRELUDE
            try:
                result = worker.run_job(job)
            except Exception:
                result = {"harness_error": traceback.format_exc()[-2000:]}
            send_frame(out_fd, result)
    finally:
        worker.close()


if __name__ == "__main__":
    main()
