"""Export a dataset version in the Hugging Face dataset layout, with a dataset card.

`export_dataset(lake, "math_rl_v2@3", "out/", "hf")` writes

    out/data/train-00000-of-00001.parquet   the rows, in shards named by split
    out/README.md                           the card: the YAML header the Hub reads (license,
                                            configs, task categories, size), then the funnel,
                                            sources, benchmarks with their hashes, the build
                                            command, code version and manifest hash
    out/cascade_manifest.json               the dataset manifest the card links to

Nothing is written unless the version's data files still hash to its recorded content hash
(`Lake.verify_hash`, what `cascade lake verify` and `cascade train` check). `parquet` and
`jsonl` write the same data layout (jsonl shards for `jsonl`) and the manifest
without the card. Rows are split by a `split` column when the table has one, else all rows
are `train`. Rows stream from DuckDB to the shards, so a table need not fit in memory.
"""

from __future__ import annotations

import importlib
import json
import math
import os
import re
import shlex
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
from huggingface_hub import DatasetCard, DatasetCardData

from builders.publish.manifest_file import ManifestFile, find_manifest
from lake import Lake, LakeError, VersionInfo
from schemas.dataset_manifest import DatasetManifest

FORMATS = ("parquet", "jsonl", "hf")
ROWS_PER_SHARD = 500_000
MANIFEST_NAME = "cascade_manifest.json"
SPLIT_NAME = re.compile(r"^\w+(\.\w+)*$")  # what `datasets` accepts as a split name
TASK_CATEGORIES = {
    "math": ["text-generation", "question-answering"],
    "science": ["text-generation", "question-answering"],
    "code": ["text-generation"],
    "swe": ["text-generation"],
    "if": ["text-generation"],
    "chat": ["text-generation"],
}
_SIZES = [
    (1_000, "n<1K"),
    (10_000, "1K<n<10K"),
    (100_000, "10K<n<100K"),
    (1_000_000, "100K<n<1M"),
    (10_000_000, "1M<n<10M"),
    (100_000_000, "10M<n<100M"),
    (1_000_000_000, "100M<n<1B"),
]


class ExportError(ValueError):
    """An export cannot be written; the message says why."""


@dataclass
class Export:
    """What an export wrote: the directory, data files by split, the card and the manifest."""

    directory: Path
    info: VersionInfo
    files: dict[str, list[Path]] = field(default_factory=dict)
    rows: dict[str, int] = field(default_factory=dict)
    card: Path | None = None
    manifest: ManifestFile | None = None


def export_dataset(
    lake: Lake,
    ref: str,
    directory: str | os.PathLike[str],
    format: str = "hf",
    *,
    manifest: DatasetManifest | str | os.PathLike[str] | None = None,
    search: Sequence[str | os.PathLike[str]] = (),
    license: str = "unknown",
    language: Sequence[str] = (),
    rows_per_shard: int = ROWS_PER_SHARD,
) -> Export:
    """Write `ref` (name or name@N) into `directory` (new or empty) as `format`."""
    if format not in FORMATS:
        raise ExportError(f"unknown export format {format!r}: use {', '.join(FORMATS)}")
    if rows_per_shard < 1:
        raise ExportError(f"rows per shard must be at least 1, got {rows_per_shard}")
    out = Path(directory)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ExportError(f"{out} is not an empty directory; export into a new one")
    info = lake.resolve(ref)
    try:  # a file changed since the commit must not leave under the version's hash and card
        lake.verify_hash(info.ref)
    except LakeError as exc:
        raise ExportError(f"{exc}; refusing to publish it") from None
    found = find_manifest(lake, info, manifest, search)
    out.mkdir(parents=True, exist_ok=True)
    export = Export(out, info, manifest=found)
    con = lake.connect(f'"{info.ref}"')
    try:
        columns = con.sql(f'SELECT * FROM "{info.ref}" LIMIT 0').columns
        split_rows = _splits(con, info, "split" in columns)
        ext = "jsonl" if format == "jsonl" else "parquet"
        for split, rows in split_rows.items():
            where = "WHERE split = ?" if "split" in columns else ""
            params = [split] if "split" in columns else []
            reader = con.execute(f'SELECT * FROM "{info.ref}" {where}', params).to_arrow_reader(
                min(rows_per_shard, 100_000)
            )
            shards = max(1, math.ceil(rows / rows_per_shard))
            export.files[split] = _write_shards(
                reader, out / "data", split, shards, rows_per_shard, ext
            )
            export.rows[split] = rows
    except BaseException:
        con.close()
        shutil.rmtree(out / "data", ignore_errors=True)
        raise
    con.close()
    if found is not None:
        target = out / MANIFEST_NAME
        if found.path is not None:
            shutil.copyfile(found.path, target)
        else:
            target.write_text(found.manifest.model_dump_json(indent=2) + "\n")
    if format == "hf":
        card = dataset_card(lake, export, license=license, language=language)
        export.card = out / "README.md"
        card.save(export.card)
    return export


def _splits(con: Any, info: VersionInfo, has_split: bool) -> dict[str, int]:
    if not has_split:
        return {"train": info.rows}
    counts = con.execute(
        f'SELECT CAST(split AS VARCHAR), count(*) FROM "{info.ref}" GROUP BY 1 ORDER BY 1'
    ).fetchall()
    for name, _ in counts:
        if name is None or not SPLIT_NAME.match(name):
            raise ExportError(
                f"{info.ref}: split value {name!r} is not a usable split name (letters, digits, "
                "underscores and dots)"
            )
    return {name: int(n) for name, n in counts}


def _write_shards(
    reader: pa.RecordBatchReader,
    directory: Path,
    split: str,
    shards: int,
    rows_per_shard: int,
    ext: str,
) -> list[Path]:
    """Stream `reader` into `shards` files of at most `rows_per_shard` rows each."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = [directory / f"{split}-{i:05d}-of-{shards:05d}.{ext}" for i in range(shards)]
    shard, in_shard = 0, 0
    writer: pq.ParquetWriter | None = None
    handle = None
    try:
        for batch in _rebatched(reader, rows_per_shard):
            if writer is None and handle is None:
                if ext == "parquet":
                    writer = pq.ParquetWriter(paths[shard], reader.schema, compression="zstd")
                else:
                    handle = paths[shard].open("wb")
            if writer is not None:
                writer.write_batch(batch)
            elif handle is not None:
                pl.from_arrow(pa.Table.from_batches([batch])).write_ndjson(handle)  # type: ignore[union-attr]
            in_shard += batch.num_rows
            if in_shard >= rows_per_shard:
                writer, handle = _close(writer, handle)
                shard, in_shard = shard + 1, 0
    finally:
        _close(writer, handle)
    for path in paths:  # a split with no rows still gets its (empty) file
        if not path.exists():
            if ext == "parquet":
                pq.write_table(reader.schema.empty_table(), path)
            else:
                path.write_bytes(b"")
    return paths


def _rebatched(reader: pa.RecordBatchReader, rows_per_shard: int):
    """Batches cut so that none crosses a shard boundary."""
    room = rows_per_shard
    for batch in reader:
        while batch.num_rows:
            head = batch.slice(0, room)
            yield head
            batch = batch.slice(head.num_rows)
            room -= head.num_rows
            if room == 0:
                room = rows_per_shard


def _close(writer: pq.ParquetWriter | None, handle: Any) -> tuple[None, None]:
    if writer is not None:
        writer.close()
    if handle is not None:
        handle.close()
    return None, None


# -- the dataset card ---------------------------------------------------------------------------


def size_category(rows: int) -> str:
    """The Hub's size category of a row count.

    >>> size_category(420), size_category(25_000)
    ('n<1K', '10K<n<100K')
    """
    for limit, name in _SIZES:
        if rows < limit:
            return name
    return "n>1B"


def build_command(manifest: DatasetManifest) -> str:
    """The `cascade build dataset` line that rebuilds a manifest's version, as far as the
    manifest records it: sources (default profile) and parameters that differ from the
    recipe's defaults (every recorded one when the recipe cannot be imported)."""
    parts = ["cascade", "build", "dataset", manifest.name]
    if manifest.profile != "default":
        parts += ["--profile", manifest.profile]
    else:
        for source in manifest.sources:
            parts += ["--source", source.path]
    try:
        defaults = importlib.import_module(manifest.recipe).DEFAULTS
    except (ImportError, AttributeError):
        defaults = {}
    for key, value in manifest.params.items():
        if key in defaults and json.loads(json.dumps(defaults[key], default=str)) == value:
            continue
        if manifest.profile != "default" and key in ("benchmarks",):
            continue  # a profile brings its own files
        parts += ["--set", f"{key}={_set_value(value)}"]
    return " ".join(shlex.quote(p) for p in parts)


def _set_value(value: Any) -> str:
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    if isinstance(value, dict):
        return json.dumps(value)
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def _domains(lake: Lake, info: VersionInfo) -> list[str]:
    con = lake.connect(f'"{info.ref}"')
    try:
        if "domain" not in con.sql(f'SELECT * FROM "{info.ref}" LIMIT 0').columns:
            return []
        rows = con.execute(f'SELECT DISTINCT domain FROM "{info.ref}" ORDER BY 1').fetchall()
    finally:
        con.close()
    return [str(r[0]) for r in rows if r[0] is not None]


def dataset_card(
    lake: Lake, export: Export, *, license: str = "unknown", language: Sequence[str] = ()
) -> DatasetCard:
    """The card of an exported version: Hub metadata, then how the data was built."""
    info = export.info
    m = export.manifest.manifest if export.manifest else None
    domains = _domains(lake, info)
    tasks = sorted({t for d in domains for t in TASK_CATEGORIES.get(d, ["text-generation"])})
    data = DatasetCardData(
        license=license,
        language=list(language) or None,
        pretty_name=f"{info.name} v{info.version}",
        size_categories=[size_category(info.rows)],
        task_categories=tasks or ["text-generation"],
        tags=["cascade", *domains, "reasoning"],
        configs=[
            {
                "config_name": "default",
                "data_files": [
                    {"split": split, "path": f"data/{split}-*"} for split in export.files
                ],
            }
        ],
    )
    lines = [
        f"# {info.name} (version {info.version})",
        "",
        f"{info.rows:,} rows built by cascade "
        f"(`{info.producer}`), lake version `{info.ref}` with content hash `{info.content_hash}`.",
        "",
        "| split | rows | files |",
        "| --- | ---: | ---: |",
        *(f"| {s} | {export.rows[s]:,} | {len(f)} |" for s, f in export.files.items()),
        "",
    ]
    if m is None:
        lines += [
            "No dataset manifest was found for this version, so its funnel, sources and "
            "benchmarks are not recorded here.",
            "",
            f"Parents: {', '.join(info.parents) or '-'}; code version `{info.code_version}`.",
        ]
        return DatasetCard(f"---\n{data.to_yaml()}\n---\n\n" + "\n".join(lines) + "\n")
    lines += [
        "## How it was built",
        "",
        f"Recipe `{m.recipe}`, profile `{m.profile}`. Rebuild it with:",
        "",
        "```bash",
        build_command(m),
        "```",
        "",
        "| step | rows in | rows out | dropped by reason |",
        "| --- | ---: | ---: | --- |",
        *(
            f"| {f.step} | {f.rows_in:,} | {f.rows_out:,} | "
            + ", ".join(f"{r} {n:,}" for r, n in sorted(f.dropped.items(), key=lambda x: -x[1]))
            + " |"
            for f in m.funnel
        ),
        "",
        "## Sources",
        "",
        "| path | rows |",
        "| --- | ---: |",
        *(f"| `{s.path}` | {s.rows:,} |" for s in m.sources),
        *(f"| `{p.ref}` (lake) | {p.rows:,} |" for p in m.inputs if not m.sources),
        "",
        "## Benchmarks decontaminated against",
        "",
    ]
    if m.benchmarks:
        lines += [
            "| benchmark | items | content_hash | origin |",
            "| --- | ---: | --- | --- |",
            *(
                f"| {b.name} | {b.items:,} | `{b.content_hash}` | `{b.origin}` |"
                for b in m.benchmarks
            ),
        ]
    else:
        lines.append("None: this recipe does not decontaminate.")
    manifest_file = export.manifest
    lines += [
        "",
        "## Provenance",
        "",
        f"- dataset manifest: [{MANIFEST_NAME}]({MANIFEST_NAME}), sha256 "
        f"`{manifest_file.sha256 if manifest_file else ''}`",
        f"- table version: `{info.ref}`, content_hash `{info.content_hash}`",
        *(f"- input: `{p.ref}`, content_hash `{p.content_hash}`" for p in m.inputs),
        *([f"- drops: `{m.drops.ref}`, content_hash `{m.drops.content_hash}`"] if m.drops else []),
        f"- code version: `{m.code_version}`",
        f"- build id: `{m.build_id}`",
        f"- built: {m.created_at.isoformat()}",
        "",
        "Parameters:",
        "",
        "```json",
        json.dumps(m.params, indent=2, ensure_ascii=False),
        "```",
    ]
    return DatasetCard(f"---\n{data.to_yaml()}\n---\n\n" + "\n".join(lines) + "\n")
