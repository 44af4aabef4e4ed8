"""Attach verifiable instructions to general prompts, and measure pass rates on them.

`draw_instruction_set` draws 1..N instruction types that do not conflict (`CONFLICTS`), draws
their kwargs, and keeps the set only if the numbers agree (`kwargs_conflict`) and a response
exists that the IF verifier accepts (`compliant_response`); otherwise it draws again.
`attach_instructions` is the recipe step: each prompt gets its own set, drawn from a generator
seeded by (seed, row uid), so a row's instructions do not depend on which other rows share its
batch; the instruction texts are appended in IFEval's wording (a repeat-the-request instruction
last, after the request it asks to repeat).
"""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import polars as pl

from curation.generate.backend import Backend
from curation.generate.samples import Sampler
from curation.instructions.iftrain import IFTRAIN
from curation.instructions.taxonomy import IFEVAL, InstructionType, Taxonomy, WordDraw
from curation.prompt_ids import prompt_ids
from lake import Lake, StepResult

REPEAT = "combination:repeat_prompt"
TAXONOMIES: dict[str, Taxonomy] = {t.name: t for t in (IFEVAL, IFTRAIN)}
"""The taxonomies instructions are attached from: IFEval's (IF-RL sub-stage 1) and the IF-RLVR
training constraints (sub-stage 2). IFBench's evaluation constraints are never attached."""

DEFAULT_PER_PROMPT = (1, 10)
"""Instructions per prompt: the recipe's IF-RL data carries 1-10 (Llama-Nemotron IF)."""


def taxonomy_named(name: str) -> Taxonomy:
    """The taxonomy called `name`, or ValueError naming the known ones."""
    try:
        return TAXONOMIES[name]
    except KeyError:
        raise ValueError(f"unknown taxonomy {name!r}; known: {sorted(TAXONOMIES)}") from None


def _instruction_type(instruction: str) -> InstructionType:
    for taxonomy in TAXONOMIES.values():
        if instruction in taxonomy.types:
            return taxonomy.types[instruction]
    raise ValueError(f"unknown instruction id {instruction!r}")


def draw_instruction_set(
    rng: random.Random,
    base_prompt: str,
    *,
    per_prompt: tuple[int, int] = DEFAULT_PER_PROMPT,
    instruction_ids: Sequence[str] | None = None,
    max_attempts: int = 50,
    taxonomy: str = "ifeval",
) -> tuple[list[str], list[dict[str, Any]], str, int] | None:
    """(ids, kwargs, prompt with the instructions, attempts) or None after `max_attempts`.

    The number of instructions is uniform in `per_prompt` (drawn once, so sets that are
    harder to satisfy are not made rarer); each next type is uniform among those of the
    taxonomy that conflict with none already chosen (a draw that runs out starts over).
    """
    chosen = taxonomy_named(taxonomy)
    allowed = sorted(instruction_ids or chosen.types)
    low, high = per_prompt
    want = rng.randint(low, high)
    for attempt in range(1, max_attempts + 1):
        ids: list[str] = []
        while len(ids) < want:
            free = [i for i in allowed if not any(chosen.conflicts(i, c) for c in ids)]
            if not free:
                break
            ids.append(rng.choice(free))
        if len(ids) < want:
            continue
        ids.sort(key=lambda i: i == REPEAT)  # the repeat instruction comes after the request
        words = WordDraw(rng, prompt=base_prompt.strip())
        kwargs = [chosen.types[i].draw(rng, words) for i in ids]
        if chosen.kwargs_conflict(ids, kwargs):
            continue
        prompt = assemble_prompt(base_prompt, ids, kwargs)
        if chosen.witness(ids, kwargs) is not None:
            return ids, kwargs, prompt, attempt
    return None


def assemble_prompt(base_prompt: str, ids: Sequence[str], kwargs: list[dict[str, Any]]) -> str:
    """The prompt with each instruction's text on its own line; fills `prompt_to_repeat`
    (everything before the instruction that asks to repeat or copy it) in place."""
    text = base_prompt.strip()
    for instruction, args in zip(ids, kwargs, strict=True):
        if "prompt_to_repeat" in args:
            args["prompt_to_repeat"] = text
        text = f"{text}\n{_instruction_type(instruction).describe(args)}"
    return text


def attach_instructions(
    df: pl.DataFrame,
    *,
    per_prompt: Sequence[int] = DEFAULT_PER_PROMPT,
    seed: int = 0,
    instruction_ids: Sequence[str] | None = None,
    max_prompt_words: int = 1024,
    text_column: str = "problem",
    max_attempts: int = 50,
    taxonomy: str = "ifeval",
) -> StepResult:
    """Give each prompt 1..N verifiable instructions of one taxonomy (`TAXONOMIES`: IFEval's,
    or the IF-RLVR training constraints), no two of which conflict.

    Kept rows: `problem` becomes the prompt with the instruction texts (the original is kept
    in `base_problem`, its id in `base_id`; `id` is the new prompt's id), plus
    `instruction_id_list` (list of ids), `kwargs` (JSON list of dicts, the verifier's
    arguments), `messages` (the one-turn chat an RL stage reads) and `instruction_attempts`
    (how many draws it took). Dropped: `empty_prompt`, `too_long` (over `max_prompt_words`
    words, with `prompt_words`), `no_verifiable_set` (no satisfiable draw; not expected).
    """
    chosen = taxonomy_named(taxonomy)
    low, high = _check_range(per_prompt, len(chosen.types))
    if instruction_ids:
        unknown = sorted(set(instruction_ids) - set(chosen.types))
        if unknown:
            raise ValueError(
                f"unknown instruction ids {unknown} for taxonomy {taxonomy!r}; known: "
                f"{sorted(chosen.types)}"
            )
    if text_column not in df.columns or "uid" not in df.columns:
        raise ValueError(f"attach_instructions needs 'uid' and {text_column!r}; has {df.columns}")
    rows: list[dict[str, Any] | None] = []
    reasons: list[str | None] = []
    lengths: list[int] = []
    for uid, text in df.select("uid", text_column).iter_rows():
        words = len((text or "").split())
        lengths.append(words)
        if not (text or "").strip():
            rows.append(None)
            reasons.append("empty_prompt")
            continue
        if words > max_prompt_words:
            rows.append(None)
            reasons.append("too_long")
            continue
        rng = random.Random(f"{seed}:{uid}")
        drawn = draw_instruction_set(
            rng,
            text,
            per_prompt=(low, high),
            instruction_ids=instruction_ids,
            max_attempts=max_attempts,
            taxonomy=taxonomy,
        )
        if drawn is None:
            rows.append(None)
            reasons.append("no_verifiable_set")
            continue
        ids, kwargs, prompt, attempts = drawn
        rows.append({"ids": ids, "kwargs": kwargs, "prompt": prompt, "attempts": attempts})
        reasons.append(None)
    marked = df.with_columns(
        pl.Series("reason", reasons, dtype=pl.String),
        pl.Series("prompt_words", lengths, dtype=pl.Int64),
    )
    dropped = marked.filter(pl.col("reason").is_not_null())
    dropped = dropped.with_columns(
        pl.when(pl.col("reason") == "too_long").then(pl.col("prompt_words")).alias("prompt_words")
    )
    chosen = [r for r in rows if r is not None]
    texts = [r["prompt"] for r in chosen]
    kept = marked.filter(pl.col("reason").is_null()).drop("reason", "prompt_words")
    kept = kept.with_columns(
        pl.col(text_column).alias("base_problem"),
        pl.col("id").alias("base_id") if "id" in kept.columns else pl.lit(None).alias("base_id"),
        pl.Series(text_column, texts, dtype=pl.String),
        prompt_ids(pl.Series(texts, dtype=pl.String)).alias("id"),
        pl.Series("instruction_id_list", [r["ids"] for r in chosen], dtype=pl.List(pl.String)),
        pl.Series(
            "kwargs", [json.dumps(r["kwargs"], ensure_ascii=False) for r in chosen], pl.String
        ),
        pl.Series(
            "messages",
            [json.dumps([{"role": "user", "content": t}], ensure_ascii=False) for t in texts],
            dtype=pl.String,
        ),
        pl.Series("instruction_attempts", [r["attempts"] for r in chosen], dtype=pl.Int64),
    )
    counts = Counter(i for r in chosen for i in r["ids"])
    stats = {
        "taxonomy": taxonomy,
        "kept": kept.height,
        "instructions_per_prompt": dict(sorted(Counter(len(r["ids"]) for r in chosen).items())),
        "instruction_counts": dict(sorted(counts.items())),
        "mean_attempts": sum(r["attempts"] for r in chosen) / len(chosen) if chosen else 0.0,
    }
    return StepResult(kept=kept, dropped=dropped, stats=stats)


def _check_range(per_prompt: Sequence[int], types: int) -> tuple[int, int]:
    values = [int(v) for v in per_prompt]
    if len(values) != 2 or not 1 <= values[0] <= values[1] <= types:
        raise ValueError(
            f"per_prompt must be (low, high) with 1 <= low <= high <= {types}, "
            f"got {list(per_prompt)}"
        )
    return values[0], values[1]


def instruction_reference(df: pl.DataFrame) -> pl.Series:
    """Per row, IFEval's reference as one JSON object (ids and kwargs), as the verifier reads
    it: the pass-rate cache then keys each measurement by the kwargs too."""
    return pl.Series(
        "if_reference",
        [
            json.dumps({"instruction_id_list": list(ids), "kwargs": json.loads(kw)})
            for ids, kw in df.select("instruction_id_list", "kwargs").iter_rows()
        ],
        dtype=pl.String,
    )


def measure_instruction_pass_rates(
    df: pl.DataFrame,
    *,
    lake: Lake,
    label: str,
    sampler: Sampler,
    generations_table: str = "generations",
    backend_factory: Callable[[str], Backend] | None = None,
) -> StepResult:
    """`measure_pass_rates` with the IF verifier over attached instructions: `<label>_pass_rate`
    etc. per prompt, measured once per (prompt, model, sampling, instructions and kwargs)."""
    from curation.difficulty import measure_pass_rates

    result = measure_pass_rates(
        df.with_columns(instruction_reference(df)),
        lake=lake,
        label=label,
        sampler=sampler,
        verifier="if",
        reference_field="if_reference",
        generations_table=generations_table,
        prompt_column="problem",
        backend_factory=backend_factory,
    )
    return StepResult(
        kept=result.kept.drop("if_reference"),
        dropped=result.dropped.drop("if_reference", strict=False),
        stats=result.stats,
    )
