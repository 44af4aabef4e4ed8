"""The viewer's SQL box: which statements run, on what connection, under which limits.

The SQL comes from whoever reaches the server, so it is judged and confined in layers, each
enough on its own for what it covers:

- DuckDB's own parser judges the statement: exactly one, a SELECT, or EXPLAIN [ANALYZE] of one
  (the explained statement is parsed too, so `EXPLAIN ANALYZE COPY ...` is refused); inside it
  (its syntax tree, from `json_serialize_sql`) every table function must be one that only reads
  (`sqlite_query`, `ducklake_expire_snapshots`, `query(...)` and the like are refused).
- the connection is a DuckDB instance of its own: the catalog attached READ_ONLY, extensions
  neither installed nor autoloaded, no persistent secret loaded; then every file is barred
  except the lake's own data files (`allowed_paths`, exact files: no directory can be listed
  and no new file created), and the configuration is locked. DuckDB's allowed paths do not
  tell reading from writing: a local data file survives a COPY onto it only because DuckDB
  writes a `tmp_` file first, which is barred, while on S3 the object would be overwritten
  (serve an S3 lake with read-only keys). So the parser layer must refuse every statement
  that writes.
- limits: `memory_limit` and `threads` per query, temp files only in a private directory up
  to `max_temp_directory_size`, and a watcher that interrupts the query at its time limit or
  when its client goes away.
"""

from __future__ import annotations

import functools
import json
import re
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import duckdb

    from lake import Lake

POLL_SECONDS = 0.05  # how often the watcher looks at the clock and the client

# Table functions that only read: generators, the lake's Parquet files (the connection opens
# no other file), DuckDB's and DuckLake's catalog listings.
READ_TABLE_FUNCTIONS = frozenset(
    {
        "range",
        "generate_series",
        "unnest",
        "repeat",
        "repeat_row",
        "json_each",
        "json_tree",
        "histogram",
        "histogram_values",
        "summary",
        "test_all_types",
        "pg_timezone_names",
        "icu_calendar_names",
        "query_table",
        "read_parquet",
        "parquet_scan",
        "parquet_metadata",
        "parquet_schema",
        "parquet_file_metadata",
        "parquet_kv_metadata",
        "duckdb_columns",
        "duckdb_constraints",
        "duckdb_databases",
        "duckdb_dependencies",
        "duckdb_extensions",
        "duckdb_functions",
        "duckdb_indexes",
        "duckdb_keywords",
        "duckdb_memory",
        "duckdb_optimizers",
        "duckdb_schemas",
        "duckdb_sequences",
        "duckdb_settings",
        "duckdb_tables",
        "duckdb_types",
        "duckdb_variables",
        "duckdb_views",
        "pragma_collations",
        "pragma_database_size",
        "pragma_platform",
        "pragma_show",
        "pragma_storage_info",
        "pragma_table_info",
        "pragma_version",
        "ducklake_snapshots",
        "ducklake_table_info",
        "ducklake_list_files",
        "ducklake_current_snapshot",
        "ducklake_last_committed_snapshot",
        "ducklake_table_changes",
        "ducklake_table_insertions",
        "ducklake_table_deletions",
        "ducklake_options",
        "ducklake_settings",
    }
)
# DuckLake's functions called through the lake's name (`lake.snapshots()`) that only read.
READ_LAKE_FUNCTIONS = frozenset(
    {
        "snapshots",
        "table_info",
        "current_snapshot",
        "last_committed_snapshot",
        "table_changes",
        "table_insertions",
        "table_deletions",
        "options",
        "settings",
    }
)
_SYSTEM = {("", ""), ("", "main"), ("system", ""), ("system", "main")}
_ANALYZE = re.compile(r"(ANALYZE|ANALYSE)\b", re.IGNORECASE)


class ReadOnlyQueryError(ValueError):
    """A query that is not one read-only statement, or that stopped before its end."""


@dataclass(frozen=True)
class QueryLimits:
    """What one query of the viewer may use; `concurrent` queries may run at once."""

    seconds: float = 30.0
    memory: str = "1GiB"  # DuckDB memory_limit of the query's own instance
    threads: int = 2
    spill: str = "1GiB"  # max_temp_directory_size of its private temp directory
    concurrent: int = 2

    def check(self) -> None:
        """Raise ValueError naming the option whose value DuckDB does not take."""
        import duckdb

        for option, name, value in (
            ("--query-memory", "memory_limit", self.memory),
            ("--query-spill", "max_temp_directory_size", self.spill),
        ):
            try:
                duckdb.connect(config={name: value}).close()
            except duckdb.Error as exc:
                raise ValueError(f"{option} {value!r}: {_one_line(exc)}") from None

    def duckdb_config(self, temp_dir: str | Path) -> dict[str, object]:
        """The DuckDB settings a query's instance is created with ("" temp_dir: no spilling)."""
        return {
            "memory_limit": self.memory,
            "threads": self.threads,
            "temp_directory": str(temp_dir),
            "max_temp_directory_size": self.spill,
            "autoinstall_known_extensions": False,
            "autoload_known_extensions": False,
            "allow_community_extensions": False,
            # persistent secrets load from this directory, which never exists (turning them
            # off instead breaks the PostgreSQL catalog's attach in DuckDB 1.5)
            "secret_directory": str(Path(tempfile.gettempdir()) / f"no-secrets-{uuid.uuid4().hex}"),
        }


@dataclass
class QueryResult:
    columns: list[str]
    rows: list[tuple]
    more: bool  # the query had more rows than were fetched


def _one_line(exc: Exception) -> str:
    return " ".join(str(exc).split())


def _one_statement(query: str) -> duckdb.Statement:
    import duckdb

    try:
        statements = duckdb.extract_statements(query)
    except duckdb.Error as exc:
        raise ReadOnlyQueryError(_one_line(exc)) from None
    if len(statements) != 1:
        raise ReadOnlyQueryError(f"give one statement, not {len(statements)}")
    return statements[0]


def _explained(query: str) -> str:
    """The text of the statement an `EXPLAIN [ANALYZE]` query shows (what follows those words)."""
    import duckdb

    offsets = [offset for offset, _ in duckdb.tokenize(query)]
    start = 1
    if len(offsets) > 1 and _ANALYZE.match(query, offsets[1]):
        start = 2
    return query[offsets[start] :] if start < len(offsets) else ""


_parser_lock = threading.Lock()


@functools.cache
def _parser() -> duckdb.DuckDBPyConnection:
    """Runs json_serialize_sql only: it parses, nothing is executed (opened at the first query)."""
    import duckdb

    return duckdb.connect()


def _table_functions(select: str) -> list[tuple[str, str, str]]:
    """(catalog, schema, name) of every table function a SELECT calls, from its syntax tree."""
    with _parser_lock:
        (text,) = _parser().execute("SELECT json_serialize_sql(?)", [select]).fetchone()  # type: ignore[misc]
    tree = json.loads(text)
    if tree.get("error"):
        raise ReadOnlyQueryError(tree.get("error_message") or "the query cannot be parsed")
    found: list[tuple[str, str, str]] = []

    def walk(node: object) -> None:
        if isinstance(node, dict):
            if node.get("type") == "TABLE_FUNCTION":
                call = node.get("function") or {}
                found.append(
                    (
                        str(call.get("catalog") or "").lower(),
                        str(call.get("schema") or "").lower(),
                        str(call.get("function_name") or "").lower(),
                    )
                )
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(tree)
    return found


def check_read_only(query: str) -> str:
    """The one read-only statement `query` holds, as text; refused with a sentence otherwise."""
    from lake.catalog import ALIAS

    lake_schemas = {("", ALIAS), (ALIAS, ""), (ALIAS, "main")}
    statement = _one_statement(query)
    kind = statement.type.name
    select = statement.query
    if kind == "EXPLAIN":
        inner = _explained(statement.query)
        explained = _one_statement(inner) if inner.strip() else None
        if explained is None or explained.type.name != "SELECT":
            what = explained.type.name if explained is not None else "nothing"
            raise ReadOnlyQueryError(
                f"the viewer is read-only: EXPLAIN [ANALYZE] runs here for a SELECT, not {what}"
            )
        select = explained.query
    elif kind != "SELECT":
        raise ReadOnlyQueryError(
            f"the viewer is read-only: only SELECT queries run here, not {kind}"
        )
    for catalog, schema, name in _table_functions(select):
        allowed = (
            READ_TABLE_FUNCTIONS
            if (catalog, schema) in _SYSTEM
            else READ_LAKE_FUNCTIONS
            if (catalog, schema) in lake_schemas
            else frozenset()
        )
        if name not in allowed:
            qualified = ".".join(p for p in (catalog, schema, name) if p)
            raise ReadOnlyQueryError(
                f"the viewer is read-only: {qualified}() is not one of the table functions "
                "that only read the lake"
            )
    return statement.query


def read_only_connection(
    lake: Lake,
    query: str,
    limits: QueryLimits | None = None,
    temp_dir: str | Path | None = None,
) -> duckdb.DuckDBPyConnection:
    """A DuckDB instance of its own for `query`: the lake attached read-only, every file but
    the lake's data files barred, its limits set and its configuration locked.

    Without `temp_dir` the query cannot spill to disk at all.
    """
    config = (limits or QueryLimits()).duckdb_config(temp_dir or "")
    con = lake.connect(query, config=config)
    try:
        con.execute("SET allowed_paths = ?", [lake.readable_files()])
        con.execute("SET enable_external_access = false")
        con.execute("SET lock_configuration = true")
    except BaseException:
        con.close()
        raise
    return con


@contextmanager
def _watched(
    con: duckdb.DuckDBPyConnection, seconds: float, gone: Callable[[], bool]
) -> Iterator[list[str]]:
    """Interrupt `con`'s query once `seconds` pass or `gone()` says the client left; yields
    the reason it was interrupted for (empty while it was not)."""
    done = threading.Event()
    why: list[str] = []
    deadline = time.monotonic() + seconds

    def watch() -> None:
        while not done.wait(POLL_SECONDS):
            if not why:
                if time.monotonic() >= deadline:
                    why.append("time")
                else:
                    try:
                        left = gone()
                    except Exception:  # noqa: BLE001 - a client we cannot look at has left
                        left = True
                    if left:
                        why.append("gone")
            if why:
                con.interrupt()  # again each poll: a query that had not started yet stops too

    watcher = threading.Thread(target=watch, name="cascade-serve-watch", daemon=True)
    watcher.start()
    try:
        yield why
    finally:
        done.set()
        watcher.join()


def run_query(
    lake: Lake,
    query: str,
    limits: QueryLimits,
    max_rows: int,
    temp_root: str | Path,
    gone: Callable[[], bool] = lambda: False,
) -> QueryResult:
    """Run one read-only query under `limits` and fetch up to `max_rows` of its rows."""
    import duckdb

    statement = check_read_only(query)
    temp_dir = tempfile.mkdtemp(prefix="query-", dir=temp_root)
    try:
        con = read_only_connection(lake, query, limits, temp_dir)
        try:
            with _watched(con, limits.seconds, gone) as why:
                try:
                    relation = con.sql(statement)
                    if relation is None:
                        return QueryResult([], [], False)
                    columns = list(relation.columns)
                    rows = relation.fetchmany(max_rows + 1)
                except duckdb.InterruptException:
                    if why == ["time"]:
                        raise ReadOnlyQueryError(
                            f"the query ran past the {limits.seconds:g} s limit and was "
                            "stopped; add a LIMIT, a filter or an aggregate"
                        ) from None
                    raise ReadOnlyQueryError(
                        "the query was stopped: its client went away"
                    ) from None
        finally:
            con.close()
    except duckdb.Error as exc:
        raise ReadOnlyQueryError(_one_line(exc)) from None
    finally:
        shutil.rmtree(temp_dir, ignore_errors=True)
    return QueryResult(columns, rows[:max_rows], len(rows) > max_rows)
