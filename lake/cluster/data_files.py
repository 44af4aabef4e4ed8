"""Blocks read from and written to the lake's data files, by tasks: a file's footer
(`footer`), a block of rows of one file (`read_block`), and one data file written from
slices of blocks (`write_file`) cut as the lake's own writer cuts them (`rows_per_data_file`).
"""

from __future__ import annotations

from typing import Any

import polars as pl
import pyarrow as pa

from lake.cluster.blocks import as_frame, conform
from lake.steps import drop_rows, drops_rows
from lake.storage import DataFiles, DataStore, write_data_files


def footer(store: DataStore, relative: str) -> tuple[int, pa.Schema]:
    import pyarrow.parquet as pq

    with pq.ParquetFile(store.fs_path(relative), filesystem=store.filesystem) as f:
        return f.metadata.num_rows, f.schema_arrow.remove_metadata()


def read_block(
    store: DataStore, relative: str, offset: int, rows: int, columns: list[str] | None
) -> Any:
    """Rows `offset .. offset + rows - 1` of a data file (only the row groups holding them
    are decoded)."""
    import pyarrow.parquet as pq

    with pq.ParquetFile(store.fs_path(relative), filesystem=store.filesystem) as f:
        meta = f.metadata
        groups, first, seen = [], None, 0
        for g in range(meta.num_row_groups):
            size = meta.row_group(g).num_rows
            if seen + size > offset and seen < offset + rows:
                groups.append(g)
                first = seen if first is None else first
            seen += size
        table = f.read_row_groups(groups, columns=columns)
    assert first is not None
    return table.slice(offset - first, rows).replace_schema_metadata(None)


def write_file(
    store: DataStore,
    name: str,
    kind: str,
    rows_per_file: int,
    writer: str | None,
    pieces: list[tuple[int, int, int, Any]],
    *blocks: Any,
) -> DataFiles:
    """One data file of `name` from slices of blocks (`pieces`: block, offset, rows, and
    how the rows become the table's: None for kept rows as they are, or a step's drops)."""
    frames = []
    for b, offset, rows, how in pieces:
        frame = as_frame(blocks[b]).slice(offset, rows)
        if how is not None:
            _, input_columns, step, schema, run = how
            step_drops = drop_rows(conform(frame, schema), input_columns=input_columns, step=step)
            frame = drops_rows(step_drops, run)
        frames.append(frame)
    table = pl.concat(frames, how="vertical")
    return write_data_files(
        store, name, table, kind=kind, rows_per_file=rows_per_file, writer=writer
    )


def rows_per_data_file() -> int:
    """The rows per data file the lake's own commits write (read when a run writes)."""
    from lake import catalog

    return catalog.ROWS_PER_FILE
