"""Tool-calling SFT conversations: read, measured, and regenerated turn by turn by a teacher.

Following the Cascade recipe's tool-calling SFT data (the Llama-Nemotron tool-calling set,
responses by Qwen3-235B-A22B, thinking only; single- and multi-turn conversations, multi-step
calls, clarifying questions, several tools, and the case where no tool fits):

- `tool_conversations` reads each source row's conversation (OpenAI format: `messages` with
  assistant `tool_calls` and `tool` results, and the offered `tools` as JSON schemas, a column
  or a metadata key) and drops what cannot be trained on (`malformed_conversation`,
  `no_tools`, `unknown_tool` in the reference, `no_assistant_turn`). It measures what kind of
  conversation each is (`pattern`: `single_call`, `parallel_calls`, `multi_step`,
  `clarifying_question`, `no_suitable_tool`; `multi_turn`, counts of turns, calls, tools).
- `regenerate_tool_turns` lets the teacher write every assistant turn again, in order, each
  time seeing the conversation so far: the source's user turns and tool results, its own
  earlier turns (without their reasoning, as chat APIs take them back) and the tools in the
  system prompt (`schemas.tool_calls`: the same text the trainer renders). The tool results
  that follow a turn are the source's, so a turn must make the calls the source made there
  (same names and arguments, in any order) or none where the source made none, else the
  conversation is dropped (`tool_call_mismatch`); so are turns that are cut off
  (`truncated`), carry no reasoning (`no_reasoning`), write a call that does not parse
  (`malformed_tool_call`), call a tool not offered (`unknown_tool`) or leave out a required
  argument (`missing_arguments`), and a turn that should ask the user something but does
  not (`no_clarifying_question`).
- `conversation_length` drops conversations over the stage's token limit (`too_long`), so
  none is cut off in training.

The teacher must be served without a server-side tool-call parser: its calls are read from
the reply text. Kept rows hold the new conversation as `messages` (JSON: {role, content,
reasoning?, tool_calls?}) with `tools` (JSON) and `mode`, which the SFT loader reads as is.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import Any

import polars as pl

from curation.general.conversations import field_values
from curation.generate.backend import Backend
from curation.generate.plan import plan_jobs
from curation.generate.run import generate_to_lake
from curation.generate.samples import Sampler
from lake import Lake, StepResult
from lake.operators import decide
from schemas.tool_calls import (
    ToolCall,
    ToolCallError,
    parse_tools,
    split_tool_calls,
    tool_call_from,
    tool_name,
)
from schemas.tool_calls import (
    text_chat as teacher_chat,
)

PATTERNS = (
    "single_call",
    "parallel_calls",
    "multi_step",
    "clarifying_question",
    "no_suitable_tool",
)


# -------------------------------------------------------------------- reading -------------


def _reference(raw: object) -> list[dict[str, Any]]:
    """A source conversation as plain turns: {role, content, tool_calls: [ToolCall]}."""
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise ToolCallError(f"messages are not JSON ({exc.msg})") from None
    if not isinstance(raw, list) or not raw:
        raise ToolCallError("messages must be a non-empty list of turns")
    turns = []
    for i, item in enumerate(raw):
        if not isinstance(item, dict) or item.get("role") not in (
            "system",
            "user",
            "assistant",
            "tool",
        ):
            raise ToolCallError(f"message {i} is not a system/user/assistant/tool turn")
        calls = item.get("tool_calls") or []
        if calls and item["role"] != "assistant":
            raise ToolCallError(f"message {i} ({item['role']}) has tool_calls")
        content = item.get("content")
        if content is None and calls:
            content = ""
        if not isinstance(content, str):
            raise ToolCallError(f"message {i} ({item['role']}) has no string content")
        try:
            parsed = [tool_call_from(c) for c in calls]
        except ToolCallError as exc:
            raise ToolCallError(f"message {i}: {exc}") from None
        turns.append({"role": item["role"], "content": content, "tool_calls": parsed})
    for i, turn in enumerate(turns):  # each calling turn is followed by one result per call
        if turn["tool_calls"]:
            results = 0
            while i + 1 + results < len(turns) and turns[i + 1 + results]["role"] == "tool":
                results += 1
            if results != len(turn["tool_calls"]):
                raise ToolCallError(
                    f"message {i} makes {len(turn['tool_calls'])} call(s) but {results} tool "
                    "result(s) follow"
                )
        elif turn["role"] == "tool" and (
            i == 0 or turns[i - 1]["role"] not in ("tool", "assistant")
        ):
            raise ToolCallError(f"message {i} is a tool result no call asked for")
    return turns


def _is_question(turns: list[dict[str, Any]], i: int) -> bool:
    """An assistant turn without calls that asks, answered by the next user turn."""
    turn = turns[i]
    follows = i + 1 < len(turns) and turns[i + 1]["role"] == "user"
    return not turn["tool_calls"] and turn["content"].rstrip().endswith("?") and follows


def _measure(turns: list[dict[str, Any]], tools: tuple[dict, ...]) -> dict[str, Any]:
    calls = [len(t["tool_calls"]) for t in turns if t["role"] == "assistant"]
    steps = run = 0
    for t in turns:
        if t["role"] == "user":
            run = 0
        elif t["role"] == "assistant" and t["tool_calls"]:
            run += 1
            steps = max(steps, run)
    questions = sum(_is_question(turns, i) for i, t in enumerate(turns) if t["role"] == "assistant")
    if not sum(calls):
        pattern = "no_suitable_tool"
    elif questions:
        pattern = "clarifying_question"
    elif steps >= 2:
        pattern = "multi_step"
    elif max(calls) >= 2:
        pattern = "parallel_calls"
    else:
        pattern = "single_call"
    users = sum(t["role"] == "user" for t in turns)
    return {
        "pattern": pattern,
        "multi_turn": users >= 2,
        "user_turns": users,
        "assistant_turns": len(calls),
        "tool_calls": sum(calls),
        "tool_steps": steps,
        "clarifying_questions": questions,
        "tools_offered": len(tools),
    }


def tool_conversations(
    df: pl.DataFrame, *, messages_field: str = "problem", tools_field: str = "tools"
) -> StepResult:
    """Parse and measure each row's conversation and tools (see the module docstring).

    Kept rows get `reference_messages` (JSON, calls as {name, arguments}), `tools` (JSON)
    and the measurements; dropped rows say why in `reason` and `conversation_error`.
    """
    raw_tools = field_values(df, tools_field)
    raw_messages = field_values(df, messages_field)
    references, tools_json, errors, reasons, measures = [], [], [], [], []
    for messages, raw in zip(raw_messages, raw_tools, strict=True):
        reference, tools, reason, error = None, (), None, None
        try:
            reference = _reference(messages)
            tools = parse_tools(raw)
        except ToolCallError as exc:
            reason, error = "malformed_conversation", str(exc)
        if reason is None:
            names = {tool_name(t) for t in tools}
            called = {c.name for t in reference for c in t["tool_calls"]}  # type: ignore[union-attr]
            if not tools:
                reason = "no_tools"
            elif called - names:
                reason, error = (
                    "unknown_tool",
                    f"calls {sorted(called - names)}, offered {sorted(names)}",
                )  # type: ignore[type-var]
            elif not any(t["role"] == "assistant" for t in reference):  # type: ignore[union-attr]
                reason = "no_assistant_turn"
        references.append(None if reference is None else json.dumps(_plain(reference)))
        tools_json.append(json.dumps(list(tools), ensure_ascii=False) if tools else None)
        reasons.append(reason)
        errors.append(error)
        measures.append(_measure(reference, tools) if reason is None else {})  # type: ignore[arg-type]
    columns = {
        name: pl.Series(name, [m.get(name) for m in measures])
        for name in ("pattern", "multi_turn", "user_turns", "assistant_turns", "tool_calls")
        + ("tool_steps", "clarifying_questions", "tools_offered")
    }
    marked = df.with_columns(
        pl.Series("reference_messages", references, dtype=pl.String),
        pl.Series("tools", tools_json, dtype=pl.String),
        *columns.values(),
        pl.Series("reason", reasons, dtype=pl.String),
        pl.Series("conversation_error", errors, dtype=pl.String),
    )
    bad = pl.col("reason").is_not_null()
    dropped = marked.filter(bad).select(*df.columns, "reason", "conversation_error")
    kept = marked.filter(~bad).drop("reason", "conversation_error")
    patterns = kept["pattern"].value_counts() if kept.height else None
    stats = {
        "conversations": kept.height,
        **(dict(patterns.iter_rows()) if patterns is not None else {}),
        "multi_turn": int(kept["multi_turn"].sum()) if kept.height else 0,
    }
    return StepResult(kept=kept, dropped=dropped, stats=stats)


def _plain(turns: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for t in turns:
        turn = {"role": t["role"], "content": t["content"]}
        if t.get("reasoning") is not None:
            turn["reasoning"] = t["reasoning"]
        if t["tool_calls"]:
            turn["tool_calls"] = [c.as_dict() for c in t["tool_calls"]]
        out.append(turn)
    return out


def _turns(raw: str) -> list[dict[str, Any]]:
    """`reference_messages` / `messages` JSON back to turns with ToolCall objects."""
    return [
        {**t, "tool_calls": [tool_call_from(c) for c in t.get("tool_calls") or []]}
        for t in json.loads(raw)
    ]


# -------------------------------------------------------------------- regenerating --------


def _call_key(call: ToolCall) -> tuple[str, str]:
    return call.name, json.dumps(json.loads(call.arguments), sort_keys=True)


def _missing_arguments(call: ToolCall, tools: tuple[dict, ...]) -> list[str]:
    schema = next(t for t in tools if tool_name(t) == call.name)
    inner = schema.get("function", schema)
    required = (inner.get("parameters") or {}).get("required") or []
    given = json.loads(call.arguments)
    return [name for name in required if name not in given]


def _judge_turn(
    reply: dict[str, Any] | None,
    reference: list[dict[str, Any]],
    at: int,
    tools: tuple[dict, ...],
    mode: str,
) -> tuple[dict[str, Any] | None, str | None, str | None]:
    """The teacher's turn `at` as a turn, or (None, reason, detail) when it is unusable."""
    if reply is None:
        return None, "no_response", None
    if reply["truncated"]:
        return None, "truncated", None
    reasoning = (reply["reasoning"] or "").strip() or None
    if mode == "think" and reasoning is None:
        return None, "no_reasoning", None
    try:
        content, calls = split_tool_calls(reply["final_answer"] or "")
    except ToolCallError as exc:
        return None, "malformed_tool_call", str(exc)
    names = {tool_name(t) for t in tools}
    unknown = sorted({c.name for c in calls} - names)  # type: ignore[type-var]
    if unknown:
        return None, "unknown_tool", f"calls {unknown}, offered {sorted(names)}"  # type: ignore[type-var]
    for call in calls:
        missing = _missing_arguments(call, tools)
        if missing:
            return None, "missing_arguments", f"{call.name} without {missing}"
    wanted = reference[at]["tool_calls"]
    if sorted(map(_call_key, calls)) != sorted(map(_call_key, wanted)):
        shown = [c.as_dict() for c in calls]
        return (
            None,
            "tool_call_mismatch",
            json.dumps(
                {"reference": [c.as_dict() for c in wanted], "teacher": shown}, ensure_ascii=False
            ),
        )
    if _is_question(reference, at) and "?" not in content:
        return None, "no_clarifying_question", content[:200]
    turn = {"role": "assistant", "content": content, "reasoning": reasoning, "tool_calls": calls}
    return turn, None, None


def regenerate_tool_turns(
    df: pl.DataFrame,
    *,
    lake: Lake,
    sampler: Sampler,
    table: str = "generations",
    backend_factory: Callable[[str], Backend] | None = None,
) -> StepResult:
    """The teacher writes each assistant turn of every conversation again (see the module
    docstring); one generation round per turn position, each sample cached in `table`.

    Kept rows get `messages`, `mode`, `turns`, `conversation_tokens` (the last turn's prompt
    plus every turn's completion, an upper bound of the trained length) and
    `generation_ids`; dropped rows carry `reason`, `failed_turn` and `turn_detail`.
    """
    sampler = dataclasses.replace(sampler, k=1)  # one reply per turn
    rows = df.select("uid", "reference_messages", "tools").to_dicts()
    state = {
        r["uid"]: {
            "reference": _turns(r["reference_messages"]),
            "tools": parse_tools(r["tools"]),
            "done": [],  # the new conversation so far
            "ids": [],
            "completion_tokens": 0,
            "tokens": 0,
            "failed": None,
        }
        for r in rows
    }
    settings = {"modes": [sampler.mode], "k": 1, "sampling": sampler.sampling, "seed": sampler.seed}
    round_ = 0
    while True:
        asking: dict[str, int] = {}  # uid -> index of the assistant turn to write
        prompts = []
        for uid, s in state.items():
            if s["failed"] is not None:
                continue
            at = next(
                (
                    i
                    for i in range(len(s["done"]), len(s["reference"]))
                    if s["reference"][i]["role"] == "assistant"
                ),
                None,
            )
            if at is None:
                continue
            s["done"] += s["reference"][len(s["done"]) : at]  # user turns and tool results
            asking[uid] = at
            prompts.append((f"{uid}#{round_}", teacher_chat(s["done"], s["tools"])))
        if not prompts:
            break
        generate_to_lake(
            lake,
            prompts,
            output=table,
            teacher=sampler.teacher,
            backend=sampler.backend,
            backend_options=sampler.backend_options or None,
            backend_factory=backend_factory,
            **settings,
        )
        keys = {j.prompt_id: j.request.key for j in plan_jobs(prompts, sampler.teacher, **settings)}
        replies = _replies(lake, table, set(keys.values()))
        for uid, at in asking.items():
            s = state[uid]
            reply = replies.get(keys[f"{uid}#{round_}"])
            turn, reason, detail = _judge_turn(reply, s["reference"], at, s["tools"], sampler.mode)
            if turn is None:
                s["failed"] = (reason, at, detail)
                continue
            s["done"].append(turn)
            s["ids"].append(reply["id"])  # type: ignore[index]
            s["completion_tokens"] += reply["completion_tokens"]  # type: ignore[index]
            s["tokens"] = reply["prompt_tokens"] + s["completion_tokens"]  # type: ignore[index]
        round_ += 1
    uids = df["uid"].to_list()
    ok = [state[u]["failed"] is None for u in uids]
    messages = [
        json.dumps(_plain(state[u]["done"]), ensure_ascii=False) if o else None
        for u, o in zip(uids, ok, strict=True)
    ]
    marked = df.with_columns(
        pl.Series("messages", messages, dtype=pl.String),
        pl.lit(sampler.mode).alias("mode"),
        pl.Series(
            "turns",
            [sum(t["role"] == "assistant" for t in state[u]["done"]) for u in uids],
            dtype=pl.Int64,
        ),
        pl.Series("conversation_tokens", [state[u]["tokens"] for u in uids], dtype=pl.Int64),
        pl.Series("generation_ids", [state[u]["ids"] for u in uids], dtype=pl.List(pl.String)),
    )
    keep = pl.Series(ok, dtype=pl.Boolean)
    failed = [state[u]["failed"] for u in uids if state[u]["failed"] is not None]
    dropped = df.filter(~keep).with_columns(
        pl.Series("reason", [f[0] for f in failed], dtype=pl.String),
        pl.Series("failed_turn", [f[1] for f in failed], dtype=pl.Int64),
        pl.Series("turn_detail", [f[2] for f in failed], dtype=pl.String),
    )
    by_reason = dict(dropped.group_by("reason").len().iter_rows()) if dropped.height else {}
    stats = {"rounds": round_, "kept": int(keep.sum()), **by_reason}
    return StepResult(kept=marked.filter(keep), dropped=dropped, stats=stats)


def _replies(lake: Lake, table: str, ids: set[str]) -> dict[str, dict[str, Any]]:
    if not ids:
        return {}
    columns = ["id", "final_answer", "reasoning", "prompt_tokens", "completion_tokens", "truncated"]
    rows = pl.from_arrow(lake.read(table, columns=columns))
    assert isinstance(rows, pl.DataFrame)
    found = rows.filter(pl.col("id").is_in(list(ids))).unique("id", keep="first")
    return {r["id"]: r for r in found.to_dicts()}


def conversation_length(df: pl.DataFrame, *, max_tokens: int) -> StepResult:
    """Drop `too_long`: conversations whose `conversation_tokens` exceed the stage's limit."""
    result = decide(
        df, pl.when(pl.col("conversation_tokens") > max_tokens).then(pl.lit("too_long")), counts=()
    )
    result.stats["too_long"] = result.dropped.height
    return result
