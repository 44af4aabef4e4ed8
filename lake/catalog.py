"""The lake: tables on DuckLake, with cascade's versions, content hashes and lineage on top.

DuckLake keeps the data as Parquet files and a SQL catalog (SQLite by default, a DuckDB file
or PostgreSQL when chosen) with snapshots, time travel and multi-table transactions. cascade
adds only its own meaning, in a `cascade_versions` table inside the same catalog:

- `name@N`: the N-th version of a table, mapped to the DuckLake snapshot that committed it
  (the snapshot's commit info names the versions it holds). `name` is the latest version.
- snapshot-mode tables get new contents each version (`CREATE OR REPLACE`); append-mode tables
  (generations, drops) add rows, and version N reads every row added up to N.
- a content hash per version over every data file that reading the version returns
  (append-mode versions chain the previous version's hash), so tampering with any of them is
  detected; the parents, producer, parameters, code version and build id of each version.

A commit writes its Parquet files first, outside any transaction, then registers them, their
versions and cascade's rows in one short DuckLake transaction: all of it lands or none. The
files may also have been written elsewhere (cluster workers writing straight into the data path
with `lake.storage.write_data_files`): a `TableWrite` then carries their `DataFiles` and the
commit only registers them. Readers
attach read-only and see the last committed snapshot; they never wait for a writer. A writer
that loses a race retries with backoff and then fails with one sentence. Files of a killed
writer are invisible (no catalog row points at them); the next commit of the same table
deletes them (its writer's lease lock is free: `lake.leases`), and `remove_orphans`
(`cascade lake gc`) deletes any other orphan older than its grace period.

Layout of a lake directory::

    lake.json          what kind of catalog and where the data lives
    catalog.sqlite     the DuckLake catalog (or catalog.ducklake, or a PostgreSQL database)
    data/main/<table>/ the Parquet files, never modified
    writers/<table>/   the lease locks of writers in flight (or killed)

A lake shared by a cluster keeps its catalog in PostgreSQL and its data on an S3-compatible
store; `lake.json` names both and any machine with a copy of it (and the credentials in its
environment: libpq's `PGPASSWORD`/`PGUSER`..., `AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY`) opens
the same lake::

    {"format": "cascade-ducklake/1", "catalog": "postgres",
     "postgres": "host=db.internal port=5432 dbname=lake",
     "data_path": "s3://bucket/lake/",
     "s3": {"endpoint": "store.internal:8333", "url_style": "path", "use_ssl": false}}

Two writers of one table never both commit the same version, on any catalog: DuckLake merges
concurrent transactions whose changes do not overlap (two that only insert rows both commit;
checked on PostgreSQL 15), so each commit also deletes and re-inserts its table's row in
`cascade_heads`; of two commits that read version N, the second then fails with DuckLake's
"Transaction conflict ... another transaction has deleted inlined data" and is retried from
scratch on top of the first (N+2). Readers see the last committed snapshot and never wait
(tests/test_lake.py, and tests/test_lake_remote.py on PostgreSQL and S3).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb
import pyarrow as pa

import schemas.difficulty  # noqa: F401  (registers the difficulty table kind)
import schemas.environment  # noqa: F401  (registers the episodes table kind)
import schemas.evaluation  # noqa: F401  (registers the evaluations table kind)
import schemas.generation  # noqa: F401  (registers the generations table kind)
import schemas.preferences  # noqa: F401  (registers the preference_pairs table kind)
from lake.leases import LEASE_DIR, WriteLease, dead_writers, file_writer, live_writers
from lake.provenance import code_version
from lake.storage import (
    ROWS_PER_FILE,
    DataFiles,
    DataStore,
    NoDataError,
    S3Settings,
    StorageError,
    write_data_files,
)
from schemas.tables import SchemaError, contract_for

CONFIG_FILE = "lake.json"
FORMAT = "cascade-ducklake/1"
ALIAS = "lake"
NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
RESERVED_PREFIX = "cascade_"
MODES = ("snapshot", "append")
CATALOGS = ("sqlite", "duckdb", "postgres")
_PINNED_REF = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)@([0-9]+)")
_COMMIT_MESSAGE = "cascade commit"
_TRANSIENT = (
    "database is locked",
    "conflict",
    "busy",
    "Failed to commit",
    "does not have any",
    # another writer changed a schema between this connection's catalog read and its query
    "Failed to read inlined data",
)

_VERSIONS_DDL = """
CREATE TABLE IF NOT EXISTS {alias}.cascade_versions (
    name VARCHAR, version BIGINT, kind VARCHAR, mode VARCHAR, rows BIGINT, rows_added BIGINT,
    files VARCHAR[], file_hashes VARCHAR[], content_hash VARCHAR, arrow_schema VARCHAR,
    parents VARCHAR[], producer VARCHAR, params VARCHAR, code_version VARCHAR,
    build_id VARCHAR, created_at TIMESTAMPTZ
)
"""
_HEADS_DDL = "CREATE TABLE IF NOT EXISTS {alias}.cascade_heads (name VARCHAR, version BIGINT)"


_DUCKDB_CATALOGS: dict[str, duckdb.DuckDBPyConnection] = {}
"""The one attachment per process of each DuckDB-file catalog (see `Lake._open`)."""


class LakeError(RuntimeError):
    """A lake operation failed for a reason the user can act on."""


class EmptyCommitError(LakeError):
    """A commit had no rows; nothing was written."""


class LakeBusyError(LakeError):
    """Other writers kept the catalog busy past the retry budget."""


class LakeConflictError(LakeError):
    """Another process committed the version this commit was written for."""


@dataclass(frozen=True)
class VersionInfo:
    """One committed version of a table, as recorded in `cascade_versions`."""

    name: str
    version: int
    kind: str
    mode: str
    rows: int
    rows_added: int
    files: list[str]
    file_hashes: list[str]
    content_hash: str
    schema: str
    parents: list[str]
    producer: str
    params: dict
    code_version: str
    build_id: str
    created_at: datetime
    snapshot_id: int | None = None

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


if TYPE_CHECKING:  # polars only where a method needs it (0.1-0.2 s to import)
    import polars as pl

    Data = pa.Table | pl.DataFrame | Iterable[pa.RecordBatch]


@dataclass
class TableWrite:
    """One table version to commit: the rows, how to store them, and where they came from.

    `data` may be a callable, evaluated when its turn comes (after the writes before it),
    and a write with `skip_if_empty` and no rows is left out of the commit. It may also be
    `DataFiles` already written under the lake's data path (by cluster workers): the commit
    then registers them as they are.
    `expect_version` pins the version number the data was written for (drops rows name the
    output version they belong to); if another process took it first the commit fails with
    LakeConflictError instead of recording rows under the wrong version.
    """

    name: str
    data: Data | DataFiles | Callable[[], Data | DataFiles]
    kind: str = "generic"
    mode: str = "snapshot"
    parents: list[str] = field(default_factory=list)
    producer: str = "python"
    params: dict = field(default_factory=dict)
    allow_empty: bool = False
    expect_version: int | None = None
    skip_if_empty: bool = False


@dataclass
class _Written:
    write: TableWrite
    files: list[str]  # relative to the data path
    hashes: list[str]
    rows: int
    schema: pa.Schema


# -- extensions and configuration -------------------------------------------------------------


def extension_path(name: str) -> Path:
    """The DuckDB extension binary shipped by its PyPI package (`duckdb-extension-<name>`).

    Loading it by path keeps signature checking on and needs no network or home directory.
    """
    import importlib

    module_name = f"duckdb_extension_{name}"
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        raise LakeError(
            f"the DuckDB extension {name!r} is not installed: pip install "
            f"duckdb-extension-{name.replace('_', '-')}=={duckdb.__version__}"
        ) from None
    path = Path(module.__file__).parent / "extensions" / f"v{duckdb.__version__}"
    path = path / f"{name}.duckdb_extension"
    if not path.is_file():
        raise LakeError(
            f"{module_name} does not ship a build for DuckDB {duckdb.__version__}; pin "
            f"duckdb-extension-{name.replace('_', '-')} to the same version as duckdb"
        )
    return path


@dataclass(frozen=True)
class LakeConfig:
    """Where a lake's catalog and data live (`lake.json`)."""

    catalog: str = "sqlite"  # sqlite | duckdb | postgres
    data_path: str = "data"  # relative to the lake directory, an absolute path, or s3://...
    postgres: str | None = None  # libpq connection string when catalog = postgres
    s3: dict | None = None  # S3Settings when data_path is s3:// (keys from the environment)

    def __post_init__(self) -> None:
        if self.catalog not in CATALOGS:
            raise LakeError(f"catalog must be one of {', '.join(CATALOGS)}, got {self.catalog!r}")
        if self.catalog == "postgres" and not self.postgres:
            raise LakeError("a postgres catalog needs a connection string ('postgres' key)")
        if "password=" in (self.postgres or ""):
            raise LakeError(
                "lake.json must not hold the PostgreSQL password: set PGPASSWORD (or use "
                "~/.pgpass) in the environment instead"
            )
        if "://" in self.data_path and not self.data_path.startswith("s3://"):
            raise LakeError(
                f"data_path {self.data_path!r}: only local paths and s3:// URIs are supported"
            )
        if self.s3 is not None and not self.data_path.startswith("s3://"):
            raise LakeError("an 's3' block needs an s3:// data_path")
        try:
            S3Settings.parse(self.s3)
        except (StorageError, TypeError) as exc:
            raise LakeError(str(exc)) from None

    @classmethod
    def read(cls, path: Path) -> LakeConfig:
        try:
            raw = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise LakeError(f"{path}: cannot read the lake configuration ({exc})") from None
        if raw.get("format") != FORMAT:
            raise LakeError(f"{path}: unknown lake format {raw.get('format')!r}")
        return cls(**{k: v for k, v in raw.items() if k != "format"})

    def write(self, path: Path) -> None:
        body: dict = {"format": FORMAT, "catalog": self.catalog, "data_path": self.data_path}
        if self.postgres:
            body["postgres"] = self.postgres
        if self.s3 is not None:
            body["s3"] = self.s3
        path.write_text(json.dumps(body, indent=2) + "\n")

    def extensions(self) -> list[str]:
        needed = ["ducklake"]
        if self.catalog == "sqlite":
            needed.append("sqlite_scanner")
        if self.catalog == "postgres":
            needed.append("postgres_scanner")
        if self.data_path.startswith("s3://"):
            needed.append("httpfs")
        return needed


def _test_pause(point: str) -> None:
    """Let tests kill a committing process at a named point (CASCADE_TEST_PAUSE_AT=point)."""
    if os.environ.get("CASCADE_TEST_PAUSE_AT") == point:
        print(f"PAUSED {point}", flush=True)
        time.sleep(float(os.environ.get("CASCADE_TEST_PAUSE_SECONDS", "30")))


def _sql_str(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _transient(exc: Exception) -> bool:
    text = str(exc)
    return isinstance(exc, duckdb.Error) and any(t in text for t in _TRANSIENT)


def chain_hash(previous: str | None, file_hashes: list[str]) -> str:
    """A version's content hash: its files' sha256s, after the previous version's hash.

    Snapshot-mode versions have no previous; append-mode version N chains version N-1, so
    its hash covers every file that reading version N returns.
    """
    digest = hashlib.sha256()
    if previous:
        digest.update(previous.encode())
    for h in file_hashes:
        digest.update(h.encode())
    return digest.hexdigest()


# -- the lake ---------------------------------------------------------------------------------


class Lake:
    """A lake directory: commit versions, resolve refs, read, query with SQL."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        create: bool = True,
        config: LakeConfig | None = None,
        read_only: bool = False,
        busy_timeout: float | None = None,
    ) -> None:
        self.path = Path(path)
        self.read_only = read_only
        self.busy_timeout = (
            float(os.environ.get("CASCADE_BUSY_TIMEOUT", "30"))
            if busy_timeout is None
            else busy_timeout
        )
        config_file = self.path / CONFIG_FILE
        if (self.path / "catalog.duckdb").exists() and not config_file.exists():
            raise LakeError(
                f"{self.path} was written by an earlier cascade (its own catalog.duckdb, not "
                f"DuckLake); convert it with `cascade lake migrate {self.path} NEW_DIR`, or "
                "rebuild it by re-running its ingest and build commands into a new --lake"
            )
        self.created = False
        self._store: DataStore | None = None
        self._checked = False
        if config_file.exists():
            self.config = LakeConfig.read(config_file)
            if not read_only:
                self._prepare_storage()
        elif not create or read_only:
            raise LakeError(
                f"no lake at {self.path} (no {CONFIG_FILE}); a command that writes creates one"
            )
        else:
            self.path.mkdir(parents=True, exist_ok=True)
            self.config = config or LakeConfig()
            self._initialize()
            self.created = True
            self._checked = True
        self._con: duckdb.DuckDBPyConnection | None = None
        self._lock = threading.RLock()
        self._snapshots: dict[tuple[str, int], int] = {}

    # -- connections ----------------------------------------------------------------------

    @property
    def data_path(self) -> str:
        """Absolute data path (a directory; object-store URIs are kept as given)."""
        data = self.config.data_path
        if "://" in data:
            return data.rstrip("/") + "/"
        p = Path(data)
        return str((p if p.is_absolute() else self.path / p).resolve()) + "/"

    @property
    def store(self) -> DataStore:
        """The data path as a filesystem; picklable, so cluster workers can write into it."""
        if self._store is None:
            try:
                self._store = DataStore(
                    self.data_path,
                    S3Settings.parse(self.config.s3)
                    if self.data_path.startswith("s3://")
                    else None,
                )
            except StorageError as exc:
                raise LakeError(str(exc)) from None
        return self._store

    def catalog_uri(self) -> str:
        """The `ducklake:` URI of the catalog database."""
        if self.config.catalog == "sqlite":
            return f"ducklake:sqlite:{(self.path / 'catalog.sqlite').resolve()}"
        if self.config.catalog == "duckdb":
            return f"ducklake:{(self.path / 'catalog.ducklake').resolve()}"
        return f"ducklake:postgres:{self.config.postgres}"

    def attach_statements(
        self, read_only: bool = True, alias: str = ALIAS, *, reveal_secrets: bool = False
    ) -> list[str]:
        """The SQL a DuckDB client runs to open this lake (offline: extensions by path).

        An S3 data path adds a `CREATE SECRET` whose keys are `getenv(...)` calls the DuckDB
        CLI evaluates (the values themselves with `reveal_secrets`, for this process only).
        """
        loads = [f"LOAD {_sql_str(str(extension_path(n)))}" for n in self.config.extensions()]
        try:
            secrets = self.store.duckdb_secret(reveal=reveal_secrets)
        except StorageError as exc:
            raise LakeError(f"lake {self.path}: {exc}") from None
        options = [f"DATA_PATH {_sql_str(self.data_path)}", "OVERRIDE_DATA_PATH true"]
        if read_only:
            options.append("READ_ONLY")
        attach = f"ATTACH {_sql_str(self.catalog_uri())} AS {alias} ({', '.join(options)})"
        return [*loads, *secrets, attach]

    def _open(
        self, read_only: bool, config: dict[str, object] | None = None
    ) -> duckdb.DuckDBPyConnection:
        if self.config.catalog == "duckdb":
            # A DuckDB-file catalog can be attached read-write once per process (and by one
            # process): every connection of a writing process is a cursor of that attachment.
            # A read-only Lake, or a connection of its own (`config`), attaches it READ_ONLY
            # instead, which any number of connections may do while nobody writes it.
            key = str(self.path.resolve())
            shared = _DUCKDB_CATALOGS.get(key)
            if shared is not None and config is None:
                return shared.cursor()
            if shared is not None:
                raise LakeError(
                    f"the DuckDB-file catalog of {self.path} is attached read-write by this "
                    "process, so it cannot get a read-only connection of its own; open it "
                    "from a process that does not write it"
                )
            if self.read_only or config is not None:
                return self._attach(read_only=True, config=config)
            _DUCKDB_CATALOGS[key] = self._attach(read_only=False)
            return _DUCKDB_CATALOGS[key].cursor()
        return self._attach(read_only, config)

    def _attach(
        self, read_only: bool, config: dict[str, object] | None = None
    ) -> duckdb.DuckDBPyConnection:
        con = duckdb.connect(config=config or {})
        statements = self.attach_statements(read_only=read_only, reveal_secrets=True)
        for sql in statements[:-1]:
            con.execute(sql)
        delay = 0.05
        deadline = time.monotonic() + self.busy_timeout
        while True:
            try:
                con.execute(statements[-1])
                return con
            except duckdb.Error as exc:
                if not _transient(exc) or time.monotonic() >= deadline:
                    raise LakeError(f"cannot open lake {self.path}: {_one_line(exc)}") from None
                time.sleep(delay)
                delay = min(delay * 2, 1.0)

    def _initialize(self) -> None:
        self._prepare_storage()
        self.config.write(self.path / CONFIG_FILE)
        con = self._open(read_only=False)
        try:
            self._create_cascade_tables(con)
        finally:
            con.close()

    def _prepare_storage(self) -> None:
        """A new SQLite catalog in WAL mode (readers never wait), and the data directory."""
        if self.config.catalog == "sqlite" and not (self.path / "catalog.sqlite").exists():
            import sqlite3

            db = sqlite3.connect(self.path / "catalog.sqlite")
            db.execute("PRAGMA journal_mode=WAL")
            db.close()
        if "://" not in self.config.data_path:
            Path(self.data_path).mkdir(parents=True, exist_ok=True)

    @staticmethod
    def _create_cascade_tables(con: duckdb.DuckDBPyConnection) -> None:
        con.execute(f"CALL {ALIAS}.set_option('data_inlining_row_limit', 0)")
        con.execute(_VERSIONS_DDL.format(alias=ALIAS))
        con.execute(_HEADS_DDL.format(alias=ALIAS))
        for table in ("cascade_versions", "cascade_heads"):
            con.execute(
                f"CALL {ALIAS}.set_option('data_inlining_row_limit', 1000000, "
                f"table_name => '{table}')"
            )

    @property
    def con(self) -> duckdb.DuckDBPyConnection:
        """This Lake's own connection (opened on first use; read-write unless read_only).

        A lake whose `lake.json` was written by hand gets cascade's tables on first use.
        """
        if self._con is None:
            con = self._open(read_only=self.read_only)
            if not self._checked:
                # a probe, not duckdb_tables() (3x slower), and no bound parameters anywhere
                # on the read path: DuckDB imports pandas (0.3-0.5 s) to convert them
                try:
                    con.execute(f"SELECT 1 FROM {ALIAS}.cascade_versions LIMIT 0")
                    found = True
                except duckdb.CatalogException:
                    found = False
                if not found:
                    if self.read_only:
                        con.close()
                        raise LakeError(
                            f"the lake at {self.path} has no cascade tables yet; a command "
                            "that writes sets them up"
                        )
                    self._create_cascade_tables(con)
                self._checked = True
            self._con = con
        return self._con

    def close(self) -> None:
        if self._con is not None:
            self._con.close()
            self._con = None

    def _query(self, sql: str, params: list | None = None) -> list[tuple]:
        """A catalog read, retried while another process is mid-commit."""
        delay = 0.05
        deadline = time.monotonic() + self.busy_timeout
        with self._lock:
            while True:
                try:
                    return self.con.execute(sql, params or []).fetchall()
                except duckdb.Error as exc:
                    if not _transient(exc) or time.monotonic() >= deadline:
                        raise
                    self.close()
                    time.sleep(delay)
                    delay = min(delay * 2, 1.0)

    # -- catalog queries ------------------------------------------------------------------

    def _rows(self, where: str = "", params: list | None = None) -> list[VersionInfo]:
        rows = self._query(
            "SELECT name, version, kind, mode, rows, rows_added, files, file_hashes, "
            "content_hash, arrow_schema, parents, producer, params, code_version, build_id, "
            f"created_at FROM {ALIAS}.cascade_versions {where} ORDER BY name, version",
            params,
        )
        snapshots = self._snapshot_ids({(r[0], r[1]) for r in rows})
        return [
            VersionInfo(
                name=r[0],
                version=r[1],
                kind=r[2],
                mode=r[3],
                rows=r[4],
                rows_added=r[5],
                files=list(r[6]),
                file_hashes=list(r[7]),
                content_hash=r[8],
                schema=r[9],
                parents=list(r[10]),
                producer=r[11],
                params=json.loads(r[12]) if r[12] else {},
                code_version=r[13],
                build_id=r[14],
                created_at=r[15],
                snapshot_id=snapshots.get((r[0], r[1])),
            )
            for r in rows
        ]

    def _snapshot_ids(self, wanted: set[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """DuckLake snapshot of each (name, version), read from the snapshots' commit info."""
        if not wanted <= self._snapshots.keys():
            for snapshot_id, extra in self._query(
                f"SELECT snapshot_id, commit_extra_info FROM {ALIAS}.snapshots() "
                f"WHERE commit_message = '{_COMMIT_MESSAGE}'"  # a constant: see `con`
            ):
                for name, version in json.loads(extra)["versions"].items():
                    self._snapshots[(name, version)] = snapshot_id
        return self._snapshots

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
        return bool(self._query(f"SELECT 1 FROM {ALIAS}.cascade_versions WHERE name = ?", [name]))

    def resolve(self, ref: str | TableRef) -> VersionInfo:
        """The version a ref names: `name` is the latest, `name@N` a pinned one."""
        ref = TableRef.parse(ref) if isinstance(ref, str) else ref
        versions = self.versions(ref.name)
        if not versions:
            known = ", ".join(sorted(v.name for v in self.tables())) or "none"
            raise LakeError(f"no table {ref.name!r} in the lake at {self.path} (tables: {known})")
        if ref.version is None:
            return versions[-1]
        for info in versions:
            if info.version == ref.version:
                return info
        raise LakeError(
            f"table {ref.name!r} has no version {ref.version} (versions 1..{versions[-1].version})"
        )

    def files(self, ref: str | TableRef) -> list[str]:
        """The data files DuckLake reads for a ref, as absolute paths (or URIs)."""
        info = self.resolve(ref)
        rows = self._query(
            "SELECT data_file, delete_file FROM ducklake_list_files(?, ?, snapshot_version => ?)",
            [ALIAS, info.name, info.snapshot_id],
        )
        if any(r[1] for r in rows):
            raise LakeError(
                f"{info.ref} has row deletions made outside cascade; read it with `cascade sql`"
            )
        return [r[0] for r in rows]

    def readable_files(self) -> list[str]:
        """Every file that reading this lake's versions opens, as absolute paths (or URIs).

        The data files cascade recorded for each version, and what DuckLake lists for each
        table's latest version (its delete files too, where rows were deleted outside
        cascade): the files a connection barred from all others still needs.
        """
        infos = self._rows()
        found = {self._absolute(f) for info in infos for f in info.files}
        latest = {info.name: info for info in infos}
        for info in latest.values():
            for data, delete in self._query(
                "SELECT data_file, delete_file FROM ducklake_list_files(?, ?, "
                "snapshot_version => ?)",
                [ALIAS, info.name, info.snapshot_id],
            ):
                found.update(f for f in (data, delete) if f)
        return sorted(found)

    # -- reading --------------------------------------------------------------------------

    def _from(self, info: VersionInfo) -> str:
        return f'{ALIAS}."{info.name}" AT (VERSION => {info.snapshot_id})'

    def scan(self, ref: str | TableRef) -> pl.LazyFrame:
        """A lazy Polars scan of a ref; nothing is read until collected."""
        import polars as pl

        files = self.files(ref)
        if not files:
            return pl.from_arrow(self.read(ref)).lazy()  # type: ignore[union-attr]
        if self.store.remote:
            import pyarrow.dataset as pads

            paths = [self.store.fs_path(self.store.relative(f)) for f in files]
            dataset = pads.dataset(paths, format="parquet", filesystem=self.store.filesystem)
            return pl.scan_pyarrow_dataset(dataset)
        return pl.scan_parquet(files)

    def read(self, ref: str | TableRef, columns: list[str] | None = None) -> pa.Table:
        """Read a ref into memory as an Arrow table (use scan/sql for large tables)."""
        info = self.resolve(ref)
        select = ", ".join(f'"{c}"' for c in columns) if columns else "*"
        with self._lock:
            return self.con.sql(f"SELECT {select} FROM {self._from(info)}").to_arrow_table()

    def verify_hash(self, ref: str | TableRef, expected: str | None = None) -> VersionInfo:
        """Recompute a version's content hash from every file it reads; raise if it differs."""
        info = self.resolve(ref)
        chain = (
            [v for v in self.versions(info.name) if v.version <= info.version]
            if info.mode == "append"
            else [info]
        )
        recorded = [self._absolute(f) for v in chain for f in v.files]
        listed = self.files(info.ref)
        if sorted(listed) != sorted(recorded):
            raise LakeError(
                f"{info.ref}: the catalog reads {len(listed)} files but cascade recorded "
                f"{len(recorded)}; the table was changed outside cascade"
            )
        actual = None
        for v in chain:
            hashes = [self.store.sha256(f) for f in v.files]
            actual = chain_hash(actual if info.mode == "append" else None, hashes)
        want = expected or info.content_hash
        if actual != want:
            raise LakeError(
                f"{info.ref}: content hash {actual} of its data files does not match expected "
                f"{want}"
            )
        return info

    def _absolute(self, relative: str) -> str:
        return self.data_path + relative

    def connect(
        self, query: str | None = None, *, config: dict[str, object] | None = None
    ) -> duckdb.DuckDBPyConnection:
        """A read-only DuckDB connection with a view per table, `versions` and `drops`.

        `name` is the latest version and `"name@N"` a pinned one (time travel to its
        snapshot). Given the query, only the pinned versions it mentions get views. Given
        `config` (DuckDB settings such as memory_limit and threads), the connection is a
        DuckDB instance of its own made with them, the catalog attached READ_ONLY in it: its
        settings, once changed or locked, touch no other connection.
        """
        if self.read_only and config is None:
            con = self.con.cursor()  # read-only already: no second attachment (0.2-0.3 s)
        else:
            con = self._open(read_only=True, config=config)
        con.execute("USE memory")  # the views below are temporary: this connection's own
        infos = self._rows()
        by_name: dict[str, list[VersionInfo]] = {}
        for info in infos:
            by_name.setdefault(info.name, []).append(info)
        pinned = None if query is None else set(_PINNED_REF.findall(query))
        words = None if query is None else set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", query))
        for name, chain in by_name.items():
            for info in chain:
                if pinned is not None and (name, str(info.version)) not in pinned:
                    continue
                source = self._scan_source(con, info, chain)
                con.execute(f'CREATE TEMP VIEW "{name}@{info.version}" AS SELECT * FROM {source}')
            latest = chain[-1]
            used = words is None or name in words
            source = self._scan_source(con, latest, chain) if used else self._from(latest)
            con.execute(f'CREATE TEMP VIEW "{name}" AS SELECT * FROM {source}')
        # SQL literals, not an Arrow table: DuckDB imports pandas (0.3-0.5 s) to read one
        columns = ", ".join(f'"{f.name}" {_duck_type(f.type)}' for f in _VERSIONS_VIEW)
        con.execute(f"CREATE TEMP TABLE versions ({columns})")
        if infos:
            con.execute("INSERT INTO versions VALUES " + ", ".join(map(_version_row, infos)))
        if "drops" not in by_name:
            from schemas.tables import DROPS

            columns = ", ".join(f'NULL::{_duck_type(f.type)} AS "{f.name}"' for f in DROPS.schema)
            con.execute(f"CREATE TEMP VIEW drops AS SELECT {columns} WHERE false")
        return con

    def _scan_source(
        self, con: duckdb.DuckDBPyConnection, info: VersionInfo, chain: list[VersionInfo]
    ) -> str:
        """What a view of `info` reads: the version's own data files with `read_parquet`
        (about twice as fast as DuckLake's table scan for a full scan), unless rows were
        deleted outside cascade, when DuckLake's time travel applies the deletes."""
        snapshot = "NULL" if info.snapshot_id is None else int(info.snapshot_id)
        rows = con.execute(  # literals, not bound parameters: see `con`
            "SELECT data_file, delete_file FROM ducklake_list_files("
            f"{_sql_str(ALIAS)}, {_sql_str(info.name)}, snapshot_version => {snapshot})"
        ).fetchall()
        if not rows or any(r[1] for r in rows):
            return self._from(info)
        files = "[" + ", ".join(_sql_str(r[0]) for r in rows) + "]"
        reads = [v for v in chain if v.version <= info.version] if info.mode == "append" else [info]
        same = len({v.schema for v in reads}) == 1
        return f"read_parquet({files}{'' if same else ', union_by_name = true'})"

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
        build_id: str | None = None,
    ) -> VersionInfo:
        """Write a new version of one table; see `commit_many`."""
        write = TableWrite(
            name,
            data,
            kind=kind,
            mode=mode,
            parents=list(parents or []),
            producer=producer,
            params=dict(params or {}),
            allow_empty=allow_empty,
        )
        return self.commit_many([write], build_id=build_id)[0]

    def next_version(self, name: str) -> int:
        """The version number the next commit of `name` will get (if nobody commits first)."""
        rows = self._query(
            f"SELECT max(version) FROM {ALIAS}.cascade_versions WHERE name = ?", [name]
        )
        return (rows[0][0] or 0) + 1

    def write_lease(self) -> WriteLease:
        """A lease for data files this process will register (see `lake.leases`)."""
        return WriteLease(self.path / LEASE_DIR)

    def commit_many(
        self,
        writes: list[TableWrite],
        *,
        build_id: str | None = None,
        lease: WriteLease | None = None,
    ) -> list[VersionInfo]:
        """Commit new versions of several tables in one DuckLake transaction.

        Data may be a stream of record batches, so tables larger than memory can be written.
        Each schema is checked against its kind's contract. An empty version is refused
        unless `allow_empty`. Either every version lands, or none does. Files are written
        under `lease` (a new one unless the caller, who wrote some already, holds one); once
        the commit has landed, the files that killed writers of the same tables left are
        deleted (`collect_orphans`).
        """
        if self.read_only:
            raise LakeError(f"lake {self.path} was opened read-only")
        names = [w.name for w in writes]
        if len(set(names)) != len(names):
            raise LakeError(f"one commit writes each table once, got {names}")
        for w in writes:
            TableRef.parse(w.name)
            if w.name.startswith(RESERVED_PREFIX):
                raise LakeError(f"table names starting with {RESERVED_PREFIX!r} are reserved")
            if w.mode not in MODES:
                raise LakeError(f"mode must be one of {MODES}, got {w.mode!r}")
        build_id = build_id or uuid.uuid4().hex
        own = lease is None
        lease = lease or self.write_lease()
        written: list[_Written] = []
        try:
            for w in writes:
                lease.cover(w.name)
                item = self._write_files(w, lease.token)
                if item is not None:
                    written.append(item)
            _test_pause("before_commit")
            infos = self._register(written, build_id)
            _test_pause("after_commit")
        except BaseException:
            for item in written:
                for f in item.files:
                    self.store.remove(f)
            if own:
                lease.release()
            raise
        if own:
            lease.release()
        for info in infos:
            # The commit has landed: a failure to tidy up must not make it look failed.
            with contextlib.suppress(OSError, duckdb.Error, LakeError, StorageError):
                self.collect_orphans(info.name, exclude=lease.token)
        return infos

    def _write_files(self, write: TableWrite, writer: str) -> _Written | None:
        data = write.data() if callable(write.data) else write.data
        if isinstance(data, DataFiles):
            written = self._check_data_files(write, data)
        else:
            try:
                written = write_data_files(
                    self.store,
                    write.name,
                    data,
                    kind=write.kind,
                    rows_per_file=ROWS_PER_FILE,
                    on_batch=lambda: _test_pause("mid_write"),
                    writer=writer,
                )
            except NoDataError as exc:
                if write.skip_if_empty:
                    return None
                raise EmptyCommitError(str(exc)) from None
        if written.rows == 0 and write.skip_if_empty:
            return None
        if written.rows == 0 and not write.allow_empty:
            raise EmptyCommitError(f"refusing to commit an empty version of {write.name!r}")
        return _Written(
            write, list(written.files), list(written.hashes), written.rows, written.schema
        )

    def _check_data_files(self, write: TableWrite, data: DataFiles) -> DataFiles:
        """Files written elsewhere: under this table's folder, present, of the kind's schema."""
        contract_for(write.kind).validate(data.schema, write.name)
        for f in data.files:
            if not f.startswith(f"main/{write.name}/") or ".." in f:
                raise LakeError(
                    f"{f}: files of {write.name!r} must be written under main/{write.name}/ of "
                    "the lake's data path"
                )
            if not self.store.exists(f):
                raise LakeError(f"{self.store.uri(f)}: data file to register does not exist")
        return data

    def _register(self, written: list[_Written], build_id: str) -> list[VersionInfo]:
        """Register written files and their versions in one transaction, retrying races."""
        delay = 0.05
        deadline = time.monotonic() + self.busy_timeout
        while True:
            with self._lock:
                con = self.con
                try:
                    con.execute("BEGIN TRANSACTION")
                    infos = [self._register_one(con, item, build_id) for item in written]
                    extra = {"versions": {i.name: i.version for i in infos}, "build_id": build_id}
                    con.execute(
                        f"CALL {ALIAS}.set_commit_message('cascade', ?, extra_info => ?)",
                        [_COMMIT_MESSAGE, json.dumps(extra)],
                    )
                    _test_pause("in_transaction")
                    con.execute("COMMIT")
                    (snapshot,) = con.execute(
                        f"SELECT max(snapshot_id) FROM {ALIAS}.snapshots() "
                        "WHERE commit_extra_info = ?",
                        [json.dumps(extra)],
                    ).fetchone()
                    # DuckLake's in-connection catalog cache can lose older snapshots after
                    # this connection created or replaced tables (time travel then fails):
                    # the next read uses a fresh connection.
                    self.close()
                    self._snapshots.clear()
                    return [dataclasses.replace(i, snapshot_id=snapshot) for i in infos]
                except BaseException as exc:
                    with contextlib.suppress(duckdb.Error):
                        con.execute("ROLLBACK")
                    # DuckLake may keep catalog state from the failed attempt: start afresh.
                    self.close()
                    if isinstance(exc, duckdb.Error) and _transient(exc):
                        if time.monotonic() >= deadline:
                            raise LakeBusyError(
                                f"lake {self.path} is busy: other processes kept committing "
                                f"for {self.busy_timeout:.0f}s; try again when they finish"
                            ) from None
                    else:
                        raise
            time.sleep(delay)
            delay = min(delay * 2, 2.0)

    def _register_one(
        self, con: duckdb.DuckDBPyConnection, item: _Written, build_id: str
    ) -> VersionInfo:
        w = item.write
        last = con.execute(
            f"SELECT version, kind, mode, rows, content_hash FROM {ALIAS}.cascade_versions "
            "WHERE name = ? ORDER BY version DESC LIMIT 1",
            [w.name],
        ).fetchone()
        if last is not None and last[1] != w.kind:
            raise SchemaError(
                f"table {w.name!r} is of kind {last[1]!r}, cannot commit kind {w.kind!r}"
            )
        if last is not None and last[2] != w.mode:
            raise LakeError(f"table {w.name!r} is {last[2]}-mode, not {w.mode!r}")
        version = (last[0] if last else 0) + 1
        if w.expect_version is not None and version != w.expect_version:
            raise LakeConflictError(
                f"{w.name}@{w.expect_version} was committed by another process while this one "
                "ran; run it again"
            )
        table = f'{ALIAS}."{w.name}"'
        first = _sql_str(self._absolute(item.files[0])) if item.files else None
        if w.mode == "snapshot" or last is None:
            if first:
                con.execute(
                    f"CREATE OR REPLACE TABLE {table} AS SELECT * FROM read_parquet({first}) "
                    "LIMIT 0"
                )
            else:
                columns = ", ".join(f'"{f.name}" {_duck_type(f.type)}' for f in item.schema)
                con.execute(f"CREATE OR REPLACE TABLE {table} ({columns})")
        for f in item.files:
            con.execute("CALL ducklake_add_data_files(?, ?, ?)", [ALIAS, w.name, self._absolute(f)])
        append = w.mode == "append" and last is not None
        info = VersionInfo(
            name=w.name,
            version=version,
            kind=w.kind,
            mode=w.mode,
            rows=item.rows + (last[3] if append else 0),
            rows_added=item.rows,
            files=item.files,
            file_hashes=item.hashes,
            content_hash=chain_hash(last[4] if append else None, item.hashes),
            schema=item.schema.to_string(show_schema_metadata=False),
            parents=list(w.parents),
            producer=w.producer,
            params=w.params,
            code_version=code_version(),
            build_id=build_id,
            created_at=datetime.now(UTC),
        )
        con.execute(
            f"INSERT INTO {ALIAS}.cascade_versions VALUES "
            "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                info.name,
                info.version,
                info.kind,
                info.mode,
                info.rows,
                info.rows_added,
                info.files,
                info.file_hashes,
                info.content_hash,
                info.schema,
                info.parents,
                info.producer,
                json.dumps(info.params, default=str),
                info.code_version,
                info.build_id,
                info.created_at,
            ],
        )
        # Two writers of the same table must conflict even where DuckLake would merge their
        # appends: both delete the table's head row.
        con.execute(f"DELETE FROM {ALIAS}.cascade_heads WHERE name = ?", [w.name])
        con.execute(f"INSERT INTO {ALIAS}.cascade_heads VALUES (?, ?)", [w.name, version])
        return info

    def collect_orphans(self, name: str, exclude: str | None = None) -> int:
        """Delete the data files of `name` that writers killed mid-commit left; returns the count.

        Only files of writers whose lease lock (`lake.leases`) can be taken go, i.e. whose
        process has ended, and only those `cascade_versions` does not list: a writer in
        flight holds its lock, and a writer of another table writes under another folder.
        """
        removed = 0
        with dead_writers(self.path / LEASE_DIR, name, exclude=exclude) as dead:
            if not dead:
                return 0
            rows = self._query(f"SELECT files FROM {ALIAS}.cascade_versions WHERE name = ?", [name])
            registered = {f for (files,) in rows for f in files}
            for f in self.store.files_in(f"main/{name}"):
                if file_writer(f) in dead and f not in registered:
                    self.store.remove(f)
                    removed += 1
        return removed

    def remove_orphans(self, older_than: timedelta = timedelta(hours=24)) -> Orphans:
        """Delete data files no snapshot refers to (left by killed writers).

        Files of a writer known to have ended (`collect_orphans`) go whatever their age;
        others only when older than `older_than` (a commit in flight may still register a
        younger one) and not written by a writer that is still running.
        """
        leases = self.path / LEASE_DIR
        tables = sorted(p.name for p in leases.iterdir() if p.is_dir()) if leases.is_dir() else []
        removed = sum(self.collect_orphans(t) for t in tables)
        cutoff = datetime.now(UTC) - older_than
        listing = "SELECT path FROM ducklake_delete_orphaned_files(?, dry_run => true, {})"
        with self._lock:
            con = self.con
            every = {
                r[0] for r in con.execute(listing.format("cleanup_all => true"), [ALIAS]).fetchall()
            }
            old = {
                r[0]
                for r in con.execute(listing.format("older_than => ?"), [ALIAS, cutoff]).fetchall()
            }
        live = live_writers(leases)
        running = {f for f in every if file_writer(f) in live}
        for f in sorted(old - running):
            self.store.remove(self.store.relative(f))
        return Orphans(
            removed=removed + len(old - running),
            young=len(every - old - running),
            running=len(running),
        )


@dataclass(frozen=True)
class Orphans:
    """What `remove_orphans` did: files deleted, and files kept for being younger than the
    grace period or for belonging to a writer still running."""

    removed: int
    young: int
    running: int


_VERSIONS_VIEW = pa.schema(
    [
        ("name", pa.string()),
        ("version", pa.int64()),
        ("kind", pa.string()),
        ("mode", pa.string()),
        ("rows", pa.int64()),
        ("content_hash", pa.string()),
        ("parents", pa.list_(pa.string())),
        ("producer", pa.string()),
        ("params", pa.string()),
        ("code_version", pa.string()),
        ("build_id", pa.string()),
        ("created_at", pa.timestamp("us", tz="UTC")),
        ("snapshot_id", pa.int64()),
    ]
)


def _version_row(v: VersionInfo) -> str:
    """One row of the `versions` view as SQL literals (in `_VERSIONS_VIEW`'s order)."""
    parents = "[" + ", ".join(_sql_str(p) for p in v.parents) + "]::VARCHAR[]"
    values = [
        _sql_str(v.name),
        str(int(v.version)),
        _sql_str(v.kind),
        _sql_str(v.mode),
        str(int(v.rows)),
        _sql_str(v.content_hash),
        parents,
        _sql_str(v.producer),
        _sql_str(json.dumps(v.params)),
        "NULL" if v.code_version is None else _sql_str(v.code_version),
        "NULL" if v.build_id is None else _sql_str(v.build_id),
        _sql_str(v.created_at.isoformat()) + "::TIMESTAMPTZ",
        "NULL" if v.snapshot_id is None else str(int(v.snapshot_id)),
    ]
    return "(" + ", ".join(values) + ")"


_DUCK_TYPES = {
    pa.string(): "VARCHAR",
    pa.large_string(): "VARCHAR",
    pa.int64(): "BIGINT",
    pa.int32(): "INTEGER",
    pa.float64(): "DOUBLE",
    pa.bool_(): "BOOLEAN",
    pa.timestamp("us", tz="UTC"): "TIMESTAMP WITH TIME ZONE",
}


def _duck_type(arrow_type: pa.DataType) -> str:
    """The DuckDB type name of an Arrow type (for empty tables and typed NULLs)."""
    if arrow_type in _DUCK_TYPES:
        return _DUCK_TYPES[arrow_type]
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type):
        return _duck_type(arrow_type.value_type) + "[]"
    con = duckdb.connect()  # anything else, as DuckDB reads it from Arrow
    try:
        empty = pa.table({"x": pa.array([], type=arrow_type)})  # noqa: F841 (read by DuckDB)
        return str(con.sql("SELECT * FROM empty").types[0])
    finally:
        con.close()


def _one_line(exc: Exception) -> str:
    return " ".join(str(exc).split())
