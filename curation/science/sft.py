"""Science SFT steps: prompts given as chats, several responses for selected prompts, and the
multiple-choice samples that walk through each option instead of solving.

Following the Cascade recipe's science SFT data (S1K + Llama-Nemotron science prompts):

- `chat_prompt_text`: a prompt stored as a chat (Llama-Nemotron's `input`, a list of
  {role, content} turns, which ingest keeps as JSON text) becomes its last user turn's text;
- `science_responses`: the teacher's k responses per prompt, `selected_k` for the prompts a
  column marks as selected (the recipe samples several responses only for selected
  high-quality prompts, without saying how they were chosen: here, by source);
- `option_walkthrough`: a response to a multiple-choice prompt that takes up every option in
  turn ("Option A: ... incorrect. Option B: ...") is dropped. The prompt's options are the
  lettered ones `curation.math.filters` finds; a response discusses an option when it names
  it as "option/choice X" or "(X)", or starts a line with "X." / "X)" / "X:". Both counts
  stay as columns (`mcq_options`, `options_discussed`) so the rule can be reviewed with SQL.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable, Sequence

import polars as pl

from curation.general.conversations import field_values
from curation.generate.backend import Backend
from curation.generate.samples import Sampler, sample_responses
from curation.math.filters import measure_multiple_choice
from lake import Lake, StepResult
from lake.operators import decide


def chat_prompt_text(df: pl.DataFrame, *, prompt_column: str = "problem") -> StepResult:
    """A prompt that is a JSON list of chat turns becomes its last user turn's text (plain
    prompts stay as they are); one with no user turn is dropped (`no_user_turn`)."""
    texts, reasons = [], []
    for text in df.get_column(prompt_column).to_list():
        turns = _chat(text)
        if turns is None:
            texts.append(text)
            reasons.append(None)
            continue
        users = [t["content"] for t in turns if t.get("role") == "user"]
        last = users[-1] if users and isinstance(users[-1], str) else None
        texts.append(last if last and last.strip() else text)
        reasons.append(None if last and last.strip() else "no_user_turn")
    marked = df.with_columns(
        pl.Series(prompt_column, texts, dtype=pl.String),
        pl.Series("reason", reasons, dtype=pl.String),
    )
    dropped = df.filter(marked["reason"].is_not_null()).with_columns(
        marked.filter(marked["reason"].is_not_null())["reason"]
    )
    kept = marked.filter(pl.col("reason").is_null()).drop("reason")
    unwrapped = sum(_chat(t) is not None for t in df.get_column(prompt_column).to_list())
    return StepResult(kept=kept, dropped=dropped, stats={"chats": unwrapped})


def _chat(text: object) -> list[dict] | None:
    if not isinstance(text, str) or not text.lstrip().startswith("["):
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return None
    if isinstance(value, list) and value and all(isinstance(t, dict) for t in value):
        return value
    return None


def science_responses(
    df: pl.DataFrame,
    *,
    lake: Lake,
    sampler: Sampler,
    selected_k: int | None = None,
    selected_field: str = "source",
    selected_values: Sequence[str] = (),
    table: str = "generations",
    prompt_column: str = "problem",
    backend_factory: Callable[[str], Backend] | None = None,
) -> StepResult:
    """Fan-out step: `sampler.k` responses per prompt, `selected_k` for prompts whose
    `selected_field` (a column or a metadata key) is one of `selected_values`; one row per
    response (see `sample_responses`). A prompt without any response is dropped
    (`no_response`)."""
    chosen = set(selected_values)
    selected = pl.Series([v in chosen for v in field_values(df, selected_field)], dtype=pl.Boolean)
    kept, dropped = [], []
    for mask, k in ((selected, selected_k or sampler.k), (~selected, sampler.k)):
        part = df.filter(mask)
        if part.height:
            result = sample_responses(
                part,
                lake=lake,
                sampler=dataclasses.replace(sampler, k=k),
                table=table,
                prompt_column=prompt_column,
                backend_factory=backend_factory,
            )
            kept.append(result.kept)
            dropped.append(result.dropped)
    order = df.select(pl.col("uid").alias("prompt_uid")).with_row_index("_row")
    responses = (
        pl.concat(kept, how="diagonal_relaxed")
        .join(order, on="prompt_uid")
        .sort("_row", "sample_index")
        .drop("_row")
        if kept
        else df.clear()
    )
    stats = {"prompts": df.height, "selected": int(selected.sum()), "responses": responses.height}
    return StepResult(
        kept=responses,
        dropped=pl.concat(dropped, how="diagonal_relaxed") if dropped else df.clear(),
        stats=stats,
    )


def _discussed(label: str) -> tuple[re.Pattern[str], re.Pattern[str]]:
    """Where a response takes up option `label`: "option/choice X" (any case), or "(X)" and
    a line that starts with "X." / "X)" / "X:" after bullets or bold (upper case only, so
    "(a)" and "a)" in prose are not options)."""
    x = re.escape(label)
    named = re.compile(rf"\b(?:option|choice)\s*\(?{x}\)?(?!\w)", re.IGNORECASE)
    marked = re.compile(rf"(?<!\w)\({x}\)|^[ \t>*#\-]*(?:\*\*)?{x}(?:\*\*)?\s*[.):]", re.M)
    return named, marked


def options_discussed(response: str, labels: Sequence[str]) -> list[str]:
    """The option labels a response takes up, in label order.

    >>> options_discussed("Option A is wrong.\\n(B) fits, f(C) does not.\\nD: too big.", "ABCD")
    ['A', 'B', 'D']
    """
    return [
        label for label in labels if any(pattern.search(response) for pattern in _discussed(label))
    ]


def option_walkthrough(
    df: pl.DataFrame,
    *,
    prompt_column: str = "problem",
    response_column: str = "response",
    min_options: int = 3,
) -> StepResult:
    """Drop `option_walkthrough`: a response to a multiple-choice prompt (at least
    `min_options` lettered options) that takes up every one of its options in turn, instead
    of solving the problem. Non-MCQ prompts and prompts without lettered options are kept."""
    problems = df.get_column(prompt_column).cast(pl.String).fill_null("").to_list()
    evidence = measure_multiple_choice(problems, [None] * len(problems))["mcq_evidence"]
    labels = [
        e.removeprefix("options ").split() if e and e.startswith("options ") else []
        for e in evidence.to_list()
    ]
    responses = df.get_column(response_column).cast(pl.String).fill_null("").to_list()
    discussed = [
        options_discussed(r, opts) if len(opts) >= min_options else []
        for r, opts in zip(responses, labels, strict=True)
    ]
    walked = [
        len(opts) >= min_options and len(d) == len(opts)
        for opts, d in zip(labels, discussed, strict=True)
    ]
    marked = df.with_columns(
        pl.Series("mcq_options", [len(o) for o in labels], dtype=pl.Int64),
        pl.Series("options_discussed", [len(d) for d in discussed], dtype=pl.Int64),
    )
    stats = {"mcq_responses": sum(len(o) >= min_options for o in labels), "walked": sum(walked)}
    return decide(
        marked,
        pl.when(pl.Series(walked, dtype=pl.Boolean)).then(pl.lit("option_walkthrough")),
        stats=stats,
        counts=(),
    )
