"""Convert a lake written by cascade before DuckLake (its own `catalog.duckdb`) to DuckLake.

Every version of every table is re-committed in the order it was made, so `name@N` keeps its
meaning; lineage (parents, producer, parameters) is carried over. Prompts rows of that era
have no `uid`: they get `<source>:<source_id>` (with `#k` added where that repeats). Old
drops rows name the table and version they were dropped from; they become drops rows of the
new shape, with the output version taken from the drops version's parent.
"""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import polars as pl
import pyarrow.parquet as pq

from lake.catalog import Lake, LakeError, TableRef, TableWrite


def migrate_lake(old: Path, new: Path) -> dict[str, int]:
    """Copy every version of the old lake at `old` into a new DuckLake lake at `new`."""
    catalog = old / "catalog.duckdb"
    if not catalog.is_file():
        raise LakeError(f"{old} has no catalog.duckdb: it is not a lake of the earlier format")
    if new.exists() and any(new.iterdir()):
        raise LakeError(f"{new} is not empty; migrate into a new directory")
    con = duckdb.connect(str(catalog), read_only=True)
    try:
        rows = con.execute(
            "SELECT name, version, kind, mode, files, parents, producer, params "
            "FROM versions ORDER BY created_at, name, version"
        ).fetchall()
    finally:
        con.close()
    lake = Lake(new)
    counts: dict[str, int] = {}
    for name, version, kind, mode, files, parents, producer, params in rows:
        tables = [pq.read_table(old / f) for f in files]
        frame = pl.concat([pl.from_arrow(t) for t in tables], how="diagonal_relaxed")  # type: ignore[misc]
        if kind == "prompts" and "uid" not in frame.columns:
            frame = _with_uids(frame)
        if kind == "drops":
            frame = _new_drops(frame, list(parents))
        lake.commit_many(
            [
                TableWrite(
                    name,
                    frame,
                    kind=kind,
                    mode=mode,
                    parents=list(parents),
                    producer=producer,
                    params=json.loads(params) if params else {},
                    allow_empty=True,
                    expect_version=version,
                )
            ],
            build_id="migrated",
        )
        counts[name] = counts.get(name, 0) + 1
    return counts


def _with_uids(frame: pl.DataFrame) -> pl.DataFrame:
    base = pl.concat_str([pl.col("source"), pl.lit(":"), pl.col("source_id")])
    repeat = pl.int_range(pl.len()).over(base)
    uid = (
        pl.when(repeat == 0)
        .then(base)
        .otherwise(pl.concat_str([base, pl.lit("#"), repeat.cast(pl.String)]))
    )
    return frame.select(uid.alias("uid"), pl.all())


def _new_drops(frame: pl.DataFrame, parents: list[str]) -> pl.DataFrame:
    output = TableRef.parse(parents[0]) if parents else TableRef("unknown", 0)
    return frame.select(
        pl.lit("migrated").alias("build_id"),
        pl.lit(output.name).alias("output_table"),
        pl.lit(output.version or 0, pl.Int64).alias("output_version"),
        pl.col("table").alias("input_table"),
        pl.col("version").cast(pl.Int64).alias("input_version"),
        pl.col("row_id").alias("uid"),
        "step",
        "reason",
        "detail",
    )
