"""SWE RL prompts: repair prompts within `l` tokens, GT-only or with localized distractors.

Cascade's SWE RL trains repair on the hard instances (cascade-recipe.md 6). Each prompt is
capped at `max_tokens` (l: 16K / 24K / 32K) and comes in one of two kinds:

- GT-only: the issue and the gold patch's files;
- mixed localization: the gold files, then files a localizer ranked (the distractors),
  added one at a time while the prompt stays within l, at most `max_files` files in total.

File order is shuffled (seeded per instance and file, so a rebuild gives the same prompts and
the prompt measured while adding a file is exactly the prompt it becomes). An
instance whose gold files alone exceed l is dropped, and so is a prompt under `min_tokens`
(8K): evaluation feeds long multi-file prompts, so short ones teach the wrong regime. Each
instance gets one kind, mixed with probability `mixed_fraction`.

Token counts come from a tokenizer passed in: anything with `encode` (a transformers or
tokenizers tokenizer) or a plain function `str -> int`.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl
import xxhash

from curation.swe.localization import snapshots
from curation.swe.repair import REPAIR_TEMPLATE, render_files
from curation.swe.repository import Snapshot, patch_files
from lake.operators import count_by, decide
from lake.steps import StepResult


def token_counter(tokenizer: Any) -> Callable[[str], int]:
    """`str -> int` from a tokenizer object (its `encode`) or a counting function."""
    encode = getattr(tokenizer, "encode", None)
    if encode is None:
        if callable(tokenizer):
            return tokenizer
        raise TypeError(f"cannot count tokens with a {type(tokenizer).__name__}")

    def count(text: str) -> int:
        encoded = encode(text)
        ids = getattr(encoded, "ids", encoded)  # tokenizers.Encoding or a list of ids
        return len(ids)

    return count


def shuffled(paths: list[str], seed: int, uid: str) -> list[str]:
    """`paths` in a seeded per-instance random order that does not depend on which other
    files are present (so a trial prompt is exactly the prompt it would become)."""
    return sorted(paths, key=lambda p: xxhash.xxh3_64_intdigest(f"{seed}:{uid}:{p}".encode()))


def _instance_prompt(
    snap: Snapshot,
    uid: str,
    issue: str,
    patch: str,
    ranked: list[str] | None,
    kind: str,
    *,
    count: Callable[[str], int],
    max_tokens: int,
    min_tokens: int,
    max_files: int,
    seed: int,
    template: str,
) -> dict[str, Any]:
    """One instance's prompt and measurements, or the reason it has none."""
    contents = snap.read_many(patch_files(patch))
    files = list(contents)
    if not files:
        return {"reason": "no_context_files"}

    def render(paths: list[str]) -> str:
        order = shuffled(paths, seed, uid)
        return template.format(issue=issue, files=render_files([(p, contents[p]) for p in order]))

    gold_tokens = count(render(files))
    if gold_tokens > max_tokens:
        return {"reason": "gold_exceeds_budget", "gold_tokens": gold_tokens}
    added: list[str] = []
    if kind == "mixed":
        for path in ranked or []:
            if len(files) >= max_files:
                break
            text = snap.read(path)
            if path in contents or text is None:
                continue
            contents[path] = text
            if count(render([*files, path])) > max_tokens:
                break  # the prompt would leave the budget: stop adding
            files.append(path)
            added.append(path)
    prompt = render(files)
    tokens = count(prompt)
    order = shuffled(files, seed, uid)
    return {
        "prompt": prompt,
        "prompt_tokens": tokens,
        "context_files": order,
        "context_contents": [contents[p] for p in order],
        "distractor_files": added,
        "gold_tokens": gold_tokens,
        "reason": "prompt_below_min_tokens" if tokens < min_tokens else None,
    }


def build_rl_prompts(
    df: pl.DataFrame,
    *,
    repos_dir: str | Path,
    tokenizer: Any,
    max_tokens: int = 24 * 1024,
    min_tokens: int = 8 * 1024,
    max_files: int = 5,
    mixed_fraction: float = 0.5,
    distractor_column: str = "localized_files",
    seed: int = 0,
    template: str = REPAIR_TEMPLATE,
    patch_column: str = "patch",
    id_column: str = "uid",
) -> StepResult:
    """Add `prompt`, `prompt_tokens`, `prompt_kind` (gt_only / mixed), `context_files` (in
    prompt order), `context_contents` (their texts at the base commit, as shown: the SWE RL
    reward applies a rollout's SEARCH/REPLACE edits to them), `distractor_files` and
    `gold_tokens` (the GT-only prompt's length).

    Drop reasons: `repo_unavailable`, `no_context_files` (every gold file is new),
    `gold_exceeds_budget` (gold files alone over `max_tokens`), `prompt_below_min_tokens`.
    """
    if not 0 <= mixed_fraction <= 1:
        raise ValueError(f"mixed_fraction must be in [0, 1], got {mixed_fraction}")
    if min_tokens > max_tokens:
        raise ValueError(f"min_tokens {min_tokens} is above max_tokens {max_tokens}")
    count = token_counter(tokenizer)
    columns = {
        "prompt": pl.String,
        "prompt_tokens": pl.Int64,
        "prompt_kind": pl.String,
        "context_files": pl.List(pl.String),
        "context_contents": pl.List(pl.String),
        "distractor_files": pl.List(pl.String),
        "gold_tokens": pl.Int64,
        "repo_error": pl.String,
        "reason": pl.String,
    }
    records = []
    ranked_column = (
        pl.col(distractor_column) if distractor_column in df.columns else pl.lit(None)
    ).alias("__ranked")
    rows = df.select(id_column, "problem_statement", patch_column, ranked_column).iter_rows()
    for snap, (uid, issue, patch, ranked) in zip(snapshots(df, repos_dir), rows, strict=True):
        draw = random.Random(f"{seed}:{uid}").random()
        kind = "mixed" if draw < mixed_fraction else "gt_only"
        if isinstance(snap, str):
            record = {"reason": "repo_unavailable", "repo_error": snap}
        else:
            record = _instance_prompt(
                snap,
                str(uid),
                issue,
                patch,
                ranked,
                kind,
                count=count,
                max_tokens=max_tokens,
                min_tokens=min_tokens,
                max_files=max_files,
                seed=seed,
                template=template,
            )
        records.append({**dict.fromkeys(columns), **record, "prompt_kind": kind})
    measured = df.with_columns(
        *[pl.Series(name, [r[name] for r in records], dtype=t) for name, t in columns.items()],
        pl.lit(max_tokens).alias("token_budget"),
    )
    result = decide(measured, "reason", drop_only=("repo_error",))
    result.stats.update(
        by_kind=count_by(result.kept, "prompt_kind"), max_tokens=max_tokens, min_tokens=min_tokens
    )
    return result
