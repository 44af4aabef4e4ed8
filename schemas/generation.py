"""Contract of the `generations` table: teacher responses, one row per sample.

A row is one sample of one teacher, for one prompt, in one mode, with one seed. `id` is
the fingerprint of everything that determines the sample (model, prompt messages, mode,
how the mode was selected, sampling parameters, seed), so a re-run finds what it already
has by id and computes only the rest. The response is stored raw and split into
`reasoning` (the `<think>` part, null when there is none) and `final_answer` (the text after it),
so SFT examples can be rendered later in the student's own chat template.
"""

from __future__ import annotations

from typing import Literal

import pyarrow as pa

from schemas.tables import TableContract, register_contract

Mode = Literal["think", "no_think"]
MODES: tuple[Mode, ...] = ("think", "no_think")
"""Thinking mode answers with `<think>...</think>` reasoning first; non-thinking does not."""

MODE_FLAGS: dict[Mode, str] = {"think": "/think", "no_think": "/no_think"}
"""The flag a user turn ends with to ask for a mode (Nemotron-Cascade's chat format)."""

ModeSwitch = Literal["model", "template", "flag"]
MODE_SWITCHES: tuple[ModeSwitch, ...] = ("model", "template", "flag")
"""How a teacher is put in a mode: one model per mode, the chat template's `enable_thinking`,
or a mode flag on every user turn (the `mode_switch` column)."""

FINISH_REASONS = ("stop", "length")
"""`stop`: the model ended its answer; `length`: cut at max_new_tokens (see `truncated`)."""

GENERATIONS = TableContract(
    kind="generations",
    schema=pa.schema(
        [
            pa.field("id", pa.string(), nullable=False),
            pa.field("prompt_id", pa.string(), nullable=False),
            pa.field("model", pa.string(), nullable=False),
            pa.field("backend", pa.string(), nullable=False),
            pa.field("mode", pa.string(), nullable=False),
            pa.field("mode_switch", pa.string(), nullable=False),
            pa.field("sample_index", pa.int32(), nullable=False),
            pa.field("seed", pa.int64(), nullable=False),
            pa.field("temperature", pa.float64(), nullable=False),
            pa.field("top_p", pa.float64(), nullable=False),
            pa.field("top_k", pa.int32(), nullable=False),
            pa.field("max_new_tokens", pa.int32(), nullable=False),
            pa.field("messages", pa.string(), nullable=False),
            pa.field("response", pa.string(), nullable=False),
            pa.field("reasoning", pa.string()),
            pa.field("final_answer", pa.string(), nullable=False),
            pa.field("prompt_tokens", pa.int64(), nullable=False),
            pa.field("completion_tokens", pa.int64(), nullable=False),
            pa.field("finish_reason", pa.string(), nullable=False),
            pa.field("truncated", pa.bool_(), nullable=False),
        ]
    ),
    description=(
        "One teacher sample per row. id: fingerprint of (model, messages, mode, mode_switch, "
        "sampling parameters, seed), the cache key. prompt_id: id of the input prompt. "
        "mode: think | no_think; mode_switch: how it was selected (model | template | "
        "flag). top_k 0 means disabled. messages: the chat sent to the teacher (JSON list of "
        "{role, content}, before any mode flag was added). response: raw text; reasoning: the "
        "<think> part (null if none); final_answer: the text after </think> (all of it if no reasoning). "
        "truncated: cut at max_new_tokens (finish_reason 'length') or reasoning never closed."
    ),
)

register_contract(GENERATIONS)
