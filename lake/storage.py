"""Where a lake's data files live, and writing them: a local directory or an S3 bucket.

A `DataStore` is the lake's data path seen as a filesystem: a local directory, or an
S3-compatible bucket (AWS, SeaweedFS, MinIO, ...) reached through pyarrow's S3 filesystem for
writes and DuckDB's httpfs extension for reads. It holds no connection and pickles small, so
cluster workers get one and write Parquet files straight into the lake; the driver then
registers those files in one catalog transaction (`DataFiles` in a `TableWrite`). Credentials
never live in `lake.json`: they come from the environment of each process
(`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, optional `AWS_SESSION_TOKEN`).

`write_data_files` is the one Parquet writer of the lake: it checks the table kind's contract,
cuts files at `ROWS_PER_FILE` rows and hashes every file's bytes while they are written.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from lake.leases import file_prefix
from schemas.tables import SchemaError, contract_for, validate_non_null

ROWS_PER_FILE = 1_000_000
ROW_GROUP_ROWS = 128_000
S3_KEY_ENV = "AWS_ACCESS_KEY_ID"
S3_SECRET_ENV = "AWS_SECRET_ACCESS_KEY"
S3_TOKEN_ENV = "AWS_SESSION_TOKEN"
S3_SETTINGS = ("endpoint", "region", "url_style", "use_ssl")

if TYPE_CHECKING:  # polars is imported by whoever hands one in (0.1-0.2 s to import)
    import polars as pl

    Data = pa.Table | pl.DataFrame | Iterable[pa.RecordBatch]


class StorageError(RuntimeError):
    """The data path cannot be used as configured; the message says what to set."""


class NoDataError(StorageError):
    """A write was given nothing, not even a schema."""


@dataclass(frozen=True)
class S3Settings:
    """How to reach an S3-compatible store (`lake.json`'s `s3` block); keys from the env.

    `endpoint` is `host:port` (None: AWS itself), `url_style` is `path` for most
    self-hosted stores and `vhost` for AWS, `use_ssl` false for a plain-HTTP endpoint.
    """

    endpoint: str | None = None
    region: str = "us-east-1"
    url_style: str = "vhost"
    use_ssl: bool = True

    @classmethod
    def parse(cls, raw: dict[str, Any] | None) -> S3Settings:
        raw = dict(raw or {})
        unknown = sorted(set(raw) - set(S3_SETTINGS))
        if unknown:
            raise StorageError(
                f"unknown s3 settings {unknown} in lake.json; known: {', '.join(S3_SETTINGS)} "
                "(credentials come from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY)"
            )
        settings = cls(**raw)
        if settings.url_style not in ("path", "vhost"):
            raise StorageError(
                f"s3.url_style must be 'path' or 'vhost', got {settings.url_style!r}"
            )
        return settings

    def credentials(self) -> tuple[str, str, str | None]:
        key, secret = os.environ.get(S3_KEY_ENV), os.environ.get(S3_SECRET_ENV)
        if not key or not secret:
            raise StorageError(
                f"the lake's data is on S3: set {S3_KEY_ENV} and {S3_SECRET_ENV} in the "
                "environment of every process that reads or writes it"
            )
        return key, secret, os.environ.get(S3_TOKEN_ENV) or None


@dataclass
class DataStore:
    """A lake's data path: `root` is an absolute directory ending in `/` or `s3://bucket/.../`.

    Paths handed around are relative to the root (`main/<table>/<file>.parquet`); `uri(rel)`
    is what DuckDB and the catalog see.
    """

    root: str
    s3: S3Settings | None = None
    _fs: pafs.FileSystem | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if "://" in self.root:
            scheme = self.root.split("://", 1)[0]
            if scheme != "s3":
                raise StorageError(
                    f"data_path {self.root!r}: only local paths and s3:// URIs are supported"
                )
            if self.s3 is None:
                self.s3 = S3Settings()
        if not self.root.endswith("/"):
            self.root += "/"

    def __getstate__(self) -> dict[str, Any]:
        return {"root": self.root, "s3": self.s3, "_fs": None}  # workers build their own

    @property
    def remote(self) -> bool:
        return self.root.startswith("s3://")

    @property
    def filesystem(self) -> pafs.FileSystem:
        if self._fs is None:
            if self.remote:
                assert self.s3 is not None
                key, secret, token = self.s3.credentials()
                self._fs = pafs.S3FileSystem(
                    access_key=key,
                    secret_key=secret,
                    session_token=token,
                    region=self.s3.region,
                    endpoint_override=self.s3.endpoint,
                    scheme="https" if self.s3.use_ssl else "http",
                    force_virtual_addressing=self.s3.url_style == "vhost"
                    and bool(self.s3.endpoint),
                )
            else:
                self._fs = pafs.LocalFileSystem()
        return self._fs

    def uri(self, relative: str) -> str:
        return self.root + relative

    def fs_path(self, relative: str) -> str:
        """The path pyarrow's filesystem takes (`bucket/key` on S3)."""
        return self.uri(relative).removeprefix("s3://")

    def relative(self, uri: str) -> str:
        """`uri` relative to the root (a data file the catalog lists)."""
        if not uri.startswith(self.root):
            raise StorageError(f"{uri} is not under the lake's data path {self.root}")
        return uri[len(self.root) :]

    def prepare(self, relative_dir: str) -> None:
        """Make a directory for new files (object stores need none)."""
        if not self.remote:
            Path(self.uri(relative_dir)).mkdir(parents=True, exist_ok=True)

    def sha256(self, relative: str) -> str:
        """sha256 of a stored file's bytes, streamed."""
        digest = hashlib.sha256()
        with self.filesystem.open_input_stream(self.fs_path(relative)) as stream:
            while chunk := stream.read(1 << 20):
                digest.update(chunk)
        return digest.hexdigest()

    def exists(self, relative: str) -> bool:
        info = self.filesystem.get_file_info(self.fs_path(relative))
        return info.type == pafs.FileType.File

    def files_in(self, relative_dir: str) -> list[str]:
        """The files directly under a directory, relative to the root (none if it is missing)."""
        selector = pafs.FileSelector(self.fs_path(relative_dir), allow_not_found=True)
        return [
            f"{relative_dir}/{info.base_name}"
            for info in self.filesystem.get_file_info(selector)
            if info.type == pafs.FileType.File
        ]

    def remove(self, relative: str) -> None:
        with contextlib.suppress(OSError, FileNotFoundError):
            self.filesystem.delete_file(self.fs_path(relative))

    def duckdb_secret(self, *, reveal: bool) -> list[str]:
        """The `CREATE SECRET` DuckDB needs for this store (none for a local directory).

        `reveal=False` spells the keys as `getenv(...)` calls, which the DuckDB CLI
        evaluates, so printed statements never hold a secret.
        """
        if not self.remote:
            return []
        assert self.s3 is not None
        if reveal:
            key, secret, token = self.s3.credentials()
            values = {"KEY_ID": _sql_str(key), "SECRET": _sql_str(secret)}
            if token:
                values["SESSION_TOKEN"] = _sql_str(token)
        else:
            values = {"KEY_ID": f"getenv('{S3_KEY_ENV}')", "SECRET": f"getenv('{S3_SECRET_ENV}')"}
        options = ["TYPE s3", *(f"{k} {v}" for k, v in values.items())]
        options.append(f"REGION {_sql_str(self.s3.region)}")
        if self.s3.endpoint:
            options.append(f"ENDPOINT {_sql_str(self.s3.endpoint)}")
        options.append(f"URL_STYLE {_sql_str(self.s3.url_style)}")
        options.append(f"USE_SSL {'true' if self.s3.use_ssl else 'false'}")
        scope = "s3://" + self.root.removeprefix("s3://").split("/", 1)[0]
        options.append(f"SCOPE {_sql_str(scope)}")
        return [f"CREATE OR REPLACE SECRET cascade_lake_s3 ({', '.join(options)})"]


@dataclass(frozen=True)
class DataFiles:
    """Parquet files written under a lake's data path but not yet registered: paths relative
    to it, the sha256 of each, their rows and schema. A `TableWrite` may carry these instead
    of rows; the commit then only registers them (files written by cluster workers)."""

    files: tuple[str, ...]
    hashes: tuple[str, ...]
    rows: int
    schema: pa.Schema

    @classmethod
    def merge(cls, parts: Iterable[DataFiles]) -> DataFiles:
        """Several writers' files as one version, in the given order (one schema)."""
        parts = list(parts)
        if not parts:
            raise StorageError("no data files to merge")
        schema = parts[0].schema
        for part in parts[1:]:
            if not part.schema.equals(schema):
                raise SchemaError(f"data files disagree on the schema: {part.schema} vs {schema}")
        return cls(
            tuple(f for p in parts for f in p.files),
            tuple(h for p in parts for h in p.hashes),
            sum(p.rows for p in parts),
            schema,
        )


class _HashingSink:
    """A writable file object that hashes the bytes it passes to the stream below."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.digest = hashlib.sha256()
        self.position = 0
        self.closed = False

    def write(self, data: Any) -> int:
        view = memoryview(data)
        self.digest.update(view)
        self.stream.write(view)
        self.position += view.nbytes
        return view.nbytes

    def tell(self) -> int:
        return self.position

    def flush(self) -> None:
        self.stream.flush()

    def close(self) -> None:
        if not self.closed:
            self.stream.close()
            self.closed = True

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False


def _is_polars_frame(data: object) -> bool:
    """Whether `data` is a Polars DataFrame (without importing Polars: none exists before)."""
    polars = sys.modules.get("polars")
    return polars is not None and isinstance(data, polars.DataFrame)


def as_batches(data: Data) -> Iterator[pa.RecordBatch]:
    """Record batches of a table, a Polars frame or a stream of either (an empty table
    yields one empty batch, so its schema is known)."""
    if _is_polars_frame(data):
        data = data.to_arrow()  # type: ignore[union-attr]
    if isinstance(data, pa.Table):
        yield from data.to_batches(max_chunksize=256_000)
        if data.num_rows == 0:
            yield pa.RecordBatch.from_pylist([], schema=data.schema)
        return
    if isinstance(data, pa.RecordBatchReader):
        yield from data
        return
    for batch in data:
        if _is_polars_frame(batch):
            batch = batch.to_arrow()
        if isinstance(batch, pa.Table):
            yield from batch.to_batches(max_chunksize=256_000)
        else:
            yield batch


def write_data_files(
    store: DataStore,
    name: str,
    data: Data,
    *,
    kind: str = "generic",
    rows_per_file: int = ROWS_PER_FILE,
    on_batch: Any = None,
    writer: str | None = None,
) -> DataFiles:
    """Write rows as new Parquet files of table `name` under the store (not registered).

    The schema is checked against the kind's contract; files hold at most `rows_per_file`
    rows and get a fresh random name, so writers on many machines never collide; the name
    carries the `writer`'s lease token (`lake.leases`), so a killed writer's files can be
    told from a running one's. Rows are
    written in row groups of ROW_GROUP_ROWS whatever batches they came in, so a file's bytes
    (and the version's content hash) depend only on the rows, not on how they were chunked
    in memory (the local and the cluster executor chunk differently). On any error the files
    written so far are removed. An input with no rows gives no files (and its schema).
    `on_batch()` is called after each batch (tests pause there).
    """
    contract = contract_for(kind)
    table_dir = f"main/{name}"
    store.prepare(table_dir)
    token = file_prefix(writer)
    files: list[str] = []
    hashes: list[str] = []
    rows = 0
    rows_in_file = 0
    schema: pa.Schema | None = None
    writer: pq.ParquetWriter | None = None
    sink: _HashingSink | None = None

    def close_file() -> None:
        nonlocal writer, sink
        if writer is None or sink is None:
            return
        writer.close()
        stream = sink.stream
        if not store.remote:
            stream.flush()
            os.fsync(stream.fileno())
        sink.close()
        hashes.append(sink.digest.hexdigest())
        writer = sink = None

    pending: list[pa.RecordBatch] = []

    def write_groups(final: bool) -> None:
        """Write the pending rows as row groups of ROW_GROUP_ROWS (the last one shorter)."""
        nonlocal writer, sink, rows_in_file, pending
        assert schema is not None
        table = pa.Table.from_batches(pending, schema=schema)
        offset = 0
        while table.num_rows - offset >= ROW_GROUP_ROWS or (final and offset < table.num_rows):
            if writer is None or rows_in_file >= rows_per_file:
                close_file()
                rel = f"{table_dir}/{token}-{len(files):05d}.parquet"
                files.append(rel)
                if store.remote:
                    stream = store.filesystem.open_output_stream(store.fs_path(rel))
                else:
                    stream = open(store.uri(rel), "wb")  # noqa: SIM115 (closed by close_file)
                sink = _HashingSink(stream)
                writer = pq.ParquetWriter(sink, schema, compression="zstd")
                rows_in_file = 0
            size = min(ROW_GROUP_ROWS, rows_per_file - rows_in_file, table.num_rows - offset)
            group = table.slice(offset, size).combine_chunks()
            writer.write_table(group, row_group_size=size)
            offset += size
            rows_in_file += size
        pending = table.slice(offset).to_batches()

    try:
        for batch in as_batches(data):
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
            if batch.num_rows == 0:
                continue
            pending.append(batch.replace_schema_metadata(None))
            rows += batch.num_rows
            if sum(b.num_rows for b in pending) >= ROW_GROUP_ROWS:
                write_groups(final=False)
            if on_batch is not None:
                on_batch()
        if pending:
            write_groups(final=True)
        close_file()
    except BaseException:
        with contextlib.suppress(Exception):
            if writer is not None:
                writer.close()
            if sink is not None:
                sink.close()
        for f in files:
            store.remove(f)
        raise
    if schema is None:
        raise NoDataError(f"refusing to commit {name!r}: no data was given")
    return DataFiles(tuple(files), tuple(hashes), rows, schema)


def _sql_str(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"
