"""Ingest: read sources (jsonl, json, parquet, csv, Hugging Face datasets) into `prompts` rows.

Each row gets a unique, stable `uid` (`<file stem>:<line>`), the hash of its normalized
prompt as `id`, its `source` and the source's own `source_id`; fields not mapped to a column
are kept in the `metadata` JSON column exactly as they were (no key added or lost, whatever
shape each row's nested values have), so nothing is silently lost. Sources are read in chunks
and streamed into the lake, so inputs larger than memory work. A lake table can be a source
too (`name` or `name@N`).

Bad input is reported with the file and line (or row) at fault. With `on_error="skip"`, each
malformed line becomes a row of the `drops` table (reason `malformed`) instead of an error;
the rows and their drops commit together through `lake.run_steps`.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl
import pyarrow as pa

from curation.text import prompt_ids
from lake.catalog import EmptyCommitError, Lake, LakeError, TableRef, VersionInfo
from lake.steps import Rows, StepRun, run_steps
from schemas.tables import DOMAINS

TARGET_FIELDS = ("problem", "answer", "source_id")
ID_FIELDS = ("id", "unique_id", "task_id", "problem_id", "key")
CHUNK_BYTES = 32 << 20
PROMPT_COLUMNS = ["uid", "id", "source", "source_id", "domain", "problem", "answer", "metadata"]


class IngestError(ValueError):
    """A source cannot be ingested; the message names the file and line or field."""


@dataclass(frozen=True)
class Malformed:
    """One input line (or row) that could not be read."""

    file: str
    line: int
    error: str


@dataclass
class Chunk:
    """Raw records read from one source, with the line/row number of each record.

    `records` holds the parsed objects when a field has nested values whose shapes differ
    between rows: a frame would merge them into one struct type (adding null keys), so
    `metadata` is then written from the records themselves.
    """

    frame: pl.DataFrame
    lines: list[int]
    records: list[dict] | None = None


@dataclass
class IngestReport:
    """What an ingest committed: the table version, rows per source, malformed lines."""

    version: VersionInfo
    rows_by_source: dict[str, int]
    rows_by_path: dict[str, int] = field(default_factory=dict)
    malformed: list[Malformed] = field(default_factory=list)
    drops_version: VersionInfo | None = None
    run: StepRun | None = None


def parse_mapping(text: str | None) -> dict[str, str]:
    """Parse `problem=question,answer=expected_answer` into {target: source_field}."""
    mapping: dict[str, str] = {}
    if not text:
        return mapping
    for part in text.split(","):
        target, sep, source = part.strip().partition("=")
        if not sep or not target or not source:
            raise IngestError(f"bad --map entry {part!r}: expected TARGET=FIELD")
        if target not in TARGET_FIELDS:
            raise IngestError(f"bad --map target {target!r}: must be one of {TARGET_FIELDS}")
        mapping[target] = source
    return mapping


# -- reading sources ----------------------------------------------------------------------


def source_format(path: str) -> str:
    """jsonl, json, parquet, csv, hf-disk (a saved `datasets` dir) or hf-hub (a hub id)."""
    p = Path(path)
    if p.is_dir():
        if any((p / f).exists() for f in ("dataset_info.json", "state.json", "dataset_dict.json")):
            return "hf-disk"
        raise IngestError(f"{path}: a directory, but not a saved Hugging Face dataset")
    if p.exists():
        suffix = p.suffix.lower()
        if suffix in (".jsonl", ".ndjson"):
            return "jsonl"
        if suffix == ".json":
            with open(p, "rb") as fh:
                head = fh.read(4096).lstrip()
            return "json" if head.startswith(b"[") else "jsonl"
        if suffix in (".parquet", ".pq"):
            return "parquet"
        if suffix in (".csv", ".tsv"):
            return "csv"
        raise IngestError(f"{path}: unknown file type {suffix!r} (jsonl, json, parquet, csv)")
    if "/" in path and not path.startswith((".", "/")) and path.count("/") == 1:
        return "hf-hub"
    raise IngestError(f"{path}: no such file or directory")


def read_chunks(path: str, on_error: str = "raise", split: str | None = None) -> Iterator[Chunk]:
    """Yield the records of one source as chunks; malformed lines raise or are yielded."""
    fmt = source_format(path)
    if fmt == "jsonl":
        yield from _read_jsonl(path, on_error)
    elif fmt == "json":
        yield from _read_json_array(path, on_error)
    elif fmt == "parquet":
        import pyarrow.parquet as pq

        start = 1
        for batch in pq.ParquetFile(path).iter_batches(batch_size=200_000):
            frame = pl.from_arrow(batch)
            yield Chunk(frame, list(range(start, start + frame.height)))
            start += frame.height
    elif fmt == "csv":
        yield from _read_csv(path, on_error)
    else:
        yield from _read_hf(path, fmt, split)


def _read_jsonl(path: str, on_error: str) -> Iterator[Chunk | Malformed]:
    line_no = 0
    with open(path, "rb") as fh:
        while True:
            block = fh.read(CHUNK_BYTES)
            if not block:
                break
            if not block.endswith(b"\n"):
                block += fh.readline()
            lines = block.split(b"\n")
            if lines and lines[-1] == b"":
                lines.pop()
            first = line_no + 1
            line_no += len(lines)
            numbers = [first + i for i, raw in enumerate(lines) if raw.strip()]
            try:
                frame = pl.read_ndjson(io.BytesIO(block), infer_schema_length=None)
                exact = not _has_struct(frame.schema) and not _mixed_scalars(frame, block)
                if frame.height == len(numbers) and exact:
                    yield Chunk(frame, numbers)
                    continue
            except Exception:  # noqa: BLE001 - any parse failure: locate it line by line below
                pass
            yield from _parse_lines(path, lines, first, on_error)


def _parse_lines(
    path: str, lines: list[bytes], first: int, on_error: str
) -> Iterator[Chunk | Malformed]:
    """Slow path for a block with a bad line: parse each line to name the culprit."""
    records: list[dict] = []
    numbers: list[int] = []
    for offset, raw in enumerate(lines):
        if not raw.strip():
            continue
        number = first + offset
        try:
            record = json.loads(raw)
            if not isinstance(record, dict):
                raise ValueError(f"expected a JSON object, got {type(record).__name__}")
        except ValueError as exc:
            bad = Malformed(path, number, _one_line(exc))
            if on_error != "skip":
                raise IngestError(f"{path}:{number}: malformed line: {bad.error}") from None
            yield bad
            continue
        records.append(record)
        numbers.append(number)
    if records:
        yield Chunk(_frame_from_records(records), numbers, records)


def _has_struct(schema: pl.Schema) -> bool:
    """True if any column holds objects, at any depth (their key sets may differ by row)."""

    def nested(dtype: pl.DataType) -> bool:
        if isinstance(dtype, pl.Struct):
            return True
        if isinstance(dtype, pl.List | pl.Array):
            return nested(dtype.inner)
        return False

    return any(nested(dtype) for dtype in schema.values())


_SCALAR_TEXT = r"^(?:-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|true|false)$"


def _mixed_scalars(frame: pl.DataFrame, block: bytes) -> bool:
    """True if a text column also had unquoted numbers or booleans in the JSON: Polars
    would keep them as text ("1" for 1), so the rows must be read exactly instead. Only a
    column with number-looking text is checked against the raw bytes."""
    for name, dtype in frame.schema.items():
        if dtype != pl.String or not frame.get_column(name).str.contains(_SCALAR_TEXT).any():
            continue
        key = re.escape(json.dumps(name).encode())
        if re.search(key + rb"\s*:\s*[-0-9tf]", block):
            return True
    return False


def _frame_from_records(records: list[dict]) -> pl.DataFrame:
    """A frame of the records' fields: scalars typed by Polars, nested values as JSON text.

    Values of mixed types across rows (e.g. answer 5 and "5") must not fail the chunk.
    """
    keys = list(dict.fromkeys(k for r in records for k in r))
    columns = {k: [r.get(k) for r in records] for k in keys}
    nested = {k for k, vs in columns.items() if any(isinstance(v, dict | list) for v in vs)}
    flat = {k: vs for k, vs in columns.items() if k not in nested}
    try:
        frame = pl.DataFrame(flat, strict=False) if flat else pl.DataFrame()
        if any(frame[k].dtype == pl.Object for k in frame.columns):
            raise TypeError("mixed values")
    except Exception:  # noqa: BLE001 - fall back to JSON text for every non-string field
        frame = pl.DataFrame(
            {k: [_text(v) for v in vs] for k, vs in flat.items()},
            schema={k: pl.String for k in flat},
        )
    if nested:  # (a frame of no flat field has no rows to add columns to: build it whole)
        texts = pl.DataFrame(
            {k: pl.Series(k, [_text(v) for v in columns[k]], dtype=pl.String) for k in nested}
        )
        frame = pl.concat([frame, texts], how="horizontal") if frame.width else texts
    return frame.select(keys) if keys else frame


def _text(value: object) -> str | None:
    return (
        value if isinstance(value, str) or value is None else json.dumps(value, ensure_ascii=False)
    )


def _read_json_array(path: str, on_error: str) -> Iterator[Chunk | Malformed]:
    with open(path, encoding="utf-8") as fh:
        try:
            data = json.load(fh)
        except json.JSONDecodeError as exc:
            raise IngestError(f"{path}:{exc.lineno}: malformed JSON: {exc.msg}") from None
    if not isinstance(data, list):
        raise IngestError(f"{path}: expected a JSON array of objects, got {type(data).__name__}")
    records: list[dict] = []
    numbers: list[int] = []
    for index, record in enumerate(data, start=1):
        if not isinstance(record, dict):
            error = f"item {index} is a {type(record).__name__}, expected an object"
            if on_error != "skip":
                raise IngestError(f"{path}: {error}")
            yield Malformed(path, index, error)
            continue
        records.append(record)
        numbers.append(index)
    if records:
        yield Chunk(_frame_from_records(records), numbers)


def _read_csv(path: str, on_error: str) -> Iterator[Chunk | Malformed]:
    sep = "\t" if path.lower().endswith(".tsv") else ","
    try:
        frame = pl.read_csv(path, separator=sep, infer_schema=False)
        yield Chunk(frame, list(range(2, frame.height + 2)))
        return
    except Exception:  # noqa: BLE001 - find the bad row with the csv module below
        pass
    with open(path, newline="", encoding="utf-8") as fh:
        reader = csv.reader(fh, delimiter=sep)
        header = next(reader, None)
        if header is None:
            return
        rows: list[list[str]] = []
        numbers: list[int] = []
        for row in reader:
            if len(row) != len(header):
                error = f"expected {len(header)} fields, found {len(row)}"
                if on_error != "skip":
                    raise IngestError(f"{path}:{reader.line_num}: malformed row: {error}")
                yield Malformed(path, reader.line_num, error)
                continue
            rows.append(row)
            numbers.append(reader.line_num)
    if rows:
        frame = pl.DataFrame(rows, schema=header, orient="row")
        yield Chunk(frame, numbers)


def _read_hf(path: str, fmt: str, split: str | None) -> Iterator[Chunk]:
    import datasets

    if fmt == "hf-disk":
        ds = datasets.load_from_disk(path)
    else:
        ds = datasets.load_dataset(path, split=split)
    if isinstance(ds, datasets.DatasetDict):
        splits = list(ds)
        if split is None:
            if len(splits) != 1:
                raise IngestError(f"{path}: dataset has splits {splits}; choose one with --split")
            split = splits[0]
        if split not in ds:
            raise IngestError(f"{path}: no split {split!r}; splits are {splits}")
        ds = ds[split]
    start = 1
    for batch in ds.data.table.to_batches(max_chunksize=200_000):
        frame = pl.from_arrow(batch)
        yield Chunk(frame, list(range(start, start + frame.height)))
        start += frame.height


# -- shaping records into prompts -------------------------------------------------------


def to_prompts(
    chunk: Chunk,
    *,
    path: str,
    source: str,
    domain: str,
    mapping: dict[str, str],
    uid_prefix: str | None = None,
) -> pl.DataFrame:
    """Shape raw records into `prompts` rows; unmapped fields go to `metadata` JSON.

    `uid` is `<uid_prefix>:<line>` (default prefix: the source name).
    """
    frame = chunk.frame
    fields = frame.columns
    problem_field = mapping.get("problem", "problem")
    if problem_field not in fields:
        raise IngestError(
            f"{path}: required field {problem_field!r} not found; available fields: "
            f"{fields}; map one with --map problem=FIELD"
        )
    for target, name in mapping.items():
        if name not in fields:
            raise IngestError(
                f"{path}: --map {target}={name}: no field {name!r}; available fields: {fields}"
            )
    problem = frame.get_column(problem_field)
    if isinstance(problem.dtype, pl.List | pl.Struct | pl.Array):
        # A structured prompt (a list of chat turns): kept as its JSON text.
        problem = _as_text(problem)
    if problem.dtype != pl.String:
        raise IngestError(f"{path}: field {problem_field!r} must be text, found {problem.dtype}")
    empty = problem.is_null() | (problem.str.strip_chars() == "")
    if empty.any():
        row = int(empty.arg_max())
        raise IngestError(
            f"{path}:{chunk.lines[row]}: required field {problem_field!r} is empty or null"
        )
    answer_field = mapping.get("answer", "answer" if "answer" in fields else None)
    id_field = mapping.get("source_id") or next((f for f in ID_FIELDS if f in fields), None)
    used = {problem_field, answer_field, id_field} - {None}
    rest = [f for f in fields if f not in used]

    prefix = uid_prefix or source
    columns = {
        "uid": f"{prefix}:" + pl.Series(chunk.lines, dtype=pl.Int64).cast(pl.String),
        "id": prompt_ids(problem),
        "source": pl.Series([source] * frame.height, dtype=pl.String),
        "source_id": (
            _as_text(frame.get_column(id_field))
            if id_field
            else pl.Series([str(n) for n in chunk.lines], dtype=pl.String)
        ),
        "domain": pl.Series([domain] * frame.height, dtype=pl.String),
        "problem": problem,
        "answer": (
            _as_text(frame.get_column(answer_field))
            if answer_field
            else pl.Series([None] * frame.height, dtype=pl.String)
        ),
        "metadata": _metadata(chunk, rest),
    }
    out = pl.DataFrame({k: v.alias(k) for k, v in columns.items()})
    if out.get_column("source_id").null_count():  # rows without an id keep their line number
        out = out.with_columns(
            pl.when(pl.col("source_id").is_null())
            .then(pl.Series([str(n) for n in chunk.lines]))
            .otherwise(pl.col("source_id"))
            .alias("source_id")
        )
    return out


def _metadata(chunk: Chunk, fields: list[str]) -> pl.Series:
    """The unmapped fields of each row as a JSON object, exactly as the row had them."""
    if not fields:
        return pl.Series(["{}"] * chunk.frame.height, dtype=pl.String)
    if chunk.records is not None:
        wanted = set(fields)
        return pl.Series(
            [
                json.dumps({k: v for k, v in r.items() if k in wanted}, ensure_ascii=False)
                for r in chunk.records
            ],
            dtype=pl.String,
        )
    return chunk.frame.select(pl.struct(fields).struct.json_encode()).to_series()


def _as_text(series: pl.Series) -> pl.Series:
    """Answers and ids as text: numbers printed plainly, nested values as JSON."""
    if series.dtype == pl.String:
        return series
    if series.dtype.is_numeric() or series.dtype in (pl.Boolean, pl.Null):
        return series.cast(pl.String)
    encoded = pl.DataFrame({"v": series}).select(pl.struct("v").struct.json_encode()).to_series()
    text = encoded.str.slice(5).str.strip_suffix("}")  # drop the '{"v":' wrapper
    return text.set(series.is_null(), None) if series.null_count() else text


# -- the whole ingest -------------------------------------------------------------------


def ingest(
    lake: Lake,
    paths: list[str],
    table: str,
    *,
    domain: str = "math",
    mapping: dict[str, str] | None = None,
    on_error: str = "raise",
    source: str | None = None,
    split: str | None = None,
) -> IngestReport:
    """Read every source into one new version of `table` (kind `prompts`).

    `source` names the rows' origin (default: each file's stem). A path that is not a file
    but names a lake table (`name` or `name@N`) reads that table's rows. Nothing is committed
    when a source is bad (on_error="raise") or when there is no row at all.
    """
    if domain not in DOMAINS:
        raise IngestError(f"unknown domain {domain!r}; choose one of {', '.join(DOMAINS)}")
    if on_error not in ("raise", "skip"):
        raise IngestError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
    if not paths:
        raise IngestError("no input paths given")
    if len(set(paths)) != len(paths):
        raise IngestError(f"the same source is given twice: {paths}")
    mapping = dict(mapping or {})
    tables = {p: _lake_source(lake, p) for p in paths}  # fail fast before writing anything
    for path in paths:
        if tables[path] is None:
            source_format(path)
    prefixes = _uid_prefixes([p for p in paths if tables[p] is None])
    rows_by_source: dict[str, int] = {}
    rows_by_path: dict[str, int] = {}
    malformed: list[Malformed] = []

    def batches() -> Iterator[pa.RecordBatch]:
        for path in paths:
            rows_by_path[path] = 0
            info = tables[path]
            if info is not None:
                prompts = _prompts_from_table(lake, info, domain=domain, mapping=mapping)
                for name, count in prompts.group_by("source").len().iter_rows():
                    rows_by_source[name] = rows_by_source.get(name, 0) + count
                rows_by_path[path] += prompts.height
                yield from prompts.to_arrow().to_batches()
                continue
            name = source or _source_name(path)
            rows_by_source.setdefault(name, 0)
            for item in read_chunks(path, on_error, split):
                if isinstance(item, Malformed):
                    malformed.append(item)
                    continue
                if on_error == "skip":
                    item, empty = _split_empty(item, path, mapping.get("problem", "problem"))
                    malformed.extend(empty)
                    if not item.frame.height:
                        continue
                prompts = to_prompts(
                    item,
                    path=path,
                    source=name,
                    domain=domain,
                    mapping=mapping,
                    uid_prefix=prefixes[path],
                )
                rows_by_source[name] += prompts.height
                rows_by_path[path] += prompts.height
                yield from prompts.to_arrow().to_batches()

    def unreadable() -> pl.DataFrame:
        return pl.DataFrame(
            {
                "uid": [f"{prefixes.get(m.file, m.file)}:{m.line}" for m in malformed],
                "reason": ["malformed"] * len(malformed),
                "file": [m.file for m in malformed],
                "line": [m.line for m in malformed],
                "error": [m.error for m in malformed],
            },
            schema={
                "uid": pl.String,
                "reason": pl.String,
                "file": pl.String,
                "line": pl.Int64,
                "error": pl.String,
            },
        )

    params = {
        "paths": [str(p) for p in paths],
        "domain": domain,
        "mapping": mapping,
        "on_error": on_error,
        "source": source,
        "split": split,
    }
    parents = [info.ref for info in tables.values() if info is not None]
    try:
        run = run_steps(
            lake,
            Rows(batches(), unreadable, step="ingest", parents=parents),
            [],
            out=table,
            kind="prompts",
            producer="cascade ingest",
            params=params,
        )
    except EmptyCommitError:
        raise IngestError(
            f"no rows found in {', '.join(paths)}"
            + (f" ({len(malformed)} malformed lines skipped)" if malformed else "")
            + "; nothing was committed"
        ) from None
    return IngestReport(
        version=run.output,
        rows_by_source=rows_by_source,
        rows_by_path=rows_by_path,
        malformed=malformed,
        drops_version=run.drops,
        run=run,
    )


def _split_empty(chunk: Chunk, path: str, field: str) -> tuple[Chunk, list[Malformed]]:
    """Rows whose prompt field is null or blank, as malformed lines (when skipping them)."""
    if field not in chunk.frame.columns:
        return chunk, []
    value = chunk.frame.get_column(field)
    empty = value.is_null()
    if value.dtype == pl.String:
        empty |= value.str.strip_chars() == ""
    if not empty.any():
        return chunk, []
    flags = empty.to_list()
    bad = [
        Malformed(path, line, f"required field {field!r} is empty or null")
        for line, flag in zip(chunk.lines, flags, strict=True)
        if flag
    ]
    keep = [i for i, flag in enumerate(flags) if not flag]
    records = [chunk.records[i] for i in keep] if chunk.records is not None else None
    return Chunk(chunk.frame[keep], [chunk.lines[i] for i in keep], records), bad


def _lake_source(lake: Lake, path: str) -> VersionInfo | None:
    """The lake table a source names, or None for a file (or anything that is not a table)."""
    if Path(path).exists():
        return None
    try:
        ref = TableRef.parse(path)
    except LakeError:
        return None
    if not lake.has(ref.name):
        return None
    return lake.resolve(ref)


def _uid_prefixes(paths: list[str]) -> dict[str, str]:
    """Each file's uid prefix: its name without suffix, or its path when two names clash."""
    names = {p: _source_name(p) for p in paths}
    clashing = {n for n in names.values() if list(names.values()).count(n) > 1}
    return {p: (p if n in clashing else n) for p, n in names.items()}


def _prompts_from_table(
    lake: Lake, info: VersionInfo, *, domain: str, mapping: dict[str, str]
) -> pl.DataFrame:
    """A lake table's rows as prompts: a prompts table as it is, others mapped like a file."""
    frame = pl.from_arrow(lake.read(info.ref))
    assert isinstance(frame, pl.DataFrame)
    if info.kind == "prompts" and not mapping:
        return frame.select(PROMPT_COLUMNS)
    if "uid" in frame.columns:
        frame = frame.drop("uid")
    chunk = Chunk(frame, list(range(1, frame.height + 1)))
    return to_prompts(
        chunk,
        path=info.ref,
        source=info.name,
        domain=domain,
        mapping=mapping,
        uid_prefix=info.ref,
    )


def _source_name(path: str) -> str:
    p = Path(path)
    if p.exists():
        name = p.name
        for suffix in (".jsonl", ".ndjson", ".json", ".parquet", ".pq", ".csv", ".tsv"):
            if name.lower().endswith(suffix):
                return name[: -len(suffix)]
        return name
    return path


def _one_line(exc: Exception) -> str:
    return " ".join(str(exc).split())
