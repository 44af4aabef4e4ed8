"""Ingest: read sources (jsonl, json, parquet, csv, Hugging Face datasets) into `prompts` rows.

Each row gets a unique, stable `uid` (`<file stem>:<line>`), the hash of its normalized
prompt as `id`, its `source` and the source's own `source_id`; fields not mapped to a column
are kept in the `metadata` JSON column exactly as they were (no key added or lost, whatever
shape each row's nested values have), so nothing is silently lost. Sources are read in chunks
and streamed into the lake, so inputs larger than memory work. A lake table can be a source
too (`name` or `name@N`).

Bad input is reported in one sentence with the file and line (or row, or column) at fault.
With `on_error="skip"`, each malformed line becomes a row of the `drops` table (reason
`malformed`) instead of an error; the rows and their drops commit together through
`lake.run_steps`. Nothing is committed when an ingest fails. The rules, the same on every
path (Polars' fast reader of clean jsonl blocks, the line-by-line Python reader, JSON arrays):

- a key twice in one JSON object (at any depth) makes the line malformed: JSON leaves the
  meaning open (Polars keeps the first value, Python's json the last), so cascade refuses
  to guess; a CSV header naming a column twice is refused the same way;
- NaN, Infinity and -Infinity are not JSON, and a number too large for a double would
  become one: the line is malformed. NaN or infinite floats in a Parquet or Hugging Face
  column make their row malformed too (metadata is JSON; write null for a missing value);
- a line nested deeper than MAX_DEPTH levels of arrays and objects is malformed;
- a UTF-8 byte order mark at the start of a file is skipped;
- binary columns (Parquet, Hugging Face, lake tables) are refused, naming the column:
  their bytes are neither text nor JSON (decode or drop them first);
- an empty or unreadable Parquet file is refused, naming the file.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa

from curation.prompt_ids import prompt_ids
from lake.catalog import EmptyCommitError, Lake, LakeError, TableRef, VersionInfo
from lake.steps import Rows, StepRun, run_steps
from schemas.tables import DOMAINS

TARGET_FIELDS = ("problem", "answer", "source_id")
ID_FIELDS = ("id", "unique_id", "task_id", "problem_id", "key")
CHUNK_BYTES = 32 << 20
PROMPT_COLUMNS = ["uid", "id", "source", "source_id", "domain", "problem", "answer", "metadata"]
MAX_DEPTH = 256
"""The deepest nesting of arrays and objects a record may have (its own object is level 1)."""
BOM = b"\xef\xbb\xbf"


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
    pins: dict[str, SourcePin] = field(default_factory=dict)
    """Each source's exact identity: a lake table's version and content hash, a local file's
    (or saved dataset directory's) sha256; empty for a hub id."""


@dataclass(frozen=True)
class SourcePin:
    version: str | None = None
    content_hash: str | None = None


def source_pin(path: str, table: VersionInfo | None) -> SourcePin:
    """What pins a source: the table version it read, or the sha256 of the bytes on disk."""
    if table is not None:
        return SourcePin(table.ref, table.content_hash)
    local = Path(path)
    if local.is_file():
        with local.open("rb") as fh:
            return SourcePin(None, "sha256:" + hashlib.file_digest(fh, "sha256").hexdigest())
    if local.is_dir():
        digest = hashlib.sha256()
        for file in sorted(f for f in local.rglob("*") if f.is_file()):
            digest.update(str(file.relative_to(local)).encode() + b"\0")
            with file.open("rb") as fh:
                digest.update(hashlib.file_digest(fh, "sha256").digest())
        return SourcePin(None, "sha256:" + digest.hexdigest())
    return SourcePin()


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
                head = fh.read(4096).removeprefix(BOM).lstrip()
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
        start = 1
        for batch in _parquet_file(path).iter_batches(batch_size=200_000):
            frame = pl.from_arrow(batch)
            yield Chunk(frame, list(range(start, start + frame.height)))
            start += frame.height
    elif fmt == "csv":
        yield from _read_csv(path, on_error)
    else:
        yield from _read_hf(path, fmt, split)


def _parquet_file(path: str) -> Any:
    """The Parquet file at `path`, or one sentence on why it cannot be read."""
    import pyarrow.parquet as pq

    if Path(path).stat().st_size == 0:
        raise IngestError(f"{path}: the file is empty (0 bytes), not a Parquet file")
    try:
        return pq.ParquetFile(path)
    except (pa.ArrowException, OSError) as exc:
        raise IngestError(f"{path}: not a readable Parquet file ({_one_line(exc)})") from None


def _read_jsonl(path: str, on_error: str) -> Iterator[Chunk | Malformed]:
    line_no = 0
    with open(path, "rb") as fh:
        while True:
            block = fh.read(CHUNK_BYTES)
            if not block:
                break
            if line_no == 0 and block.startswith(BOM):
                block = block[len(BOM) :]
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
                if frame.height == len(numbers) and _fast_path_exact(frame, block, lines):
                    yield Chunk(frame, numbers)
                    continue
            except Exception:  # noqa: BLE001 - any parse failure: locate it line by line below
                pass
            yield from _parse_lines(path, lines, first, on_error)


def _fast_path_exact(frame: pl.DataFrame, block: bytes, lines: list[bytes]) -> bool:
    """True if Polars read the block as the line-by-line reader would have.

    Polars merges objects into structs (adding null keys), keeps text for unquoted numbers
    in a text column, nests lists deeper than MAX_DEPTH and keeps the first of two equal
    keys; a block with any of these is read line by line instead.
    """
    for dtype in frame.schema.values():
        depth, holds_struct = _nesting(dtype)
        if holds_struct or depth + 1 > MAX_DEPTH:
            return False
    return not _mixed_scalars(frame, block) and not _repeated_keys(lines, frame.columns)


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
            record = decode_json(raw.decode("utf-8"))
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


def _nesting(dtype: pl.DataType) -> tuple[int, bool]:
    """How many lists deep a column's values go, and whether objects (structs) are inside."""
    depth = 0
    while isinstance(dtype, pl.List | pl.Array):
        depth += 1
        dtype = dtype.inner
    return depth, isinstance(dtype, pl.Struct)


_SCALAR_TEXT = r"^(?:-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|true|false)$"
_JSON_STRING = r'"(?:[^"\\]|\\.)*"'


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


def _repeated_keys(lines: list[bytes], columns: list[str]) -> bool:
    """True if a line may hold a key twice. A block Polars read without structs has no
    nested objects, so its keys are the columns, each written `"name":` unless escaped:
    a line with a column's `"name":` twice, or with a key holding an escape (`"\u0061"`
    is `"a"`), is a suspect. Inside a JSON string every quote is escaped, so text in a
    value never counts as a key (a key ending in `\"name` may: a harmless false alarm)."""
    text = pl.DataFrame({"line": pl.Series(lines, dtype=pl.Binary).cast(pl.String)})
    line = pl.col("line")
    suspects = text.select(
        line.str.contains(_ESCAPED_KEY).alias("escaped"),
        *(
            (
                line.str.count_matches(re.escape(json.dumps(c, ensure_ascii=False)) + r"\s*:") > 1
            ).alias(f"key{i}")
            for i, c in enumerate(columns)
        ),
    )
    return bool(suspects.select(pl.any_horizontal(pl.all()).any()).item())


_ESCAPED_KEY = r'\\.[^"\\]*"\s*:'
"""An escape, then no backslash or quote until a quote and a colon: only a key's last escape
matches (in a value, the next quote is escaped or is not followed by a colon)."""


class _Refused(ValueError):
    """Text that parses but that ingest does not accept as JSON (see the module docstring)."""


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict:
    record = dict(pairs)
    if len(record) < len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _Refused(f"duplicate key {key!r} in one object")
            seen.add(key)
    return record


def _no_constant(name: str) -> float:
    raise _Refused(f"{name} is not valid JSON (write null for a missing number)")


def _finite_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise _Refused(f"the number {text} is too large for a double (it would be Infinity)")
    return value


_DECODER = json.JSONDecoder(
    object_pairs_hook=_unique_keys, parse_constant=_no_constant, parse_float=_finite_float
)
_TOO_DEEP = f"nested deeper than {MAX_DEPTH} levels of arrays and objects"


def decode_json(text: str) -> Any:
    """One JSON value under ingest's rules: no key twice in an object, no NaN or Infinity,
    at most MAX_DEPTH levels deep; a ValueError says which rule a text breaks."""
    try:
        value = _DECODER.decode(text)
    except RecursionError:
        raise _Refused(_TOO_DEEP) from None
    _check_depth(value, text.count("[") + text.count("{"))
    return value


def _check_depth(value: Any, brackets: int) -> None:
    """Refuse a value nested deeper than MAX_DEPTH (walked only when its text has more
    brackets than that)."""
    if brackets <= MAX_DEPTH:
        return
    stack = [(value, 1)]
    while stack:
        item, level = stack.pop()
        if not isinstance(item, dict | list):
            continue
        if level > MAX_DEPTH:
            raise _Refused(_TOO_DEEP)
        children = item.values() if isinstance(item, dict) else item
        stack.extend((child, level + 1) for child in children)


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


_WHITESPACE = re.compile(r"[ \t\n\r]*")
_VALUE_TOKENS = re.compile(_JSON_STRING + r"|[\[\]{}]")
_SCALAR = re.compile(r"[^,\]\s]*")


def _read_json_array(path: str, on_error: str) -> Iterator[Chunk | Malformed]:
    """The objects of a JSON array, item by item, so a bad item is named by its line and
    (when skipping) only that item is dropped; a syntax error stops the file."""
    try:
        text = Path(path).read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise IngestError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    lines = _LineCounter(text)
    pos = _WHITESPACE.match(text).end()  # type: ignore[union-attr]
    if not text.startswith("[", pos):
        raise IngestError(f"{path}:{lines.at(pos)}: expected a JSON array of objects")
    pos = _WHITESPACE.match(text, pos + 1).end()  # type: ignore[union-attr]
    records: list[dict] = []
    numbers: list[int] = []
    index = 0
    while not text.startswith("]", pos):
        index += 1
        start = pos
        error = None
        try:
            record, pos = _DECODER.raw_decode(text, pos)
            _check_depth(record, text.count("[", start, pos) + text.count("{", start, pos))
            if not isinstance(record, dict):
                error = f"a {type(record).__name__}, expected an object"
        except json.JSONDecodeError as exc:
            raise IngestError(f"{path}:{exc.lineno}: malformed JSON: {exc.msg}") from None
        except (_Refused, RecursionError) as exc:
            error = str(exc) if isinstance(exc, _Refused) else _TOO_DEEP
            pos = _value_end(text, start)
        if error is not None:
            line = lines.at(start)
            if on_error != "skip":
                raise IngestError(f"{path}:{line}: malformed item {index}: {error}")
            yield Malformed(path, index, f"item {index} (line {line}): {error}")
        else:
            records.append(record)
            numbers.append(index)
        pos = _WHITESPACE.match(text, pos).end()  # type: ignore[union-attr]
        if text.startswith(",", pos):
            pos = _WHITESPACE.match(text, pos + 1).end()  # type: ignore[union-attr]
        elif not text.startswith("]", pos):
            raise IngestError(
                f"{path}:{lines.at(pos)}: malformed JSON: expected ',' or ']' after item {index}"
            )
    end = _WHITESPACE.match(text, pos + 1).end()  # type: ignore[union-attr]
    if end != len(text):
        raise IngestError(f"{path}:{lines.at(end)}: malformed JSON: extra data after the array")
    if records:
        yield Chunk(_frame_from_records(records), numbers, records)


class _LineCounter:
    """Line numbers of positions in a text, counted forward from the last one asked for."""

    def __init__(self, text: str) -> None:
        self.text, self.pos, self.line = text, 0, 1

    def at(self, pos: int) -> int:
        if pos < self.pos:
            self.pos, self.line = 0, 1
        self.line += self.text.count("\n", self.pos, pos)
        self.pos = pos
        return self.line


def _value_end(text: str, start: int) -> int:
    """Where the JSON value starting at `start` ends, found without parsing it (for an item
    the parser refused: too deep, a duplicate key, NaN)."""
    if not text.startswith(("[", "{"), start):
        return _SCALAR.match(text, start).end()  # type: ignore[union-attr]
    depth = 0
    for match in _VALUE_TOKENS.finditer(text, start):
        token = match.group()
        if token in ("[", "{"):
            depth += 1
        elif token in ("]", "}"):
            depth -= 1
            if depth == 0:
                return match.end()
    return len(text)


def _read_csv(path: str, on_error: str) -> Iterator[Chunk | Malformed]:
    sep = "\t" if path.lower().endswith(".tsv") else ","
    with open(path, newline="", encoding="utf-8-sig") as fh:
        header = next(csv.reader(fh, delimiter=sep), [])
    twice = next((name for i, name in enumerate(header) if name in header[:i]), None)
    if twice is not None:
        raise IngestError(f"{path}:1: the header names the column {twice!r} twice")
    try:
        frame = pl.read_csv(path, separator=sep, infer_schema=False)
        yield Chunk(frame, list(range(2, frame.height + 2)))
        return
    except Exception:  # noqa: BLE001 - find the bad row with the csv module below
        pass
    with open(path, newline="", encoding="utf-8-sig") as fh:
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
    for name, dtype in frame.schema.items():
        if _holds_binary(dtype):
            raise IngestError(
                f"{path}: column {name!r} holds binary data ({dtype}), which is neither text "
                "nor JSON; decode it to text or drop it before ingesting"
            )
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
    errors = _row_errors(frame, problem_field)
    if errors is not None:
        row = int(errors.is_not_null().arg_max())  # type: ignore[arg-type]
        raise IngestError(f"{path}:{chunk.lines[row]}: {errors[row]}")
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
                    item, bad = _split_bad_rows(item, path, mapping.get("problem", "problem"))
                    malformed.extend(bad)
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
    pins = {path: source_pin(path, tables[path]) for path in paths}
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
        pins=pins,
    )


def _split_bad_rows(chunk: Chunk, path: str, field: str) -> tuple[Chunk, list[Malformed]]:
    """Rows that cannot be ingested (see `_row_errors`), as malformed lines (when skipping)."""
    errors = _row_errors(chunk.frame, field)
    if errors is None:
        return chunk, []
    why = errors.to_list()
    bad = [Malformed(path, line, e) for line, e in zip(chunk.lines, why, strict=True) if e]
    keep = [i for i, e in enumerate(why) if e is None]
    records = [chunk.records[i] for i in keep] if chunk.records is not None else None
    return Chunk(chunk.frame[keep], [chunk.lines[i] for i in keep], records), bad


def _row_errors(frame: pl.DataFrame, field: str) -> pl.Series | None:
    """Per row, why it cannot be ingested (null where it can; None when every row can): its
    prompt field is null or blank, or a float in it is NaN or infinite (not JSON)."""
    checks = []
    if field in frame.columns:
        empty = pl.col(field).is_null()
        if frame.schema[field] == pl.String:
            empty = empty | (pl.col(field).str.strip_chars() == "")
        checks.append(pl.when(empty).then(pl.lit(f"required field {field!r} is empty or null")))
    for name, dtype in frame.schema.items():
        bad = _non_finite(pl.col(name), dtype)
        if bad is not None:
            why = f"column {name!r} holds NaN or an infinity, which JSON cannot hold"
            checks.append(pl.when(bad.fill_null(False)).then(pl.lit(why)))
    if not checks or not frame.height:
        return None
    errors = frame.select(pl.coalesce(checks)).to_series()
    return errors if errors.null_count() < frame.height else None


def _non_finite(expr: pl.Expr, dtype: pl.DataType) -> pl.Expr | None:
    """Where a value holds a NaN or an infinite float, at any depth (None: it holds no
    floats)."""
    if dtype.is_float():
        return ~expr.is_finite()
    if isinstance(dtype, pl.Array):
        return _non_finite(expr.cast(pl.List(dtype.inner)), pl.List(dtype.inner))
    if isinstance(dtype, pl.List):
        inner = _non_finite(pl.element(), dtype.inner)
        return None if inner is None else expr.list.eval(inner).list.any()
    if isinstance(dtype, pl.Struct):
        parts = [_non_finite(expr.struct.field(f.name), f.dtype) for f in dtype.fields]
        found = [part for part in parts if part is not None]
        return pl.any_horizontal(found) if found else None
    return None


def _holds_binary(dtype: pl.DataType) -> bool:
    """True if a column's values hold raw bytes, at any depth."""
    stack = [dtype]
    while stack:
        item = stack.pop()
        if item == pl.Binary:
            return True
        if isinstance(item, pl.List | pl.Array):
            stack.append(item.inner)
        elif isinstance(item, pl.Struct):
            stack.extend(f.dtype for f in item.fields)
    return False


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
