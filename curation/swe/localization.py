"""File-level localization: issue + repository tree -> a ranked list of files to edit.

Cascade's Agentless localization is file-level only. The prompt holds the issue and the
repository's file paths (no contents); the response ends with the ranked paths in a code
block. A response is kept for SFT when its top `top_n` files hold every file the gold patch
changes (recall = 1.0).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path

import polars as pl

from curation.swe.repository import RepositoryError, Snapshot, patch_files, repo_dir
from curation.verify.result import final_answer_part
from lake.operators import decide
from lake.steps import StepResult

LOCALIZATION_TEMPLATE = """You are given a GitHub issue and the file paths of the repository it was \
reported against. Name the files that must be edited to resolve the issue.

### Issue
{issue}

### Repository files
{tree}

Answer with at most {top_n} full file paths, one per line, most important first, inside a \
single code block:
```
path/to/first.py
path/to/second.py
```"""

_FENCE = re.compile(r"```[^\n]*\n(.*?)```", re.DOTALL)
_BULLET = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+")


def repository_tree(paths: Sequence[str], suffixes: Sequence[str] = (".py",)) -> str:
    """The repository's file paths, one per line, sorted (only `suffixes` when given)."""
    chosen = [p for p in paths if not suffixes or p.endswith(tuple(suffixes))]
    return "\n".join(sorted(chosen))


def snapshots(df: pl.DataFrame, repos_dir: str | Path) -> list[Snapshot | str]:
    """Per row the repository snapshot at its base commit, or why there is none."""
    cache: dict[tuple[str, str], Snapshot | str] = {}
    out: list[Snapshot | str] = []
    for repo, commit in df.select("repo", "base_commit").iter_rows():
        key = (repo, commit)
        if key not in cache:
            path = repo_dir(repos_dir, repo)
            if path is None:
                cache[key] = f"no clone of {repo} under {repos_dir}"
            else:
                snapshot = Snapshot(path, commit)
                try:
                    snapshot.paths  # noqa: B018 - resolve the commit now, fail here
                    cache[key] = snapshot
                except RepositoryError as exc:
                    cache[key] = str(exc)
        out.append(cache[key])
    return out


def build_localization_prompts(
    df: pl.DataFrame,
    *,
    repos_dir: str | Path,
    top_n: int = 5,
    tree_suffixes: Sequence[str] = (".py",),
    template: str = LOCALIZATION_TEMPLATE,
) -> StepResult:
    """Add `prompt` (issue + repository tree) and `repo_files` (paths in the tree).

    Instances whose repository clone or base commit is missing are dropped with reason
    `repo_unavailable` and the error in `repo_error`.
    """
    prompts: list[str | None] = []
    sizes: list[int | None] = []
    errors: list[str | None] = []
    for snap, issue in zip(
        snapshots(df, repos_dir), df.get_column("problem_statement").to_list(), strict=True
    ):
        if isinstance(snap, str):
            prompts.append(None)
            sizes.append(None)
            errors.append(snap)
            continue
        tree = repository_tree(snap.paths, tree_suffixes)
        prompts.append(template.format(issue=issue, tree=tree, top_n=top_n))
        sizes.append(tree.count("\n") + 1 if tree else 0)
        errors.append(None)
    measured = df.with_columns(
        pl.Series("prompt", prompts, dtype=pl.String),
        pl.Series("repo_files", sizes, dtype=pl.Int64),
        pl.Series("repo_error", errors, dtype=pl.String),
    )
    missing = pl.col("repo_error").is_not_null()
    return decide(
        measured,
        pl.when(missing).then(pl.lit("repo_unavailable")),
        drop_only=("repo_error",),
        counts=("rows_in", "dropped"),
    )


def parse_ranked_files(response: str, top_n: int | None = None) -> list[str]:
    """The ranked paths of a localization response: the lines of the last code block after
    `</think>` (the whole answer when there is none), bullets, numbering and backquotes
    removed, duplicates dropped, the first `top_n` kept.

    >>> parse_ranked_files("<think>x</think>Files:\\n```\\n1. pkg/a.py\\n- `pkg/b.py`\\npkg/a.py\\n```")
    ['pkg/a.py', 'pkg/b.py']
    """
    answer = final_answer_part(response)
    blocks = _FENCE.findall(answer)
    body = blocks[-1] if blocks else answer
    paths = []
    for line in body.splitlines():
        text = _BULLET.sub("", line).strip().strip("`'\"").strip()
        if text and " " not in text and ("/" in text or "." in text):
            paths.append(text.removeprefix("./"))
    ranked = list(dict.fromkeys(paths))
    return ranked[:top_n] if top_n else ranked


def filter_localization(
    df: pl.DataFrame,
    *,
    response_column: str = "response",
    patch_column: str = "patch",
    top_n: int = 5,
    min_recall: float = 1.0,
) -> StepResult:
    """Keep responses whose top `top_n` files cover the gold patch's files.

    Every row gets `localized_files` (the parsed ranking), `gold_files` and
    `localization_recall` (gold files found / gold files); rows below `min_recall` are
    dropped with reason `incomplete_localization`.
    """
    ranked = [parse_ranked_files(r or "", top_n) for r in df.get_column(response_column).to_list()]
    gold = [patch_files(p or "") for p in df.get_column(patch_column).to_list()]
    recall = [
        (len(set(g) & set(r)) / len(g)) if g else None for r, g in zip(ranked, gold, strict=True)
    ]
    measured = df.with_columns(
        pl.Series("localized_files", ranked, dtype=pl.List(pl.String)),
        pl.Series("gold_files", gold, dtype=pl.List(pl.String)),
        pl.Series("localization_recall", recall, dtype=pl.Float64),
    )
    good = pl.col("localization_recall").fill_null(0.0) >= min_recall
    return decide(
        measured,
        pl.when(~good).then(pl.lit("incomplete_localization")),
        stats={"mean_recall": float(measured.get_column("localization_recall").mean() or 0.0)},
    )


def localize_files(
    df: pl.DataFrame,
    *,
    repos_dir: str | Path,
    sample: Callable[[pl.DataFrame], StepResult],
    top_n: int = 5,
    id_column: str = "uid",
    tree_suffixes: Sequence[str] = (".py",),
) -> StepResult:
    """Ask a localizer for each instance's ranked files; add them as `localized_files`.

    `sample` turns the frame of localization prompts into one response per row
    (`sample_responses` with k=1 and the localizer's parameters bound; its `prompt_id` is the
    instance's `id_column`). The RL recipe draws its distractor files from this ranking.
    Instances without a usable clone are dropped (`repo_unavailable`).
    """
    prompts = build_localization_prompts(
        df, repos_dir=repos_dir, top_n=top_n, tree_suffixes=tree_suffixes
    )
    responses = sample(prompts.kept.select(id_column, "prompt")).kept
    ranked = (
        responses.sort("sample_index")
        .unique("prompt_id", keep="first", maintain_order=True)
        .select(
            pl.col("prompt_id").alias(id_column),
            pl.col("response")
            .map_elements(lambda r: parse_ranked_files(r, top_n), return_dtype=pl.List(pl.String))
            .alias("localized_files"),
        )
    )
    kept = (
        prompts.kept.drop("prompt", "repo_files")
        .join(ranked, on=id_column, how="left")
        .with_columns(pl.col("localized_files").fill_null(pl.lit([], dtype=pl.List(pl.String))))
    )
    return StepResult(kept=kept, dropped=prompts.dropped, stats={"rows_in": df.height})
