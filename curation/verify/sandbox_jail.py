"""The operating-system boundary of the sandbox: namespaces, a jail, private uids, rlimits.

A sandbox worker (`curation.verify.sandbox_worker`) calls `enter_worker_namespaces` once: an
empty network namespace and a private mount namespace, directly as root, or inside a user
namespace otherwise (then every sandboxed process shares the worker's uid, and the PID
namespace, dropped capabilities and read-only mounts keep them apart). It then builds a
`Jail`: a read-only tmpfs holding exactly what Python needs to import (the interpreter's
prefix, the site-packages directories, /usr/lib) bound read-only at their own paths, plus
/dev/null, zero, random and urandom; the project, the lake, /etc, /proc and every other host
path are absent. Each job gets a fresh tmpfs at /tmp inside it (cwd, HOME and TMPDIR),
unmounted after the job. `lock_down` confines a forked child: own IPC namespace, chroot into
the jail, rlimits, a private uid (as root) or no capabilities, no_new_privs.

`install_audit_hook` is a second line only, never the boundary: a program can switch it off
in one line (it reads module-level tables) and `dir_fd` or `_posixsubprocess` get around it.
It turns the common mistakes (a socket, a subprocess, a stray write) into a clear
PermissionError; the kernel-enforced layers above are what contain a hostile program.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import os
import resource
import sys
import sysconfig
from pathlib import Path
from typing import Any

CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 1, 2, 4, 8
_MS_REMOUNT, _MS_BIND, _MS_REC, _MS_PRIVATE = 32, 4096, 16384, 1 << 18
_MNT_DETACH = 2
_PR_SET_PDEATHSIG = 1
_PR_SET_DUMPABLE = 4
_PR_CAPBSET_DROP = 24
_PR_SET_SECUREBITS = 28
_PR_SET_CHILD_SUBREAPER = 36
_PR_SET_NO_NEW_PRIVS = 38
_SECURE_ALL_LOCKED = 0x2F  # NOROOT, NO_SETUID_FIXUP, KEEP_CAPS off, each locked
_DEVICES = ("null", "zero", "random", "urandom")
# mount flags a bind mount keeps from its source (a user namespace forbids changing them)
_KEPT_FLAGS = {os.ST_NOEXEC: _MS_NOEXEC, os.ST_NOATIME: 1024, os.ST_NODIRATIME: 2048}
_KEPT_FLAGS[os.ST_RELATIME] = 1 << 21
WORK_DIR = "/tmp"  # inside the jail: cwd, HOME, TMPDIR of every job


class IsolationUnavailable(RuntimeError):
    """This machine cannot isolate sandboxed programs (no root, no user namespaces)."""


@functools.cache
def libc() -> ctypes.CDLL:
    """libc, loaded once per worker (find_library runs ldconfig: far too slow per child)."""
    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def _mount(source: str | None, target: str, kind: str | None, flags: int, data: str = "") -> None:
    _check(
        libc().mount(
            source.encode() if source else None,
            target.encode(),
            kind.encode() if kind else None,
            flags,
            data.encode() if data else None,
        ),
        f"mount {target}",
    )


def enter_worker_namespaces(force_userns: bool = False) -> str:
    """Move this worker into an empty network namespace and a private mount namespace.
    Returns 'root' (real root: private uids available) or 'userns' (inside a user namespace
    that maps only our own uid, to 0). `force_userns` takes the second path as root (tests)."""
    mode = ""
    if os.geteuid() == 0 and not force_userns and libc().unshare(CLONE_NEWNS | CLONE_NEWNET) == 0:
        mode = "root"
    if not mode:
        uid, gid = os.geteuid(), os.getegid()
        if libc().unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWNET) != 0:
            errno = ctypes.get_errno()
            raise IsolationUnavailable(
                "the sandbox cannot isolate programs on this machine: it is not root and "
                f"cannot create a user namespace ({os.strerror(errno)}); run as root, enable "
                "unprivileged user namespaces, or pass unsafe_no_isolation=True to run "
                "programs without isolation"
            )
        Path("/proc/self/setgroups").write_text("deny")
        Path("/proc/self/uid_map").write_text(f"0 {uid} 1")
        Path("/proc/self/gid_map").write_text(f"0 {gid} 1")
        mode = "userns"
    _mount(None, "/", None, _MS_REC | _MS_PRIVATE)
    return mode


def become_subreaper() -> None:
    """Orphans of this worker's children get re-parented to it, which reaps them."""
    with contextlib.suppress(OSError, AttributeError):
        libc().prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def _contains(directory: str, path: str) -> bool:
    directory = directory.rstrip(os.sep) or os.sep
    return path == directory or path.startswith(directory.rstrip(os.sep) + os.sep)


def python_paths(project_root: str) -> list[str]:
    """What a sandboxed program needs to read to import: the standard library and the
    interpreter's own libraries, each import path that is a directory (site-packages, a
    venv's lib), the system's shared libraries. Not the interpreter's bin/ (no shell or
    other executable comes along), never the project root or a directory above it (the
    project's packages stay invisible; a venv inside the project, `<project>/.venv`, is fine).
    """
    project = os.path.realpath(project_root)
    config = sysconfig.get_paths()
    candidates = [config[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")]
    candidates += [sysconfig.get_config_var("LIBDIR") or "", *sys.path]
    candidates += ["/usr/lib", "/usr/lib64", "/usr/share/zoneinfo"]
    paths: list[str] = []
    for path in candidates:
        if not path or not os.path.isabs(path) or not os.path.isdir(path):
            continue
        real = os.path.realpath(path)
        if _contains(real, project):  # the project itself, or a directory above it
            continue
        if any(_contains(p, real) for p in paths):
            continue
        paths = [p for p in paths if not _contains(real, p)] + [real]
    return sorted(paths)


class Jail:
    """A read-only root with the Python installation, and a fresh work tmpfs per job."""

    def __init__(self, python: list[str]) -> None:
        # the root is a tmpfs over /dev/shm (or /tmp) in this mount namespace only: nothing
        # is created on the host, and the worker needs neither directory
        shm = os.path.isdir("/dev/shm") and not os.path.islink("/dev/shm")
        self.root = "/dev/shm" if shm else "/tmp"
        self._hidden = os.open(self.root, os.O_PATH | os.O_DIRECTORY)  # what the tmpfs hides
        _mount("tmpfs", self.root, "tmpfs", _MS_NOSUID | _MS_NODEV, "mode=0755,size=4m")
        self.work = self.root + WORK_DIR
        os.mkdir(self.work, 0o755)
        self._under_work = [p for p in python if _contains(WORK_DIR, p)]
        for path in python:
            if path not in self._under_work:
                self._bind(path, self.root + path)
        for link in ("lib", "lib64"):
            if os.path.islink(f"/{link}") and os.path.isdir(f"{self.root}/usr/{link}"):
                os.symlink(os.readlink(f"/{link}"), f"{self.root}/{link}")
        os.mkdir(self.root + "/dev", 0o755)
        for device in _DEVICES:
            if os.path.exists(f"/dev/{device}"):
                Path(f"{self.root}/dev/{device}").touch()
                _mount(f"/dev/{device}", f"{self.root}/dev/{device}", None, _MS_BIND)
        _mount(None, self.root, None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | _MS_NOSUID)

    def _bind(self, path: str, target: str) -> None:
        """Bind `path` read-only at `target` (keeping the flags a user namespace locks)."""
        os.makedirs(target, mode=0o755, exist_ok=True)
        source = path
        if _contains(self.root, path):  # hidden under our tmpfs: reach it by descriptor
            source = f"/proc/self/fd/{self._hidden}/{os.path.relpath(path, self.root)}"
        _mount(source, target, None, _MS_BIND | _MS_REC)
        flags = _MS_REMOUNT | _MS_BIND | _MS_RDONLY | _MS_NOSUID | _MS_NODEV
        kept = os.statvfs(target).f_flag
        for st_flag, ms_flag in _KEPT_FLAGS.items():
            if kept & st_flag:
                flags |= ms_flag
        _mount(None, target, None, flags)

    def mount_work(self, uid: int) -> None:
        """A fresh tmpfs at /tmp of the jail, owned by `uid`, for one run of a program."""
        options = f"mode=0711,uid={uid},gid={uid},size=512m,nr_inodes=65536"
        _mount("tmpfs", self.work, "tmpfs", _MS_NOSUID | _MS_NODEV, options)
        for path in self._under_work:  # an interpreter that lives under /tmp itself
            self._bind(path, self.root + path)

    def unmount_work(self) -> None:
        """Drop the run's tmpfs and everything in it (lazily, if something still holds it)."""
        libc().umount2(self.work.encode(), _MNT_DETACH)


class Unconfined:
    """The `unsafe_no_isolation` stand-in for a Jail: a plain temporary work directory."""

    def __init__(self) -> None:
        import tempfile

        self.root = None
        self.work = tempfile.mkdtemp(prefix="cascade-sandbox-")

    def mount_work(self, uid: int) -> None:
        import shutil

        shutil.rmtree(self.work, ignore_errors=True)
        os.mkdir(self.work, 0o700)

    def unmount_work(self) -> None:
        import shutil

        shutil.rmtree(self.work, ignore_errors=True)


def set_limits(limits: dict[str, Any], n_tests: int, nproc: int, fsize: int, files: int) -> None:
    """rlimits of a sandboxed process: address space above its own size, CPU, file size,
    open files, no core dumps, processes (per uid)."""
    fd = os.open("/proc/self/statm", os.O_RDONLY)  # (no file object: this runs per fork)
    try:
        baseline = int(os.read(fd, 256).split()[0]) * resource.getpagesize()
    finally:
        os.close(fd)
    memory = baseline + limits["memory_mb"] * 2**20
    cpu = int(limits["time_limit_s"] * n_tests) + 2
    settings = [
        (resource.RLIMIT_AS, memory),
        (resource.RLIMIT_CPU, cpu),
        (resource.RLIMIT_FSIZE, fsize),
        (resource.RLIMIT_NOFILE, files),
        (resource.RLIMIT_CORE, 0),
        (resource.RLIMIT_NPROC, nproc),
        (resource.RLIMIT_MSGQUEUE, 0),
        (resource.RLIMIT_MEMLOCK, 0),
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


def drop_bounding_set() -> None:
    """No exec in this process or any it forks can ever gain a capability. The worker calls
    it once at start (slow: one credential change per capability); it keeps the
    capabilities it has, and its children inherit the empty bounding set."""
    for cap in range(64):
        if libc().prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            break  # past the last capability this kernel knows


def _drop_capabilities() -> None:
    """No capabilities now or after an exec, even as uid 0 of a user namespace."""
    lib = libc()
    lib.prctl(_PR_SET_SECUREBITS, _SECURE_ALL_LOCKED, 0, 0, 0)
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this thread
    data = (ctypes.c_uint32 * 6)()  # effective, permitted, inheritable: all empty
    _check(lib.capset(header, data), "capset")


def lock_down(
    jail: Jail | Unconfined,
    uid: int | None,
    limits: dict[str, Any],
    n_tests: int,
    *,
    nproc: int,
    fsize: int,
    files: int,
) -> None:
    """Confine this (forked, still privileged) child for good; order matters."""
    lib = libc()
    os.setsid()
    set_limits(limits, n_tests, nproc, fsize, files)  # reads /proc/self: before the chroot
    if jail.root is not None:
        _check(lib.unshare(CLONE_NEWIPC), "unshare(IPC)")  # no SysV/POSIX IPC outlives us
        os.chroot(jail.root)
        os.chdir(WORK_DIR)
        if uid is not None:
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)  # clears every capability
        else:
            _drop_capabilities()
    else:
        os.chdir(jail.work)
    _check(lib.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    lib.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)  # no ptrace, no /proc/<pid>/mem by its uid
    lib.prctl(_PR_SET_PDEATHSIG, 9, 0, 0, 0)  # SIGKILL when the parent goes


# --------------------------------------------------------------------------- second line

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
    """Refuse network, process creation, native code and writes outside `root`, with a clear
    message. A second line only (see the module docstring): it can be switched off."""

    def hook(event: str, args: tuple[Any, ...]) -> None:
        reason = _BLOCKED_EVENTS.get(event)
        if reason is None and event.startswith("os.exec") and _BLOCKED_EVENTS:
            reason = "creating processes"
        if reason is not None:
            raise PermissionError(f"sandbox: {reason} is not allowed ({event})")
        if event == "open" and _PATH_EVENTS:
            path, mode, flags = args
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
