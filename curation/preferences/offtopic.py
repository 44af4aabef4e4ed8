"""Off-topic preference pairs: a strong model's good answer to the wrong question loses.

The Cascade recipe's synthetic reward-model pairs (rejected answers from a strong model, so
the pairs are not trivially separable by quality): a teacher rewrites each prompt into a
closely related but different one whose correct answer looks like a correct answer to the
original without being one; an LLM judge answers YES/NO to "do these two instructions ask the
same thing?" and only rewrites judged different are kept; then rejected = the strong model's
answer to the rewrite, chosen = the weak model's answer to the original. (Asking a strong
model directly for subtly wrong answers did not work.)

Three steps, each a model sampled once per row through `generations_for`, so every request
and raw reply (the judge's included) is kept and cached in the generations table:
`rewrite_prompts`, `judge_rewrites` (parsed verdict as a column, or the drop's detail), and
`offtopic_pairs` (the pair rows). Instructions are named templates: `{prompt}` in the
rewrite instruction, `{original}` and `{rewrite}` in the judge's.
"""

from __future__ import annotations

import re
from typing import Any

import polars as pl

from curation.generate.samples import Sampler, generations_for
from curation.preferences.human import source_field
from curation.preferences.pairs import (
    PAIR_SCHEMA,
    PROMPT_ONLY_COLUMNS,
    PairRow,
    drops_frame,
    json_object,
    pair_frame,
)
from curation.prompt_ids import prompt_id_text, prompt_ids
from lake.catalog import Lake
from lake.steps import StepResult

REWRITE_INSTRUCTION = (
    "Rewrite the instruction below into a new instruction that is closely related but asks "
    "for something different: change one key detail (a constraint, the subject, a quantity, "
    "the audience or the format) so that a correct answer to the new instruction looks like "
    "a correct answer to the original one without actually being one. Reply with the new "
    "instruction only.\n\nInstruction:\n{prompt}"
)
JUDGE_INSTRUCTION = (
    "Do these two instructions ask the same thing? Answer YES or NO, and nothing else.\n\n"
    "Instruction A:\n{original}\n\nInstruction B:\n{rewrite}"
)
_PLACEHOLDER = re.compile(r"\{(prompt|original|rewrite)\}")
_VERDICT = re.compile(r"^[\W_]*(?:(?:final\s+)?(?:answer|verdict)[\W_]*)?(yes|no)\b", re.I)


def fill(template: str, **values: str) -> str:
    """`template` with `{name}` replaced by `values[name]` (other braces left alone).

    >>> fill("A: {original} B: {rewrite} {x}", original="1", rewrite="{prompt}")
    'A: 1 B: {prompt} {x}'
    """
    missing = [n for n in values if "{" + n + "}" not in template]
    if missing:
        raise ValueError(f"instruction template lacks {', '.join('{' + n + '}' for n in missing)}")
    return _PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), template)


def parse_verdict(reply: str | None) -> str | None:
    """`YES` or `NO` when the reply starts with it (markdown, quotes and an `Answer:` or
    `Verdict:` label allowed before it), else None: the verdict is unparseable.

    >>> [parse_verdict(r) for r in ["**NO**", "Answer: yes.", "Nope", "I think they differ"]]
    ['NO', 'YES', None, None]
    """
    if reply is None:
        return None
    match = _VERDICT.match(reply.strip())
    return match.group(1).upper() if match else None


def one_sample_each(
    texts: list[str], sampler: Sampler, *, lake: Lake, table: str
) -> list[dict[str, Any] | None]:
    """The sampler's single reply to each text (None where generation failed)."""
    if sampler.k != 1:
        raise ValueError(f"{sampler.model}: off-topic steps sample once per request; set k=1")
    if not texts:
        return []
    ids = prompt_ids(pl.Series(texts, dtype=pl.String))
    requests = pl.DataFrame({"_request": texts, "_request_id": ids})
    samples, _ = generations_for(
        requests,
        sampler,
        lake=lake,
        table=table,
        prompt_column="_request",
        id_column="_request_id",
    )
    by_id = {row["prompt_id"]: row for row in samples.iter_rows(named=True)}
    return [by_id.get(i) for i in ids]


def rewrite_prompts(
    df: pl.DataFrame,
    *,
    lake: Lake,
    sampler: Sampler,
    instruction: str = REWRITE_INSTRUCTION,
    table: str = "generations",
    prompt_column: str = "problem",
) -> StepResult:
    """Add `rewrite` (the teacher's rewrite of each prompt), `rewrite_generation_id`.

    Drops: `no_response` (generation failed), `truncated_rewrite` (cut at the length cap),
    `empty_rewrite`, `rewrite_unchanged` (the same text as the prompt after normalization).
    """
    prompts = df.get_column(prompt_column).to_list()
    replies = one_sample_each(
        [fill(instruction, prompt=p) for p in prompts], sampler, lake=lake, table=table
    )
    kept: list[dict[str, Any]] = []
    drops: list[dict[str, Any]] = []
    for uid, prompt, reply in zip(df.get_column("uid"), prompts, replies, strict=True):
        if reply is None:
            drops.append({"uid": uid, "reason": "no_response", "model": sampler.model})
            continue
        rewrite = reply["final_answer"].strip()
        generation = {"uid": uid, "rewrite_generation_id": reply["id"]}
        if reply["truncated"]:
            drops.append({**generation, "reason": "truncated_rewrite"})
        elif not rewrite:
            drops.append({**generation, "reason": "empty_rewrite"})
        elif prompt_id_text(rewrite) == prompt_id_text(prompt):
            drops.append({**generation, "reason": "rewrite_unchanged", "rewrite": rewrite})
        else:
            kept.append({**generation, "rewrite": rewrite})
    added = pl.DataFrame(
        kept, schema={"uid": pl.String, "rewrite_generation_id": pl.String, "rewrite": pl.String}
    )
    stats = {"rows_in": df.height, "rewrites": added.height, "model": sampler.model}
    return StepResult(
        kept=df.join(added, on="uid", how="inner", maintain_order="left"),
        dropped=drops_frame(df, drops),
        stats=stats,
    )


def judge_rewrites(
    df: pl.DataFrame,
    *,
    lake: Lake,
    sampler: Sampler,
    instruction: str = JUDGE_INSTRUCTION,
    table: str = "generations",
    prompt_column: str = "problem",
    rewrite_column: str = "rewrite",
) -> StepResult:
    """Ask the judge whether each rewrite asks the same thing as its prompt; keep the NOs.

    Kept rows get `judge_verdict` (`NO`) and `judge_generation_id` (the raw reply is that
    row of the generations table). Drops: `judged_same` (verdict YES), `unparseable_verdict`
    (the reply does not start with YES or NO), `no_response`; their detail carries the
    verdict, the judge's reply and its generation id.
    """
    prompts = df.get_column(prompt_column).to_list()
    rewrites = df.get_column(rewrite_column).to_list()
    requests = [
        fill(instruction, original=p, rewrite=r) for p, r in zip(prompts, rewrites, strict=True)
    ]
    replies = one_sample_each(requests, sampler, lake=lake, table=table)
    kept: list[dict[str, Any]] = []
    drops: list[dict[str, Any]] = []
    verdicts = {"YES": 0, "NO": 0, None: 0}
    for uid, reply in zip(df.get_column("uid"), replies, strict=True):
        if reply is None:
            drops.append({"uid": uid, "reason": "no_response", "model": sampler.model})
            continue
        verdict = parse_verdict(reply["final_answer"])
        verdicts[verdict] += 1
        judged = {"uid": uid, "judge_verdict": verdict, "judge_generation_id": reply["id"]}
        if verdict == "NO":
            kept.append(judged)
        else:
            reason = "judged_same" if verdict == "YES" else "unparseable_verdict"
            drops.append({**judged, "reason": reason, "judge_reply": reply["response"]})
    added = pl.DataFrame(
        kept,
        schema={"uid": pl.String, "judge_verdict": pl.String, "judge_generation_id": pl.String},
    )
    stats = {
        "rows_in": df.height,
        "judged_different": verdicts["NO"],
        "judged_same": verdicts["YES"],
        "unparseable": verdicts[None],
        "model": sampler.model,
    }
    return StepResult(
        kept=df.join(added, on="uid", how="inner", maintain_order="left"),
        dropped=drops_frame(df, drops),
        stats=stats,
    )


def offtopic_pairs(
    df: pl.DataFrame,
    *,
    lake: Lake,
    strong: Sampler,
    weak: Sampler,
    table: str = "generations",
    prompt_column: str = "problem",
    rewrite_column: str = "rewrite",
    category_field: str | None = "category",
) -> StepResult:
    """Pair rows: chosen = the weak model's answer to the prompt, rejected = the strong
    model's answer to the rewrite (final answers, after any `</think>`).

    A pair keeps the prompt row's uid and metadata, its category from `category_field` (a
    metadata key, else a column) and the lineage columns `chosen_model`, `rejected_model`,
    `chosen_generation_id`, `rejected_generation_id` next to the rewrite and judge columns.
    Drops: `no_response`, `truncated_response` or `empty_response` of either model (the
    detail names the model): a cut or empty answer would make the pair trivially separable;
    `identical_responses` when both answers are the same text (no preference to learn, and
    the reward-model trainer refuses such a pair).
    """
    prompts = df.get_column(prompt_column).to_list()
    weak_replies = one_sample_each(prompts, weak, lake=lake, table=table)
    strong_replies = one_sample_each(
        df.get_column(rewrite_column).to_list(), strong, lake=lake, table=table
    )
    pairs: list[PairRow] = []
    lineage: list[dict[str, Any]] = []
    drops: list[dict[str, Any]] = []
    rows = df.iter_rows(named=True)
    for row, chosen, rejected in zip(rows, weak_replies, strong_replies, strict=True):
        uid = row["uid"]
        problem = _answer_problem(weak, chosen) or _answer_problem(strong, rejected)
        if problem:
            drops.append({"uid": uid, **problem})
            continue
        assert chosen is not None and rejected is not None
        if chosen["final_answer"].strip() == rejected["final_answer"].strip():
            drops.append(
                {
                    "uid": uid,
                    "reason": "identical_responses",
                    "chosen_generation_id": chosen["id"],
                    "rejected_generation_id": rejected["id"],
                }
            )
            continue
        meta = json_object(row.get("metadata"))
        category = source_field(row, meta, category_field) if category_field else None
        pairs.append(
            PairRow(
                uid=uid,
                prompt_uid=uid,
                source=row["source"],
                source_id=row.get("source_id"),
                source_rows=[uid],
                method="off_topic_rewrite",
                turns=[{"role": "user", "content": row[prompt_column]}],
                chosen=chosen["final_answer"].strip(),
                rejected=rejected["final_answer"].strip(),
                category=category if isinstance(category, str) else None,
                metadata=meta,
            )
        )
        lineage.append(
            {
                "uid": uid,
                "chosen_model": weak.model,
                "rejected_model": strong.model,
                "chosen_generation_id": chosen["id"],
                "rejected_generation_id": rejected["id"],
            }
        )
    carried = df.drop(
        [c for c in df.columns if c != "uid" and (c in PAIR_SCHEMA or c in PROMPT_ONLY_COLUMNS)]
    )
    kept = (
        pair_frame(pairs)
        .join(
            pl.DataFrame(lineage, schema={k: pl.String for k in _LINEAGE}),
            on="uid",
            maintain_order="left",
        )
        .join(carried, on="uid", maintain_order="left")
    )
    stats = {"rows_in": df.height, "pairs": kept.height, "strong": strong.model, "weak": weak.model}
    return StepResult(kept=kept, dropped=drops_frame(df, drops), stats=stats)


_LINEAGE = (
    "uid",
    "chosen_model",
    "rejected_model",
    "chosen_generation_id",
    "rejected_generation_id",
)


def _answer_problem(sampler: Sampler, reply: dict[str, Any] | None) -> dict[str, Any] | None:
    """Why a model's answer cannot be one side of a pair (None when it can)."""
    if reply is None:
        return {"reason": "no_response", "model": sampler.model}
    if reply["truncated"]:
        return {
            "reason": "truncated_response",
            "model": sampler.model,
            "generation_id": reply["id"],
        }
    if not reply["final_answer"].strip():
        return {"reason": "empty_response", "model": sampler.model, "generation_id": reply["id"]}
    return None
