"""SFT data: resolve a stage's dataset references, check their hashes, render and tokenize.

Inputs are lake table versions (`name@version`, verified with the lake's content hash) or plain
`.jsonl` / `.parquet` files (verified with the sha256 of the file). Rows carry either a
`messages` column (a list of {role, content, reasoning?} objects, or that list as a JSON
string) or a prompt/response column pair named in the reference. A hash mismatch stops the run
before any training: the manifest pins data, it does not merely describe it.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq

from lake.files import json_lines
from schemas.training_manifest import DatasetRef, SFTStage
from training.chat_template import (
    ChatFormatError,
    Message,
    Mode,
    TokenizedChat,
    infer_mode,
    parse_messages,
    tokenize_chat,
)


class DataHashError(ValueError):
    """A dataset's bytes do not match the hash pinned in the manifest."""


@dataclass(frozen=True)
class Conversation:
    """One training chat, its mode, and where it came from (for error messages)."""

    messages: list[Message]
    mode: Mode
    origin: str


@dataclass(frozen=True)
class VerifiedDataset:
    """A dataset reference after its hash check: rows plus what was verified."""

    ref: DatasetRef
    location: str
    sha256: str
    rows: list[dict]


def sha256_file(path: Path) -> str:
    """sha256 of a file's bytes, streamed."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def verify_hash(
    ref: DatasetRef, where: str, manifest_dir: Path, lake_path: str | Path | None
) -> tuple[str, Path | None]:
    """Recompute a reference's hash; return (location, file path or None for the lake).

    `where` names the manifest field in errors. Raises DataHashError on a mismatch.
    """
    if ref.is_lake:
        from lake.catalog import Lake, LakeError

        if lake_path is None or not Path(lake_path).exists():
            raise FileNotFoundError(
                f"{where}: {ref.ref} is a lake reference but lake {lake_path!s} does not exist "
                "(use --lake)"
            )
        try:
            info = Lake(lake_path).verify_hash(ref.ref, expected=ref.sha256)
        except LakeError as exc:
            raise DataHashError(f"{where}: {exc}; refusing to train on it") from None
        return f"lake:{info.ref}", None
    path = Path(ref.ref)
    path = path if path.is_absolute() else (manifest_dir / path).resolve()
    if not path.is_file():
        raise FileNotFoundError(f"{where}: dataset file {path} does not exist")
    actual = sha256_file(path)
    if actual != ref.sha256:
        raise DataHashError(
            f"{where}: {path} has sha256 {actual}, but the manifest pins {ref.sha256}; "
            "refusing to train on data that differs from the manifest"
        )
    return str(path), path


def load_verified(
    ref: DatasetRef, where: str, manifest_dir: Path, lake_path: str | Path | None
) -> VerifiedDataset:
    """Read a dataset reference after checking its hash; `where` names the manifest field."""
    location, path = verify_hash(ref, where, manifest_dir, lake_path)
    if path is None:
        from lake.catalog import Lake

        table = Lake(lake_path).read(ref.ref)  # type: ignore[arg-type]
        if ref.limit is not None:
            table = table.slice(0, ref.limit)
        rows = table.to_pylist()
    else:
        rows = _read_rows(path, ref.limit)
    return VerifiedDataset(ref, location, ref.sha256, rows)


def _read_rows(path: Path, limit: int | None) -> list[dict]:
    if path.suffix == ".parquet":
        table = pq.read_table(path)
        return (table.slice(0, limit) if limit is not None else table).to_pylist()
    rows: list[dict] = []
    for _, row in json_lines(path):
        if limit is not None and len(rows) >= limit:
            break
        rows.append(row)
    return rows


ROW_MODES: dict[str, Mode] = {
    "think": "think",
    "thinking": "think",
    "no_think": "no_think",
    "non_thinking": "no_think",
}


def conversations(dataset: VerifiedDataset) -> Iterator[Conversation]:
    """Rows of a verified dataset as Conversations, naming the row of any malformed one.

    Layouts: a full conversation in `messages_column`; a prompt conversation there plus the
    reply in `response_column` (+ `reasoning_column`), as in a `generations` table; or a
    single user turn from `prompt_column` plus the reply columns.
    """
    ref = dataset.ref
    for i, row in enumerate(dataset.rows):
        origin = f"{dataset.location} row {i}"
        try:
            if ref.prompt_column is not None:
                raw: list = [{"role": "user", "content": row[ref.prompt_column]}]
            else:
                raw = _messages(row, ref.messages_column, origin)
            if ref.response_column is not None and (not raw or raw[-1].get("role") != "assistant"):
                reasoning = row[ref.reasoning_column] if ref.reasoning_column else None
                raw = [
                    *raw,
                    {
                        "role": "assistant",
                        "content": row[ref.response_column],
                        "reasoning": reasoning,
                    },
                ]
            row_mode = row[ref.mode_column] if ref.mode_column else None
        except KeyError as exc:
            raise ChatFormatError(
                f"{origin}: missing column {exc.args[0]!r} (columns: {sorted(row)})"
            ) from None
        messages = parse_messages(raw, origin)
        if row_mode is not None:
            if row_mode not in ROW_MODES:
                raise ChatFormatError(
                    f"{origin}: {ref.mode_column} is {row_mode!r}; expected "
                    f"one of {sorted(ROW_MODES)}"
                )
            mode: Mode = ROW_MODES[row_mode]
        else:
            mode = infer_mode(messages) if ref.mode == "infer" else ref.mode
        yield Conversation(messages, mode, origin)


def _messages(row: dict, column: str, origin: str) -> list:
    if column not in row:
        raise ChatFormatError(
            f"{origin}: no {column!r} column (columns: {sorted(row)}); set messages_column or "
            "prompt_column/response_column in the manifest"
        )
    raw = row[column]
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise ChatFormatError(f"{origin}: {column} is not JSON ({exc.msg})") from None
    if not isinstance(raw, list):
        raise ChatFormatError(f"{origin}: {column} is {type(raw).__name__}, not a list")
    return raw


def upsample(items: list, factor: float, rng: random.Random) -> list:
    """`factor` copies of `items`: whole copies, then a seeded sample for the fraction."""
    whole = math.floor(factor)
    out = items * whole
    extra = round((factor - whole) * len(items))
    if extra:
        out += rng.sample(items, extra)
    return out


@dataclass
class TokenizedStageData:
    """Every training sample of a stage after upsampling, plus what was dropped and why."""

    samples: list[TokenizedChat]
    dropped_too_long: int
    dropped_no_target: int
    verified: list[VerifiedDataset]


def tokenize_stage(
    stage: SFTStage,
    datasets: list[VerifiedDataset],
    tokenizer: object,
) -> TokenizedStageData:
    """Tokenize each dataset once, drop over-length samples (no truncation), then upsample."""
    rng = random.Random(stage.seed)
    samples: list[TokenizedChat] = []
    too_long = no_target = 0
    for dataset in datasets:
        tokenized = []
        for conv in conversations(dataset):
            chat = tokenize_chat(tokenizer, conv.messages, conv.mode)
            if len(chat.input_ids) > stage.max_seq_len:
                too_long += 1
                continue
            if not any(chat.target_mask[1:]):
                no_target += 1
                continue
            tokenized.append(chat)
        samples.extend(upsample(tokenized, dataset.ref.upsample, rng))
    return TokenizedStageData(samples, too_long, no_target, datasets)


def training_texts(datasets: list[VerifiedDataset], limit: int = 2000) -> Iterator[str]:
    """Plain text of the first conversations, to train an in-process tokenizer on."""
    from training.chat_template import render_text

    for dataset in datasets:
        for i, conv in enumerate(conversations(dataset)):
            if i >= limit:
                break
            yield render_text(conv.messages, conv.mode)
