"""General-domain SFT conversations: parallel thinking / non-thinking replies, multi-turn synthesis.

Following the Cascade recipe's general-domain SFT rules:

- every prompt gets parallel replies, one set from a thinking teacher and one from a
  non-thinking teacher (`parallel_responses`, a fan-out step), with several seeds (k > 1)
  for scarce categories such as instruction following and creative writing; a prompt keeps
  its replies only while both modes have one (`require_parallel_modes`);
- a reply's mode must be what its row says: a thinking reply has reasoning, a non-thinking
  reply has none (`reply_mode_check`), since the trainer renders one as `<think>...</think>`
  and the other without a think block;
- multi-turn synthesis: a second turn that asks to rewrite the previous answer under a new
  requirement, answered by the same teacher (`add_rewrite_turns`), and random concatenation
  of unrelated single-turn samples into one conversation (`concatenate_conversations`).

Rows become conversations in `messages` (JSON list of {role, content, reasoning?}) with
`mode` (think | no_think), which is what an SFT stage reads (`messages_column`,
`mode_column`). Random choices are drawn per row from a hash of (seed, purpose, uid), so a
row's fate does not depend on which rows share its batch.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from typing import Any

import polars as pl
import xxhash

from curation.generate.backend import Backend
from curation.generate.plan import plan_jobs
from curation.generate.run import generate_to_lake
from curation.generate.samples import Sampler, sample_responses
from lake import Lake, StepResult
from lake.operators import decide
from schemas.generation import MODES


def field_values(df: pl.DataFrame, field: str) -> list[Any]:
    """Per row, `field` from its column, else from the `metadata` JSON (None where absent)."""
    if field in df.columns:
        return df.get_column(field).to_list()
    if "metadata" not in df.columns:
        return [None] * df.height
    values = []
    for n, raw in enumerate(df.get_column("metadata").to_list()):
        try:
            meta = json.loads(raw) if raw else {}
        except json.JSONDecodeError as exc:
            raise ValueError(f"row {n}: metadata is not valid JSON ({exc.msg})") from None
        values.append(meta.get(field) if isinstance(meta, dict) else None)
    return values


def draw(seed: int, purpose: str, uid: str) -> float:
    """A uniform number in [0, 1) fixed by (seed, purpose, uid)."""
    return xxhash.xxh3_64_intdigest(f"{seed}:{purpose}:{uid}".encode()) / 2**64


def parallel_responses(
    df: pl.DataFrame,
    *,
    lake: Lake,
    samplers: Sequence[Sampler],
    scarce_categories: Sequence[str] = (),
    scarce_k: int | None = None,
    category_field: str = "category",
    table: str = "generations",
    prompt_column: str = "problem",
    backend_factory: Callable[[str], Backend] | None = None,
) -> StepResult:
    """Fan-out step: each sampler's k replies per prompt (`scarce_k` for prompts whose
    category is scarce), one row per reply (`uid` = `<prompt uid>/<mode>/<sample>`).

    A prompt that did not get a reply in every sampler's mode is dropped
    (`no_parallel_response`, with the modes it got).
    """
    modes = [s.mode for s in samplers]
    if sorted(modes) != sorted(set(modes)) or not modes:
        raise ValueError(f"parallel responses need one sampler per mode, got modes {modes}")
    scarce = pl.Series(
        [c in set(scarce_categories) for c in field_values(df, category_field)], dtype=pl.Boolean
    )
    parts = []
    for sampler in samplers:
        for mask, k in ((scarce, scarce_k or sampler.k), (~scarce, sampler.k)):
            group = df.filter(mask)
            if group.height:
                result = sample_responses(
                    group,
                    lake=lake,
                    sampler=dataclasses.replace(sampler, k=k),
                    table=table,
                    prompt_column=prompt_column,
                    backend_factory=backend_factory,
                )
                parts.append(result.kept)
    replies = pl.concat(parts, how="diagonal_relaxed") if parts else df.clear()
    got = (
        replies.group_by("prompt_uid").agg(pl.col("mode").unique().sort().alias("modes_present"))
        if replies.height
        else pl.DataFrame(schema={"prompt_uid": pl.String, "modes_present": pl.List(pl.String)})
    )
    complete = got.filter(pl.col("modes_present").list.len() == len(modes))["prompt_uid"]
    order = df.select(pl.col("uid").alias("prompt_uid")).with_row_index("_row")
    kept = (
        replies.filter(pl.col("prompt_uid").is_in(complete.implode()))
        .join(order, on="prompt_uid")
        .with_columns(
            pl.col("mode").replace_strict({m: i for i, m in enumerate(MODES)}).alias("_m")
        )
        .sort("_row", "_m", "sample_index")
        .drop("_row", "_m")
    )
    dropped = (
        df.filter(~pl.col("uid").is_in(complete.implode()))
        .join(got.rename({"prompt_uid": "uid"}), on="uid", how="left")
        .with_columns(pl.lit("no_parallel_response").alias("reason"))
    )
    stats = {
        "prompts": df.height,
        "scarce_prompts": int(scarce.sum()),
        "replies": {m: int((kept["mode"] == m).sum()) for m in modes},
    }
    return StepResult(kept=kept, dropped=dropped, stats=stats)


def reply_mode_check(df: pl.DataFrame) -> StepResult:
    """Drop `no_reasoning` (a think reply without reasoning) and `unexpected_reasoning` (a
    no_think reply with some): the trainer renders a row by its mode."""
    has_reasoning = pl.col("reasoning").is_not_null() & (
        pl.col("reasoning").str.strip_chars() != ""
    )
    reason = (
        pl.when((pl.col("mode") == "think") & ~has_reasoning)
        .then(pl.lit("no_reasoning"))
        .when((pl.col("mode") == "no_think") & has_reasoning)
        .then(pl.lit("unexpected_reasoning"))
    )
    return decide(df, reason, counts=("dropped",))


def require_parallel_modes(df: pl.DataFrame, *, modes: Sequence[str] = MODES) -> StepResult:
    """Drop `unpaired` replies: those of a prompt that has no reply left in some mode (after
    the response filters), so every kept prompt has thinking and non-thinking replies."""
    present = (
        df.filter(pl.col("mode").is_in(list(modes)))
        .group_by("prompt_uid")
        .agg(pl.col("mode").unique().sort().alias("modes_left"))
    )
    marked = df.join(present, on="prompt_uid", how="left").with_columns(
        pl.when(pl.col("modes_left").list.len().fill_null(0) < len(modes))
        .then(pl.lit("unpaired"))
        .alias("reason")
    )
    result = decide(marked, "reason", drop_only=("modes_left",), counts=())
    result.stats["unpaired"] = result.dropped.height
    return result


def _reply(answer: str, reasoning: str | None) -> dict[str, str]:
    reply = {"role": "assistant", "content": answer}
    if reasoning is not None:
        reply["reasoning"] = reasoning
    return reply


def _turns(prompt: str, answer: str, reasoning: str | None) -> list[dict[str, str]]:
    return [{"role": "user", "content": prompt}, _reply(answer, reasoning)]


def as_conversations(df: pl.DataFrame, *, prompt_column: str = "problem") -> StepResult:
    """Each reply row as a one-turn conversation: `messages` (JSON), `turns` and
    `turn_uids` (the reply rows a conversation is made of). Nothing is dropped."""
    messages = [
        json.dumps(_turns(p, a or "", r), ensure_ascii=False)
        for p, a, r in df.select(prompt_column, "final_answer", "reasoning").iter_rows()
    ]
    kept = df.with_columns(
        pl.Series("messages", messages, dtype=pl.String),
        pl.lit(1, pl.Int64).alias("turns"),
        pl.concat_list(pl.col("uid")).alias("turn_uids"),
    )
    return StepResult(kept=kept, dropped=kept.clear().with_columns(reason=pl.lit("")))


def add_rewrite_turns(
    df: pl.DataFrame,
    *,
    lake: Lake,
    samplers: Sequence[Sampler],
    requirements: Sequence[str],
    share: float,
    categories: Sequence[str] = (),
    category_field: str = "category",
    seed: int = 0,
    table: str = "generations",
    max_tokens: int | None = None,
    backend_factory: Callable[[str], Backend] | None = None,
) -> StepResult:
    """A second turn for a `share` of one-turn conversations (of `categories`, all if empty):
    the user asks to rewrite the previous answer under one of `requirements`, and the
    teacher of the row's mode answers with the conversation so far in context (earlier
    replies without their reasoning, as chat APIs take them back).

    Chosen rows get `rewrite_requirement` and `rewrite_status`: `added`, or why the second
    reply was not used (`truncated`, `too_long`, `no_reasoning`, `unexpected_reasoning`,
    `no_response`), in which case the row stays one turn. Nothing is dropped.
    """
    if not requirements:
        raise ValueError("rewrite turns need at least one requirement")
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"share must be within [0, 1], got {share}")
    by_mode = {s.mode: dataclasses.replace(s, k=1) for s in samplers}
    wanted = set(categories)
    chosen: dict[str, str] = {}
    category = field_values(df, category_field)
    for uid, turns, cat in zip(df["uid"], df["turns"], category, strict=True):
        if turns == 1 and (not wanted or cat in wanted) and draw(seed, "rewrite", uid) < share:
            chosen[uid] = requirements[int(draw(seed, "requirement", uid) * len(requirements))]
    keys: dict[str, str] = {}
    for mode, sampler in by_mode.items():
        prompts = []
        for uid, raw in df.filter(pl.col("uid").is_in(list(chosen)) & (pl.col("mode") == mode))[
            ["uid", "messages"]
        ].iter_rows():
            history = [{"role": m["role"], "content": m["content"]} for m in json.loads(raw)]
            system = [{"role": "system", "content": sampler.system_prompt}]
            chat = [*(system if sampler.system_prompt else []), *history]
            prompts.append((uid, (*chat, {"role": "user", "content": chosen[uid]})))
        if not prompts:
            continue
        settings = {"modes": [mode], "k": 1, "sampling": sampler.sampling, "seed": sampler.seed}
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
        keys.update(
            {j.prompt_id: j.request.key for j in plan_jobs(prompts, sampler.teacher, **settings)}
        )
    replies = _generations(lake, table, set(keys.values()))
    messages, requirement, status, generation = [], [], [], []
    for row in df.select("uid", "mode", "messages").iter_rows(named=True):
        reply = replies.get(keys.get(row["uid"], ""))
        outcome = None
        if row["uid"] in chosen:
            outcome = "no_response" if reply is None else _rejected(reply, row["mode"], max_tokens)
        turns = json.loads(row["messages"])
        if outcome is None and reply is not None:
            outcome = "added"
            ask = {"role": "user", "content": chosen[row["uid"]]}
            turns += [ask, _reply(reply["final_answer"], reply["reasoning"])]
        messages.append(json.dumps(turns, ensure_ascii=False))
        requirement.append(chosen.get(row["uid"]))
        status.append(outcome)
        generation.append(reply["id"] if outcome == "added" else None)
    kept = df.with_columns(
        pl.Series("messages", messages, dtype=pl.String),
        pl.Series("rewrite_requirement", requirement, dtype=pl.String),
        pl.Series("rewrite_status", status, dtype=pl.String),
        pl.Series("rewrite_generation_id", generation, dtype=pl.String),
    ).with_columns(
        pl.when(pl.col("rewrite_status") == "added")
        .then(pl.col("turns") + 1)
        .otherwise(pl.col("turns"))
        .alias("turns")
    )
    outcomes = pl.Series(status, dtype=pl.String).drop_nulls().value_counts()
    stats = {"chosen": len(chosen), **dict(outcomes.iter_rows())}
    return StepResult(kept=kept, dropped=kept.clear().with_columns(reason=pl.lit("")), stats=stats)


def _generations(lake: Lake, table: str, ids: set[str]) -> dict[str, dict[str, Any]]:
    if not ids:
        return {}
    columns = ["id", "final_answer", "reasoning", "completion_tokens", "truncated"]
    rows = pl.from_arrow(lake.read(table, columns=columns))
    assert isinstance(rows, pl.DataFrame)
    found = rows.filter(pl.col("id").is_in(list(ids))).unique("id", keep="first")
    return {r["id"]: r for r in found.to_dicts()}


def _rejected(reply: dict[str, Any], mode: str, max_tokens: int | None) -> str | None:
    if reply["truncated"]:
        return "truncated"
    if max_tokens is not None and reply["completion_tokens"] > max_tokens:
        return "too_long"
    reasoning = (reply["reasoning"] or "").strip()
    if mode == "think" and not reasoning:
        return "no_reasoning"
    if mode == "no_think" and reasoning:
        return "unexpected_reasoning"
    return None


def concatenate_conversations(
    df: pl.DataFrame, *, share: float, size: int = 2, seed: int = 0
) -> StepResult:
    """Join a `share` of one-turn conversations, `size` at a time, into multi-turn ones.

    Chosen rows of one mode are shuffled (by seed) and grouped; a group never holds two
    replies to the same prompt (they would not be unrelated). A group's first row becomes
    the joined conversation (`turns`, `turn_uids` list its parts); the others leave the set
    as rows (`concatenated`, with `concatenated_into`), their turns living on in that row.
    Chosen rows left without a full group stay as they are.
    """
    if size < 2:
        raise ValueError(f"a concatenation joins at least 2 conversations, got size {size}")
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"share must be within [0, 1], got {share}")
    rows = df.select("uid", "prompt_uid", "mode", "turns").to_dicts()
    chosen = [r for r in rows if r["turns"] == 1 and draw(seed, "concatenate", r["uid"]) < share]
    into: dict[str, str] = {}
    groups: list[list[str]] = []
    for mode in MODES:
        ordered = sorted(
            (r for r in chosen if r["mode"] == mode),
            key=lambda r: draw(seed, "concatenate-order", r["uid"]),
        )
        while ordered:
            group, rest = [ordered[0]], []
            for row in ordered[1:]:
                if len(group) < size and row["prompt_uid"] not in {g["prompt_uid"] for g in group}:
                    group.append(row)
                else:
                    rest.append(row)
            if len(group) < size:
                break
            groups.append([g["uid"] for g in group])
            into.update({g["uid"]: group[0]["uid"] for g in group[1:]})
            ordered = rest
    messages = dict(df.select("uid", "messages").iter_rows())
    joined = {
        group[0]: (
            json.dumps([t for uid in group for t in json.loads(messages[uid])], ensure_ascii=False),
            group,
        )
        for group in groups
    }
    marked = df.with_columns(
        pl.col("uid")
        .replace_strict(into, default=None, return_dtype=pl.String)
        .alias("concatenated_into")
    )
    dropped = marked.filter(pl.col("concatenated_into").is_not_null()).with_columns(
        pl.lit("concatenated").alias("reason")
    )
    kept = marked.filter(pl.col("concatenated_into").is_null()).drop("concatenated_into")
    uids = kept["uid"].to_list()
    kept = kept.with_columns(
        pl.Series(
            "messages",
            [
                joined[u][0] if u in joined else m
                for u, m in zip(uids, kept["messages"], strict=True)
            ],
            dtype=pl.String,
        ),
        pl.Series(
            "turn_uids",
            [
                joined[u][1] if u in joined else t
                for u, t in zip(uids, kept["turn_uids"], strict=True)
            ],
            dtype=pl.List(pl.String),
        ),
        pl.Series(
            "turns",
            [size if u in joined else t for u, t in zip(uids, kept["turns"], strict=True)],
            dtype=pl.Int64,
        ),
    )
    stats = {"chosen": len(chosen), "conversations": len(groups), "concatenated": dropped.height}
    return StepResult(kept=kept, dropped=dropped, stats=stats)


def single_turn_prompts(df: pl.DataFrame, *, column: str = "problem") -> StepResult:
    """Prompts from conversations: a row whose `column` is a chat (JSON list of {role,
    content}, as Tulu-3-SFT's `messages`) becomes its one user turn; plain text is kept as it
    is. Dropped: `multi_turn` (more than one user turn, with `user_turns`), `no_user_turn`.
    `id` is recomputed from the prompt."""
    from curation.prompt_ids import prompt_ids

    texts: list[str | None] = []
    reasons: list[str | None] = []
    turns: list[int | None] = []
    for value in df.get_column(column).to_list():
        chat = _chat(value)
        if chat is None:
            texts.append(value)
            reasons.append(None)
            turns.append(None)
            continue
        users = [m.get("content") or "" for m in chat if m.get("role") == "user"]
        turns.append(len(users))
        texts.append(users[0] if len(users) == 1 else None)
        reasons.append(None if len(users) == 1 else "multi_turn" if users else "no_user_turn")
    marked = df.with_columns(
        pl.Series("reason", reasons, dtype=pl.String),
        pl.Series("user_turns", turns, dtype=pl.Int64),
    )
    dropped = marked.filter(pl.col("reason").is_not_null())
    dropped = dropped.with_columns(
        pl.when(pl.col("reason") == "multi_turn").then(pl.col("user_turns")).alias("user_turns")
    )
    kept_texts = pl.Series(column, [t for t, r in zip(texts, reasons, strict=True) if r is None])
    kept = marked.filter(pl.col("reason").is_null()).drop("reason", "user_turns")
    kept = kept.with_columns(kept_texts.cast(pl.String))
    if "id" in kept.columns:
        kept = kept.with_columns(prompt_ids(kept.get_column(column)).alias("id"))
    stats = {"from_chats": sum(1 for t in turns if t == 1), "dropped": dropped.height}
    return StepResult(kept=kept, dropped=dropped, stats=stats)


def _chat(value: Any) -> list[dict[str, Any]] | None:
    """`value` as a list of chat messages, or None when it is not one."""
    if not isinstance(value, str) or not value.lstrip().startswith("["):
        return None
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError:
        return None
    if (
        isinstance(parsed, list)
        and parsed
        and all(isinstance(m, dict) and "role" in m for m in parsed)
    ):
        return parsed
    return None
