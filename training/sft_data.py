"""SFT data: a stage's verified datasets as conversations, rendered and tokenized.

Rows carry either a `messages` column (a list of {role, content, reasoning?, tool_calls?}
objects, or that list as a JSON string) or a prompt/response column pair named in the
reference; a row's `tools_column` (default `tools`: a list of JSON schemas, or its JSON text)
lists the tools its conversation may call, rendered into the system prompt. Hash checks happen
once, before the stage, in `training.datasets`.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Iterator
from dataclasses import dataclass

from schemas.chat_template import (
    ChatFormatError,
    Message,
    TokenizedChat,
    infer_mode,
    parse_chat_tools,
    parse_messages,
    tokenize_chat,
)
from schemas.generation import MODES, Mode
from schemas.training_manifest import SFTStage
from training.datasets import LoadedDataset


@dataclass(frozen=True)
class Conversation:
    """One training chat, its mode, the tools it may call, and where it came from."""

    messages: list[Message]
    mode: Mode
    origin: str
    tools: tuple[dict, ...] = ()


def conversations(dataset: LoadedDataset) -> Iterator[Conversation]:
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
        tools = parse_chat_tools(row.get(ref.tools_column), f"{origin}: {ref.tools_column}")
        if row_mode is not None:
            if row_mode not in MODES:
                raise ChatFormatError(
                    f"{origin}: {ref.mode_column} is {row_mode!r}; expected one of {MODES}"
                )
            mode: Mode = row_mode
        else:
            mode = infer_mode(messages) if ref.mode == "infer" else ref.mode
        yield Conversation(messages, mode, origin, tools)


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
    datasets: list[LoadedDataset]


def tokenize_stage(
    stage: SFTStage,
    datasets: list[LoadedDataset],
    tokenizer: object,
) -> TokenizedStageData:
    """Tokenize each dataset once, drop over-length samples (no truncation), then upsample."""
    rng = random.Random(stage.seed)
    samples: list[TokenizedChat] = []
    too_long = no_target = 0
    for dataset in datasets:
        tokenized = []
        for conv in conversations(dataset):
            chat = tokenize_chat(tokenizer, conv.messages, conv.mode, conv.tools)
            if len(chat.input_ids) > stage.max_seq_len:
                too_long += 1
                continue
            if not any(chat.target_mask[1:]):
                no_target += 1
                continue
            tokenized.append(chat)
        samples.extend(upsample(tokenized, dataset.ref.upsample, rng))
    return TokenizedStageData(samples, too_long, no_target, datasets)


def training_texts(datasets: list[LoadedDataset], limit: int = 2000) -> Iterator[str]:
    """Plain text of the first conversations, to train an in-process tokenizer on."""
    from schemas.chat_template import render_text

    for dataset in datasets:
        for i, conv in enumerate(conversations(dataset)):
            if i >= limit:
                break
            yield render_text(conv.messages, conv.mode, conv.tools)
