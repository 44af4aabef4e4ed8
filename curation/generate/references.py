"""Attach each generation's reference from its prompt, so a verifier never scores a response
against a generated field.

A generations row knows its prompt only by `prompt_id` (the prompt's `id`); the reference
(the `answer`, and tests or IF instructions inside `metadata`) lives in the prompts table.
"""

from __future__ import annotations

import polars as pl

REFERENCE_COLUMNS = ("answer", "metadata")


def join_references(generations: pl.DataFrame, prompts: pl.DataFrame) -> pl.DataFrame:
    """`generations` plus the prompt's `answer` and `metadata`, joined on prompt_id = id.

    Raises ValueError naming a generation whose prompt is not in `prompts`.
    """
    if "prompt_id" not in generations.columns:
        raise ValueError("generations need a 'prompt_id' column to find their prompts")
    clash = [c for c in REFERENCE_COLUMNS if c in generations.columns]
    if clash:
        raise ValueError(
            f"generations already have {clash}; a generated field is never a reference"
        )
    wanted = [c for c in REFERENCE_COLUMNS if c in prompts.columns]
    references = prompts.select("id", *wanted).unique("id", keep="first", maintain_order=True)
    joined = generations.join(
        references, left_on="prompt_id", right_on="id", how="left", coalesce=True
    )
    matched = generations.select("prompt_id").join(
        references.select("id"), left_on="prompt_id", right_on="id", how="anti"
    )
    if matched.height:
        raise ValueError(
            f"{matched.height} generations have no prompt in the prompts table "
            f"(first prompt_id {matched['prompt_id'][0]!r})"
        )
    return joined
