"""Repair: `<think>` then `<solution>` with SEARCH/REPLACE edits, applied and scored.

A repair prompt holds the issue and the contents of the files to change. The response
reasons inside `<think>...</think>`, then gives its edits inside `<solution>...</solution>`,
each a `### path/to/file.py` line, then `<<<<<<< SEARCH`, the lines as they are, `=======`,
the lines as they should be, and `>>>>>>> REPLACE` (Agentless' format). The edits are
parsed and applied by `curation.verify.swe` (the same code scores SWE RL rollouts): here to
the files at the instance's base commit (each SEARCH text must be found; the first
occurrence is replaced), turned into a unified diff and scored against the gold patch with
`curation.verify.swe.patch_similarity` (1 = the same changes, 0 = no change, -1 = no usable
edit, else the similarity of the changed lines).

Buckets over the k responses of an instance (cascade-recipe.md 4): SFT when at least
`min_good` (4 of 8) have similarity > `threshold` (0.5); hard (for SWE RL) when not SFT and
at least one has similarity > 0; the SWE-Fixer rule keeps every response above the threshold.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Literal

import polars as pl

from curation.swe.localization import snapshots
from curation.swe.repository import patch_files
from curation.verify.swe import EditError, edits_patch, parse_repair, patch_similarity
from lake.operators import count_by, decide
from lake.steps import StepResult

REPAIR_TEMPLATE = """Resolve the GitHub issue below by editing the repository files shown.

### Issue
{issue}

### Files
{files}

First reason inside <think>...</think>. Then give every edit inside <solution>...</solution> \
as SEARCH/REPLACE blocks, each naming its file:
```python
### path/to/file.py
<<<<<<< SEARCH
exact lines to replace
=======
new lines
>>>>>>> REPLACE
```"""

Bucket = Literal["sft", "hard", "none"]


def render_files(files: Sequence[tuple[str, str]]) -> str:
    """Files for a prompt: each path as a heading, its contents in a fenced block."""
    return "\n\n".join(f"#### {path}\n```python\n{text.rstrip()}\n```" for path, text in files)


def build_repair_prompts(
    df: pl.DataFrame,
    *,
    repos_dir: str | Path,
    template: str = REPAIR_TEMPLATE,
    patch_column: str = "patch",
) -> StepResult:
    """Add `prompt` (issue + the gold patch's files at the base commit) and `context_files`.

    Files the gold patch creates are not shown (they do not exist yet). Dropped: instances
    whose clone or commit is missing (`repo_unavailable`) and whose gold files are all new
    (`no_context_files`).
    """
    prompts, contexts, errors = [], [], []
    rows = df.select("problem_statement", patch_column).iter_rows()
    for snap, (issue, patch) in zip(snapshots(df, repos_dir), rows, strict=True):
        if isinstance(snap, str):
            prompts.append(None)
            contexts.append(None)
            errors.append(("repo_unavailable", snap))
            continue
        files = snap.read_many(patch_files(patch))
        if not files:
            prompts.append(None)
            contexts.append(None)
            errors.append(("no_context_files", "every gold file is new at the base commit"))
            continue
        prompts.append(template.format(issue=issue, files=render_files(list(files.items()))))
        contexts.append(list(files))
        errors.append(None)
    measured = df.with_columns(
        pl.Series("prompt", prompts, dtype=pl.String),
        pl.Series("context_files", contexts, dtype=pl.List(pl.String)),
        pl.Series("__reason", [e[0] if e else None for e in errors], dtype=pl.String),
        pl.Series("repo_error", [e[1] if e else None for e in errors], dtype=pl.String),
    )
    return decide(measured, "__reason", drop_only=("repo_error",), counts=("rows_in", "dropped"))


def score_repairs(
    df: pl.DataFrame,
    *,
    repos_dir: str | Path,
    response_column: str = "response",
    patch_column: str = "patch",
) -> StepResult:
    """Measure every repair response; drops nothing (the buckets need all k).

    Adds `repair_edits` (number of blocks), `repair_patch` (the diff it makes),
    `repair_similarity` (see the module docstring; -1 when no edit can be read or applied,
    null when the gold patch itself is unusable) and `repair_error` (why, if it failed).
    """
    edits_n: list[int | None] = []
    patches: list[str | None] = []
    scores: list[float | None] = []
    errors: list[str | None] = []
    rows = df.select(response_column, patch_column).iter_rows()
    for snap, (response, gold) in zip(snapshots(df, repos_dir), rows, strict=True):
        if isinstance(snap, str):
            edits_n.append(None)
            patches.append(None)
            scores.append(None)
            errors.append(snap)
            continue
        try:
            edits = parse_repair(response or "")
        except EditError as exc:
            edits_n.append(None)
            patches.append(None)
            scores.append(-1.0)
            errors.append(str(exc))
            continue
        edits_n.append(len(edits))
        try:
            patch = edits_patch(snap.read_many({e.path for e in edits}), edits)
        except EditError as exc:
            patches.append(None)
            scores.append(-1.0)
            errors.append(str(exc))
            continue
        patches.append(patch)
        try:
            scores.append(patch_similarity(patch, gold))
            errors.append(None)
        except ValueError as exc:
            scores.append(None)
            errors.append(f"gold patch: {exc}")
    measured = df.with_columns(
        pl.Series("repair_edits", edits_n, dtype=pl.Int64),
        pl.Series("repair_patch", patches, dtype=pl.String),
        pl.Series("repair_similarity", scores, dtype=pl.Float64),
        pl.Series("repair_error", errors, dtype=pl.String),
    )
    stats = {
        "rows_in": df.height,
        "unusable": sum(s == -1.0 for s in scores),
        "mean_similarity": float(measured.get_column("repair_similarity").mean() or 0.0),
    }
    return StepResult(kept=measured, dropped=df.clear(), stats=stats)


def bucket_columns(group_column: str, threshold: float, min_good: int) -> list[pl.Expr]:
    """Per-instance counts over its responses' `repair_similarity`, and its bucket."""
    score = pl.col("repair_similarity").fill_null(-1.0)
    above = (score > threshold).sum().over(group_column)
    positive = (score > 0).sum().over(group_column)
    return [
        pl.len().over(group_column).cast(pl.Int64).alias("repair_k"),
        above.cast(pl.Int64).alias("repair_n_above"),
        positive.cast(pl.Int64).alias("repair_n_positive"),
        pl.when(above >= min_good)
        .then(pl.lit("sft"))
        .when(positive >= 1)
        .then(pl.lit("hard"))
        .otherwise(pl.lit("none"))
        .alias("repair_bucket"),
    ]


def select_sft_repairs(
    df: pl.DataFrame,
    *,
    group_column: str = "prompt_id",
    threshold: float = 0.5,
    min_good: int = 4,
    rule: Literal["cascade", "swe_fixer"] = "cascade",
) -> StepResult:
    """Keep repair responses for SFT by the bucket rule over each instance's responses.

    `cascade`: instances with >= `min_good` responses above `threshold` are the SFT bucket,
    and their responses above it are kept (others: `low_similarity`; every response of an
    instance outside the bucket: `not_sft_bucket`). `swe_fixer`: every response above the
    threshold is kept. Rows get `repair_k`, `repair_n_above`, `repair_n_positive` and
    `repair_bucket` (sft / hard / none), so the rule can be re-run in SQL.
    """
    if rule not in ("cascade", "swe_fixer"):
        raise ValueError(f"rule must be 'cascade' or 'swe_fixer', got {rule!r}")
    if "repair_similarity" not in df.columns:
        raise ValueError("select_sft_repairs needs repair_similarity: run score_repairs first")
    measured = df.with_columns(bucket_columns(group_column, threshold, min_good))
    good = pl.col("repair_similarity").fill_null(-1.0) > threshold
    if rule == "cascade":
        reason = (
            pl.when(pl.col("repair_bucket") != "sft")
            .then(pl.lit("not_sft_bucket"))
            .when(~good)
            .then(pl.lit("low_similarity"))
        )
    else:
        reason = pl.when(~good).then(pl.lit("low_similarity"))
    by_bucket = count_by(measured.unique(group_column), "repair_bucket")
    return decide(
        measured,
        reason,
        detail={"threshold": pl.lit(threshold), "rule": pl.lit(rule)},
        stats={"instances_by_bucket": by_bucket},
    )


def select_repair_bucket(df: pl.DataFrame, *, bucket: Bucket = "hard") -> StepResult:
    """Keep instances in `bucket` (measured by `measure_repair_buckets`); others are dropped
    with reason `repair_easy` (in the SFT bucket), `repair_unsolved` (no response above 0)
    or `repair_hard` (when selecting another bucket)."""
    if "repair_bucket" not in df.columns:
        raise ValueError("select_repair_bucket needs repair_bucket: run measure_repair_buckets")
    names = {"sft": "repair_easy", "hard": "repair_hard", "none": "repair_unsolved"}
    other = pl.col("repair_bucket") != bucket
    return decide(
        df,
        pl.when(other).then(pl.col("repair_bucket").replace_strict(names, return_dtype=pl.String)),
        counts=("rows_in", "rows_out"),
    )


def measure_repair_buckets(
    df: pl.DataFrame,
    *,
    repos_dir: str | Path,
    sample: Callable[[pl.DataFrame], StepResult],
    threshold: float = 0.5,
    min_good: int = 4,
    id_column: str = "uid",
) -> StepResult:
    """Per instance: k teacher repairs, scored, counted into its bucket (drops only instances
    without a usable repository).

    `sample` turns the frame of repair prompts into one row per response (`sample_responses`
    with the teacher's parameters bound; its `prompt_id` is the instance's `id_column`).
    Instances get `repair_k`, `repair_n_above`, `repair_n_positive`,
    `repair_best_similarity` and `repair_bucket`; the responses stay in the lake's
    generation table, where the sampling step cached them.
    """
    prompts = build_repair_prompts(df, repos_dir=repos_dir)
    responses = sample(prompts.kept.select(id_column, "prompt", "repo", "base_commit", "patch"))
    scored = score_repairs(responses.kept, repos_dir=repos_dir).kept
    counts = (
        scored.with_columns(bucket_columns("prompt_id", threshold, min_good))
        .group_by("prompt_id")
        .agg(
            pl.col("repair_k", "repair_n_above", "repair_n_positive", "repair_bucket").first(),
            pl.col("repair_similarity").max().alias("repair_best_similarity"),
        )
        .rename({"prompt_id": id_column})
    )
    measured = prompts.kept.join(counts, on=id_column, how="left").with_columns(
        pl.col("repair_k").fill_null(0),
        pl.col("repair_n_above").fill_null(0),
        pl.col("repair_n_positive").fill_null(0),
        pl.col("repair_bucket").fill_null("none"),
    )
    stats = {
        "rows_in": df.height,
        "responses": scored.height,
        "instances_by_bucket": dict(
            measured.group_by("repair_bucket").len().sort("repair_bucket").iter_rows()
        ),
        **{
            f"sample_{k}": v
            for k, v in responses.stats.items()
            if k in ("planned", "cached", "generated")
        },
    }
    return StepResult(kept=measured, dropped=prompts.dropped, stats=stats)
