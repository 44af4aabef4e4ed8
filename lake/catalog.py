"""The lake: immutable Parquet files per table version, and a DuckDB catalog of versions.

Layout of a lake directory::

    catalog.duckdb                 one row per committed version (the source of truth)
    tables/<name>/v<N>-<token>/    that version's Parquet files, never modified
    .lock                          held by a committing process

A commit writes its files into a staging folder, renames the folder into place, and only then
inserts the catalog row, all under an exclusive file lock. A process killed at any moment
leaves either the old version or the new one: a folder without a catalog row is invisible and
removed by the next commit. Reads resolve names through the catalog and scan the Parquet files
lazily (DuckDB or Polars), so tables larger than memory work.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import duckdb
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

import schemas.generation  # noqa: F401  (registers the generations table kind)
from lake.files import code_version, file_sha256
from schemas.tables import SchemaError, contract_for, validate_non_null

CATALOG_FILE = "catalog.duckdb"
ROWS_PER_FILE = 1_000_000
NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_PINNED_REF = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)@([0-9]+)")
MODES = ("snapshot", "append")

_CATALOG_DDL = """
CREATE TABLE IF NOT EXISTS versions (
    name VARCHAR NOT NULL,
    version BIGINT NOT NULL,
    kind VARCHAR NOT NULL,
    mode VARCHAR NOT NULL,
    files VARCHAR[] NOT NULL,
    rows BIGINT NOT NULL,
    content_hash VARCHAR NOT NULL,
    arrow_schema VARCHAR NOT NULL,
    parents VARCHAR[] NOT NULL,
    producer VARCHAR NOT NULL,
    params JSON,
    code_version VARCHAR NOT NULL,
    created_at TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (name, version)
)
"""


class LakeError(RuntimeError):
    """A lake operation failed for a reason the user can act on."""


class EmptyCommitError(LakeError):
    """A commit had no rows; nothing was written."""


class LakeBusyError(LakeError):
    """Another process holds the lake's commit lock."""


@dataclass(frozen=True)
class VersionInfo:
    """One committed version of a table, as recorded in the catalog."""

    name: str
    version: int
    kind: str
    mode: str
    files: list[str]
    rows: int
    content_hash: str
    schema: str
    parents: list[str]
    producer: str
    params: dict
    code_version: str
    created_at: datetime

    @property
    def ref(self) -> str:
        return f"{self.name}@{self.version}"


@dataclass(frozen=True)
class TableRef:
    """A table name with an optional pinned version (`name` or `name@3`)."""

    name: str
    version: int | None = None

    @classmethod
    def parse(cls, text: str) -> TableRef:
        name, sep, version = text.partition("@")
        if not NAME_RE.match(name):
            raise LakeError(
                f"invalid table name {name!r}: use letters, digits and underscores, "
                "starting with a letter"
            )
        if not sep:
            return cls(name)
        if not version.isdigit() or int(version) < 1:
            raise LakeError(f"invalid version in {text!r}: expected name@N with N >= 1")
        return cls(name, int(version))

    def __str__(self) -> str:
        return self.name if self.version is None else f"{self.name}@{self.version}"


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _test_pause(point: str) -> None:
    """Let tests kill a committing process at a named point (CASCADE_TEST_PAUSE_AT=point)."""
    if os.environ.get("CASCADE_TEST_PAUSE_AT") == point:
        print(f"PAUSED {point}", flush=True)
        time.sleep(float(os.environ.get("CASCADE_TEST_PAUSE_SECONDS", "30")))


def _as_batches(
    data: pa.Table | pl.DataFrame | Iterable[pa.RecordBatch],
) -> Iterator[pa.RecordBatch]:
    if isinstance(data, pl.DataFrame):
        data = data.to_arrow()
    if isinstance(data, pa.Table):
        yield from data.to_batches(max_chunksize=256_000)
        if data.num_rows == 0:
            yield pa.RecordBatch.from_pylist([], schema=data.schema)
        return
    if isinstance(data, pa.RecordBatchReader):
        yield from data
        return
    for batch in data:
        if isinstance(batch, pl.DataFrame):
            batch = batch.to_arrow()
        if isinstance(batch, pa.Table):
            yield from batch.to_batches(max_chunksize=256_000)
        else:
            yield batch


class Lake:
    """A lake directory: commit versions, resolve refs, read lazily, query with SQL."""

    def __init__(self, path: str | os.PathLike[str], lock_timeout: float | None = None) -> None:
        self.path = Path(path)
        self.lock_timeout = (
            float(os.environ.get("CASCADE_LOCK_TIMEOUT", "30"))
            if lock_timeout is None
            else lock_timeout
        )
        self.path.mkdir(parents=True, exist_ok=True)
        (self.path / "tables").mkdir(exist_ok=True)
        if not (self.path / CATALOG_FILE).exists():
            with self._lock(), self._catalog(write=True) as con:
                con.execute(_CATALOG_DDL)

    # -- locking and catalog access -------------------------------------------------------

    @contextlib.contextmanager
    def _lock(self) -> Iterator[None]:
        """Exclusive commit lock; waits up to lock_timeout seconds, then LakeBusyError."""
        lock_path = self.path / ".lock"
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        deadline = time.monotonic() + self.lock_timeout
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "?"
                        raise LakeBusyError(
                            f"lake {self.path} is busy: another process (pid {holder}) is "
                            f"committing; waited {self.lock_timeout:.0f}s"
                        ) from None
                    time.sleep(0.05)
            os.ftruncate(fd, 0)
            os.pwrite(fd, str(os.getpid()).encode(), 0)
            yield
        finally:
            with contextlib.suppress(OSError):
                fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    @contextlib.contextmanager
    def _catalog(self, write: bool = False) -> Iterator[duckdb.DuckDBPyConnection]:
        """A short-lived catalog connection; read-only unless writing under the lock."""
        path = str(self.path / CATALOG_FILE)
        delay = 0.02
        deadline = time.monotonic() + max(self.lock_timeout, 5.0)
        while True:
            try:
                con = duckdb.connect(path, read_only=not write)
                break
            except duckdb.IOException as exc:
                # Another process has the catalog open for a commit (milliseconds): retry.
                if time.monotonic() >= deadline:
                    raise LakeBusyError(f"lake {self.path} catalog is busy: {exc}") from None
                time.sleep(delay)
                delay = min(delay * 2, 0.5)
        try:
            yield con
        finally:
            con.close()

    # -- catalog queries ------------------------------------------------------------------

    def _rows(self, where: str = "", params: list | None = None) -> list[VersionInfo]:
        with self._catalog() as con:
            rows = con.execute(
                "SELECT name, version, kind, mode, files, rows, content_hash, arrow_schema, "
                f"parents, producer, params, code_version, created_at FROM versions {where} "
                "ORDER BY name, version",
                params or [],
            ).fetchall()
        return [
            VersionInfo(
                name=r[0],
                version=r[1],
                kind=r[2],
                mode=r[3],
                files=list(r[4]),
                rows=r[5],
                content_hash=r[6],
                schema=r[7],
                parents=list(r[8]),
                producer=r[9],
                params=json.loads(r[10]) if r[10] else {},
                code_version=r[11],
                created_at=r[12],
            )
            for r in rows
        ]

    def tables(self) -> list[VersionInfo]:
        """The latest version of every table."""
        latest: dict[str, VersionInfo] = {}
        for info in self._rows():
            latest[info.name] = info
        return list(latest.values())

    def versions(self, name: str) -> list[VersionInfo]:
        """Every version of a table, oldest first (empty if the table does not exist)."""
        return self._rows("WHERE name = ?", [name])

    def has(self, name: str) -> bool:
        return bool(self.versions(name))

    def resolve(self, ref: str | TableRef) -> VersionInfo:
        """The version a ref names: `name` is the latest, `name@N` a pinned one."""
        ref = TableRef.parse(ref) if isinstance(ref, str) else ref
        versions = self.versions(ref.name)
        if not versions:
            known = ", ".join(sorted(v.name for v in self.tables())) or "none"
            raise LakeError(f"no table {ref.name!r} in lake {self.path} (tables: {known})")
        if ref.version is None:
            return versions[-1]
        for info in versions:
            if info.version == ref.version:
                return info
        raise LakeError(
            f"table {ref.name!r} has no version {ref.version} (versions 1..{versions[-1].version})"
        )

    def files(self, ref: str | TableRef) -> list[Path]:
        """Absolute Parquet paths that make up a ref (all increments up to N in append mode)."""
        info = self.resolve(ref)
        if info.mode == "append":
            chain = [v for v in self.versions(info.name) if v.version <= info.version]
        else:
            chain = [info]
        return [self.path / f for v in chain for f in v.files]

    # -- reading --------------------------------------------------------------------------

    def scan(self, ref: str | TableRef) -> pl.LazyFrame:
        """A lazy Polars scan of a ref; nothing is read until collected."""
        files = self.files(ref)
        return pl.scan_parquet([str(f) for f in files])

    def read(self, ref: str | TableRef, columns: list[str] | None = None) -> pa.Table:
        """Read a ref into memory as an Arrow table (use scan/sql for large tables)."""
        files = self.files(ref)
        tables = [pq.read_table(f, columns=columns) for f in files]
        if len(tables) == 1:
            return tables[0]
        return pa.concat_tables(tables, promote_options="permissive")

    def verify_hash(self, ref: str | TableRef, expected: str | None = None) -> VersionInfo:
        """Recompute a version's content hash from its files; raise if it differs."""
        info = self.resolve(ref)
        actual = file_sha256(self.path / f for f in info.files)
        want = expected or info.content_hash
        if actual != want:
            raise LakeError(
                f"{info.ref}: content hash {actual[:16]}... does not match expected {want[:16]}..."
            )
        return info

    def connect(self, query: str | None = None) -> duckdb.DuckDBPyConnection:
        """An in-memory DuckDB connection with a view per table, `versions` and `drops`.

        `name` is the latest version and `"name@N"` a pinned one; views scan Parquet lazily.
        Given the query, only the pinned versions it mentions get views, so opening stays
        cheap for append tables with thousands of versions.
        """
        con = duckdb.connect()
        infos = self._rows()
        by_name: dict[str, list[VersionInfo]] = {}
        for info in infos:
            by_name.setdefault(info.name, []).append(info)
        pinned = None if query is None else set(_PINNED_REF.findall(query))
        for name, chain in by_name.items():
            for info in chain:
                latest = info is chain[-1]
                if not latest and pinned is not None and (name, str(info.version)) not in pinned:
                    continue
                if info.mode == "append":
                    files = [f for v in chain if v.version <= info.version for f in v.files]
                else:
                    files = info.files
                paths = [str(self.path / f) for f in files]
                source = f"read_parquet({_sql_list(paths)}, union_by_name = true)"
                con.execute(f'CREATE VIEW "{name}@{info.version}" AS SELECT * FROM {source}')
            con.execute(f'CREATE VIEW "{name}" AS SELECT * FROM "{name}@{chain[-1].version}"')
        with self._catalog() as cat:
            arrow = cat.sql(
                "SELECT name, version, kind, mode, rows, content_hash, parents, producer, "
                "params, code_version, created_at, files, arrow_schema FROM versions "
                "ORDER BY name, version"
            ).to_arrow_table()
        con.register("_versions_arrow", arrow)
        con.execute("CREATE TABLE versions AS SELECT * FROM _versions_arrow")
        con.unregister("_versions_arrow")
        if "drops" not in by_name:
            con.execute(
                'CREATE VIEW drops AS SELECT NULL::VARCHAR AS "table", NULL::BIGINT AS version, '
                "NULL::VARCHAR AS row_id, NULL::VARCHAR AS step, NULL::VARCHAR AS reason, "
                "NULL::VARCHAR AS detail WHERE false"
            )
        return con

    def sql(self, query: str) -> duckdb.DuckDBPyRelation:
        """Run a query over the lake; see `connect` for the names it can use."""
        return self.connect(query).sql(query)

    # -- writing --------------------------------------------------------------------------

    def commit(
        self,
        name: str,
        data: pa.Table | pl.DataFrame | Iterable[pa.RecordBatch],
        *,
        kind: str = "generic",
        parents: list[str] | None = None,
        producer: str = "python",
        params: dict | None = None,
        mode: str = "snapshot",
        allow_empty: bool = False,
    ) -> VersionInfo:
        """Write a new version of `name` atomically and record it in the catalog.

        `data` may be a stream of record batches, so tables larger than memory can be
        written. The schema is checked against the contract of `kind`. An empty table is
        refused unless `allow_empty` (an empty version is almost always a mistake upstream).
        """
        TableRef.parse(name)
        if mode not in MODES:
            raise LakeError(f"mode must be one of {MODES}, got {mode!r}")
        contract = contract_for(kind)
        parents = list(parents or [])
        params = dict(params or {})
        table_dir = self.path / "tables" / name
        table_dir.mkdir(parents=True, exist_ok=True)
        staging = table_dir / f"_staging-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        staging.mkdir()
        try:
            files, rows, schema = self._write_files(data, staging, name, contract)
            if rows == 0 and not allow_empty:
                raise EmptyCommitError(f"refusing to commit an empty version of {name!r}")
            with self._lock():
                self._remove_orphans(table_dir)
                existing = self.versions(name)
                if existing and existing[-1].kind != kind:
                    raise SchemaError(
                        f"table {name!r} is of kind {existing[-1].kind!r}, cannot commit kind {kind!r}"
                    )
                if existing and existing[-1].mode != mode:
                    raise LakeError(f"table {name!r} is {existing[-1].mode}-mode, not {mode!r}")
                version = existing[-1].version + 1 if existing else 1
                final = table_dir / f"v{version}-{uuid.uuid4().hex[:8]}"
                content_hash = file_sha256(staging / f for f in files)
                _test_pause("before_rename")
                os.rename(staging, final)
                _fsync_dir(table_dir)
                _test_pause("after_rename")
                rel = [str(final.relative_to(self.path) / f) for f in files]
                info = VersionInfo(
                    name=name,
                    version=version,
                    kind=kind,
                    mode=mode,
                    files=rel,
                    rows=rows,
                    content_hash=content_hash,
                    schema=schema.to_string(show_schema_metadata=False),
                    parents=parents,
                    producer=producer,
                    params=params,
                    code_version=code_version(),
                    created_at=datetime.now(UTC),
                )
                with self._catalog(write=True) as con:
                    con.execute(
                        "INSERT INTO versions VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        [
                            info.name,
                            info.version,
                            info.kind,
                            info.mode,
                            info.files,
                            info.rows,
                            info.content_hash,
                            info.schema,
                            info.parents,
                            info.producer,
                            json.dumps(info.params, default=str),
                            info.code_version,
                            info.created_at,
                        ],
                    )
                    con.execute("CHECKPOINT")
                _test_pause("after_catalog")
                return info
        finally:
            if staging.exists():
                shutil.rmtree(staging, ignore_errors=True)

    def _write_files(
        self,
        data: pa.Table | pl.DataFrame | Iterable[pa.RecordBatch],
        staging: Path,
        name: str,
        contract,
    ) -> tuple[list[str], int, pa.Schema]:
        files: list[str] = []
        rows = 0
        schema: pa.Schema | None = None
        writer: pq.ParquetWriter | None = None
        rows_in_file = 0
        try:
            for batch in _as_batches(data):
                if schema is None:
                    schema = batch.schema.remove_metadata()
                    contract.validate(schema, name)
                elif batch.schema.remove_metadata() != schema:
                    try:
                        batch = pa.Table.from_batches([batch]).cast(schema).to_batches()[0]
                    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, IndexError) as exc:
                        raise SchemaError(
                            f"table {name!r}: batch schema changed mid-stream ({exc})"
                        ) from None
                validate_non_null(pa.Table.from_batches([batch]), contract, name)
                if batch.num_rows == 0 and rows > 0:
                    continue
                if writer is None or rows_in_file >= ROWS_PER_FILE:
                    if writer is not None:
                        writer.close()
                    fname = f"part-{len(files):05d}.parquet"
                    files.append(fname)
                    writer = pq.ParquetWriter(staging / fname, schema, compression="zstd")
                    rows_in_file = 0
                writer.write_batch(batch, row_group_size=128_000)
                rows += batch.num_rows
                rows_in_file += batch.num_rows
                _test_pause("mid_write")
        finally:
            if writer is not None:
                writer.close()
        if schema is None:
            raise EmptyCommitError(f"refusing to commit {name!r}: no data was given")
        for fname in files:
            with open(staging / fname, "rb") as fh:
                os.fsync(fh.fileno())
        return files, rows, schema

    def _remove_orphans(self, table_dir: Path) -> None:
        """Delete staging and version folders no catalog row points at (left by a crash)."""
        referenced = {Path(f).parts[2] for v in self.versions(table_dir.name) for f in v.files}
        for child in table_dir.iterdir():
            if child.is_dir() and child.name not in referenced:
                if child.name.startswith("_staging-") and _pid_alive(child.name.split("-")[1]):
                    continue  # another committer is still writing it
                shutil.rmtree(child, ignore_errors=True)


def _pid_alive(pid: str) -> bool:
    if not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _sql_list(paths: list[str]) -> str:
    return "[" + ", ".join("'" + p.replace("'", "''") + "'" for p in paths) + "]"
