"""The cleaning block recipes share: decontaminate -> exact dedup -> near dedup, then keep the
set disjoint from the SFT sets.

`cleaning` is the block as most recipes run it on `problem`; `disjoint_from_sft` is its last
step, apart so that a recipe can run it after model steps (math RL does). Recipes that put
other steps in between, or read other columns (whole preference pairs, chat contexts), name
the single steps. Each returns the step names and parameters recipes have always used, so a
build's rows, drops and funnel are the same as when every recipe spelled them out.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from builders.runner import Build
from curation.decontaminate import decontaminate
from curation.decontaminate.scan import decontamination_scope
from curation.dedup import exact_dedup, near_dedup
from curation.difficulty import disjoint_from
from lake.steps import Step, skipped_step


def cleaning(
    params: dict[str, Any],
    build: Build,
    *,
    rule: str | None = None,
    keep_apart: Sequence[str] | None = None,
) -> list[Step]:
    """Decontaminate against the recipe's `benchmarks` (word `ngram`-grams under `rule`,
    default the recipe's `decontam_rule`), then drop exact and near duplicates of `problem`.
    """
    benchmarks = build.load_benchmarks(params["benchmarks"], params["benchmark_dir"])
    return [
        decontamination(params, benchmarks, rule=rule),
        exact_dedup_step(),
        near_dedup_step(params, keep_apart=keep_apart),
    ]


def decontamination(
    params: dict[str, Any],
    benchmarks: list,
    *,
    rule: str | None = None,
    text_column: str | None = None,
) -> Step:
    """The `decontaminate` step: word `ngram`-grams shared with `benchmarks` (loaded by
    `Build.load_benchmarks`) under `rule` (default the recipe's `decontam_rule`)."""
    rule = rule or params["decontam_rule"]
    settings: dict[str, Any] = {"benchmarks": benchmarks, "n": params["ngram"], "rule": rule}
    if text_column:
        settings["text_column"] = text_column
    return Step("decontaminate", decontaminate, settings, scope=decontamination_scope(rule))


def exact_dedup_step(
    *,
    name: str = "exact_dedup",
    text_column: str | None = None,
    reference_columns: Sequence[str] | None = None,
) -> Step:
    """Exact dedup by `uid` over `text_column` (default `problem`); `reference_columns` say
    which rows count as having a reference (`()`: none, plain text dedup)."""
    settings: dict[str, Any] = {"text_column": text_column} if text_column else {}
    settings["id_column"] = "uid"
    if reference_columns is not None:
        settings["reference_columns"] = reference_columns
    return Step(name, exact_dedup, settings, partition="normalized_text")


def near_dedup_step(
    params: dict[str, Any],
    *,
    text_column: str | None = None,
    keep_apart: Sequence[str] | None = None,
) -> Step:
    """MinHash near dedup at the recipe's `near_dup_threshold` (with its `num_perm` when it
    names one, else near_dedup's default) over `text_column` (default `problem`);
    `keep_apart` names what must match for a merge (default near_dedup's)."""
    settings: dict[str, Any] = {"text_column": text_column} if text_column else {}
    settings["threshold"] = params["near_dup_threshold"]
    if "num_perm" in params:
        settings["num_perm"] = params["num_perm"]
    settings["id_column"] = "uid"
    if keep_apart is not None:
        settings["keep_apart"] = keep_apart
    return Step("near_dedup", near_dedup, settings, partition="lsh_bands")


def disjoint_from_sft(params: dict[str, Any], build: Build) -> list[Step]:
    """Drop prompts the recipe's `sft_datasets` already hold (none when it names none)."""
    if not params["sft_datasets"]:
        return [skipped_step("disjoint_from_sft", "sft_datasets is empty")]
    return [
        Step(
            "disjoint_from_sft",
            disjoint_from,
            {"lake": build.lake, "datasets": list(params["sft_datasets"])},
            partition="lsh_bands",
        )
    ]
