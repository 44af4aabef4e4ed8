"""What to generate: teachers and their mode switch, prompts as chats, and one job per sample.

A job is (prompt, mode, sample index) with seed `seed + sample_index`, so sample i of a
prompt always gets the same seed and `SamplingParams(n=k, seed=seed)` in vLLM (whose
children use `seed + index`) produces exactly the same set. Its fingerprint hashes every
input that determines the sample and is the cache key in the generations table.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl
import xxhash

from curation.prompt_ids import prompt_ids
from schemas.generation import (
    MODE_FLAGS,
    MODE_SWITCHES,
    MODES,
    GenerationRequest,
    Mode,
    ModeSwitch,
    SamplingParams,
)

ROLES = ("system", "user", "assistant", "tool")

Messages = tuple[dict[str, str], ...]


@dataclass(frozen=True)
class Teacher:
    """Which model answers in which mode, and how the mode is selected.

    - `model`: one model per mode (the recipe's DeepSeek-R1 for thinking, `no_think_model`
      DeepSeek-V3 for non-thinking);
    - `template`: the chat template's `enable_thinking` switch (Qwen3);
    - `flag`: `/think` or `/no_think` appended to every user message (Nemotron-Cascade 1).
    """

    model: str
    mode_switch: ModeSwitch = "template"
    no_think_model: str | None = None

    def __post_init__(self) -> None:
        if self.mode_switch not in MODE_SWITCHES:
            raise ValueError(
                f"mode switch must be one of {MODE_SWITCHES}, got {self.mode_switch!r}"
            )
        if (self.mode_switch == "model") != (self.no_think_model is not None):
            raise ValueError(
                "a non-thinking model is given exactly when the mode switch is 'model' "
                f"(mode_switch={self.mode_switch!r}, no_think_model={self.no_think_model!r})"
            )

    def model_for(self, mode: Mode) -> str:
        if mode == "no_think" and self.no_think_model is not None:
            return self.no_think_model
        return self.model

    def messages_for(self, messages: Messages, mode: Mode) -> Messages:
        if self.mode_switch != "flag":
            return messages
        return tuple(
            {**m, "content": f"{m['content']} {MODE_FLAGS[mode]}"} if m["role"] == "user" else m
            for m in messages
        )

    def template_kwargs_for(self, mode: Mode) -> dict[str, Any]:
        return {"enable_thinking": mode == "think"} if self.mode_switch == "template" else {}


@dataclass(frozen=True)
class Job:
    """One sample to produce and where it came from (`request.model` is where the model
    loads from; `model` is how rows name it: `model_identity`)."""

    request: GenerationRequest
    prompt_id: str
    mode: Mode
    sample_index: int
    mode_switch: ModeSwitch
    messages_json: str
    model: str


NOT_MODEL_FILES = frozenset({"trained_on.json", "README.md"})
"""Files of a checkpoint directory that do not change what the model generates (the
training run's provenance record, a model card)."""


def model_identity(model: str) -> str:
    """How rows and cache keys name a model: a hub id or a server's model name as given; a
    local checkpoint directory as `<its name>@<hash of its files>`, so that neither moving
    the model nor the lake it was trained in changes a row or a content hash."""
    path = Path(model)
    if not path.is_dir():
        return model
    files = sorted(
        f
        for f in path.rglob("*")
        if f.is_file()
        and f.name not in NOT_MODEL_FILES
        and not any(part.startswith(".") for part in f.relative_to(path).parts)
    )
    stamp = tuple((str(f.relative_to(path)), f.stat().st_size, f.stat().st_mtime_ns) for f in files)
    return _local_identity(str(path.resolve()), stamp)


@functools.lru_cache(maxsize=64)
def _local_identity(path: str, stamp: tuple[tuple[str, int, int], ...]) -> str:
    """The files' hash, computed once per (directory, file sizes and times)."""
    digest = xxhash.xxh3_128()
    for relative, _, _ in stamp:
        digest.update(relative.encode() + b"\0")
        with open(Path(path) / relative, "rb") as fh:
            for block in iter(lambda fh=fh: fh.read(1 << 24), b""):
                digest.update(block)
    return f"{Path(path).name}@{digest.hexdigest()[:16]}"


def fingerprint(
    model: str,
    messages: Messages,
    mode: Mode,
    mode_switch: ModeSwitch,
    template_kwargs: Mapping[str, Any],
    sampling: SamplingParams,
    seed: int,
) -> str:
    """Hex digest of everything that determines one sample (the cache key)."""
    payload = {
        "model": model,
        "messages": list(messages),
        "mode": mode,
        "switch": mode_switch,  # the key existing ids were hashed with: renaming it changes them
        "template_kwargs": dict(template_kwargs),
        "sampling": sampling.as_dict(),
        "seed": seed,
    }
    encoded = json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return xxhash.xxh3_128_hexdigest(encoded.encode())


def check_samples(modes: Sequence[Mode], k: int) -> None:
    """A ValueError unless `k` >= 1 and every mode is think or no_think."""
    if k < 1:
        raise ValueError(f"k (samples per prompt) must be >= 1, got {k}")
    for mode in modes:
        if mode not in MODES:
            raise ValueError(f"mode must be 'think' or 'no_think', got {mode!r}")


def plan_jobs(
    prompts: Sequence[tuple[str, Messages]],
    teacher: Teacher,
    *,
    modes: Sequence[Mode],
    k: int,
    sampling: SamplingParams,
    seed: int = 0,
) -> list[Job]:
    """Every (prompt, mode, sample) job; both modes for one prompt are 'parallel responses'."""
    check_samples(modes, k)
    jobs = []
    for prompt_id, messages in prompts:
        messages_json = json.dumps(list(messages), ensure_ascii=False)
        for mode in modes:
            model = teacher.model_for(mode)
            identity = model_identity(model)
            sent = teacher.messages_for(messages, mode)
            kwargs = teacher.template_kwargs_for(mode)
            mode_switch = teacher.mode_switch
            for index in range(k):
                sample_seed = seed + index
                key = fingerprint(identity, sent, mode, mode_switch, kwargs, sampling, sample_seed)
                request = GenerationRequest(key, model, sent, sampling, sample_seed, kwargs)
                jobs.append(
                    Job(request, prompt_id, mode, index, mode_switch, messages_json, identity)
                )
    return jobs


def prompts_from_records(
    records: Iterable[Mapping[str, Any]],
    *,
    origin: str,
    id_field: str = "id",
    prompt_field: str = "problem",
    system: str | None = None,
    line_numbers: Sequence[int] | None = None,
) -> list[tuple[str, Messages]]:
    """Turn input rows into (prompt id, chat) pairs, or raise naming the bad row and field.

    A row gives its chat either as `messages` (a list of {role, content}, or that list as a
    JSON string) or as the text in `prompt_field` (one user turn). Without `id_field` the id
    is the one ingest would give (single-turn) or a hash of the chat. `origin` names the input in errors (file or table), with the
    record's line from `line_numbers` when given, else its row number.
    """
    prompts = []
    for row_number, record in enumerate(records, start=1):
        if line_numbers is not None:
            where = f"{origin}:{line_numbers[row_number - 1]}"
        else:
            where = f"{origin} row {row_number}"
        if record.get("messages") is not None:
            messages = _parse_messages(record["messages"], where)
        elif isinstance(record.get(prompt_field), str) and record[prompt_field].strip():
            messages = ({"role": "user", "content": record[prompt_field]},)
        else:
            raise ValueError(
                f"{where}: no chat to send: field {prompt_field!r} is missing or not a "
                f"non-empty string, and there is no 'messages' field (fields: {sorted(record)})"
            )
        if system is not None and messages[0]["role"] != "system":
            messages = ({"role": "system", "content": system}, *messages)
        raw_id = record.get(id_field)
        prompts.append((str(raw_id) if raw_id is not None else _derived_id(messages), messages))
    return prompts


def _derived_id(messages: Messages) -> str:
    """The id ingest would give a single-turn prompt; a hash of the chat otherwise."""
    if len(messages) == 1:
        return prompt_ids(pl.Series([messages[0]["content"]])).item()
    encoded = json.dumps(list(messages), sort_keys=True, ensure_ascii=False)
    return xxhash.xxh3_128_hexdigest(encoded.encode())


def _parse_messages(value: Any, where: str) -> Messages:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{where}: field 'messages' is not valid JSON ({exc})") from None
    if not isinstance(value, list) or not value:
        raise ValueError(f"{where}: field 'messages' must be a non-empty list of turns")
    turns = []
    for index, turn in enumerate(value):
        if (
            not isinstance(turn, Mapping)
            or turn.get("role") not in ROLES
            or not isinstance(turn.get("content"), str)
        ):
            raise ValueError(
                f"{where}: messages[{index}] must be {{'role': one of {ROLES}, 'content': str}}, "
                f"got {turn!r}"
            )
        turns.append({"role": turn["role"], "content": turn["content"]})
    if turns[-1]["role"] != "user":
        raise ValueError(f"{where}: the last turn of 'messages' must be the user's")
    return tuple(turns)
