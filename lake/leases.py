"""Write leases: how a commit tells a killed writer's data files from an in-flight writer's.

A commit writes its Parquet files before the short transaction that registers them, so a
writer killed in between leaves files no snapshot refers to (orphans). Another writer's files
look the same until it commits, so a file's age alone cannot say which is which. A lease
can: the process that will register the files (the one calling `commit_many` or, for cluster
workers' files, `run_steps`) holds an exclusive `flock` on `<lake>/writers/<table>/<token>.lock`
(locked before the file gets that name, so it is never seen unlocked while its writer lives)
from before its first file of that table is written until its commit has landed or failed
(and its files were removed). Every data file it writes is named `cascade-<token>-...`.

The operating system releases the lock of a killed process, so the next commit of the table
can take the lock of any other token: that writer is done, and its files under the table's
folder that `cascade_versions` does not list will never be registered (`dead_writers`). A
lock still held is a writer in flight; a token without a lock file (a writer on another
machine of a PostgreSQL lake, a file named before leases existed, an unwritable lake
directory) is never collected here, only by `cascade lake gc` after its grace period.
Writers of other tables write under other folders and are never looked at.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import uuid
from collections.abc import Iterator
from pathlib import Path

LEASE_DIR = "writers"
_FILE_NAME = re.compile(r"cascade-([0-9a-f]{16})-[0-9a-f]{12}-\d{5}\.parquet")


def file_writer(name: str) -> str | None:
    """The lease token of a data file's writer, from its name (None: written without one)."""
    match = _FILE_NAME.fullmatch(name.rsplit("/", 1)[-1])
    return match.group(1) if match else None


def file_prefix(token: str | None) -> str:
    """The start of the name of every data file written under `token`."""
    part = uuid.uuid4().hex
    return f"cascade-{token}-{part[:12]}" if token else f"cascade-{part[:16]}"


class WriteLease:
    """One writer's locks, one per table it writes, held until `release`."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.token = uuid.uuid4().hex[:16]
        self._held: dict[str, tuple[Path, int]] = {}

    def cover(self, table: str) -> None:
        """Hold the lock of `table` before writing its first file (a no-op if held). A lake
        directory where no lock can be made leaves the files to `cascade lake gc`."""
        if table in self._held:
            return
        with contextlib.suppress(OSError):
            folder = self.directory / table
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / f"{self.token}.lock"
            # Locked before it gets its name, so no collector ever sees it unlocked.
            draft = folder / f".{self.token}.draft"
            fd = os.open(draft, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                os.rename(draft, path)
            except OSError:
                os.close(fd)
                with contextlib.suppress(OSError):
                    draft.unlink()
                raise
            self._held[table] = (path, fd)

    def release(self) -> None:
        """The writer is done (its files registered or removed): drop its locks."""
        for path, fd in self._held.values():
            with contextlib.suppress(OSError):
                if _same_file(path, fd):
                    path.unlink()
            os.close(fd)
        self._held.clear()

    def __enter__(self) -> WriteLease:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


@contextlib.contextmanager
def dead_writers(directory: Path, table: str, exclude: str | None = None) -> Iterator[set[str]]:
    """The tokens of `table`'s writers that are done but whose lock files remain (killed ones),
    their locks held while the block runs; when it ends without an error their lock files
    are removed (their orphans are gone)."""
    held: list[tuple[Path, int]] = []
    tokens: set[str] = set()
    folder = directory / table
    try:
        for path in sorted(folder.glob("*.lock")) if folder.is_dir() else []:
            if path.stem == exclude:
                continue
            fd = _try_lock(path)
            if fd is not None:
                held.append((path, fd))
                tokens.add(path.stem)
        yield tokens
        for path, fd in held:
            with contextlib.suppress(OSError):
                if _same_file(path, fd):
                    path.unlink()
    finally:
        for _, fd in held:
            os.close(fd)


def live_writers(directory: Path) -> set[str]:
    """Tokens whose lock some process holds now, over every table (writers in flight)."""
    live: set[str] = set()
    for path in directory.glob("*/*.lock") if directory.is_dir() else []:
        fd = _try_lock(path)
        if fd is None:
            live.add(path.stem)
        else:
            os.close(fd)
    return live


def _try_lock(path: Path) -> int | None:
    """The lock of an existing lock file if nobody holds it, else None (never creates one)."""
    try:
        fd = os.open(path, os.O_RDWR)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    if not _same_file(path, fd):  # removed by its owner or another collector meanwhile
        os.close(fd)
        return None
    return fd


def _same_file(path: Path, fd: int) -> bool:
    try:
        on_disk = os.stat(path)
    except OSError:
        return False
    mine = os.fstat(fd)
    return (on_disk.st_dev, on_disk.st_ino) == (mine.st_dev, mine.st_ino)
