"""preference_pairs: human preference pairs for the reward model.

Following the Cascade recipe's scalar reward model data (82K pairs: HelpSteer2 10K,
HelpSteer3 40K -> 36K after removing ties, the rest synthetic, see `rm_offtopic_pairs`):
read a human preference set in its own shape, make (prompt, chosen, rejected) pairs, drop
ties and malformed rows with the field at fault, drop pairs whose prompt shares a word 9-gram
with an evaluation benchmark, and drop exact and near duplicate pairs.

`format` names the shape (field names as on the Hugging Face Hub):

- `helpsteer3` (default): `context` (list of turns), `response1`, `response2`,
  `overall_preference` (-3..+3; negative = response 1 better; 0 = tie), `domain` (the
  pair's category). The prompt field is `context`: `mapping.problem=context` (the default).
- `helpsteer2`: one row per response with `prompt`, `response` and 0..4 ratings; the
  responses of one prompt are grouped and every two whose `attribute` rating differs make a
  pair (equal ratings: a tie). Set `format=helpsteer2 mapping.problem=prompt`.

One build reads one format; build each set into its own table (`--out`), a reward-model
stage lists them all. Dedup works on whole pairs (context + chosen + rejected): two pairs
of one prompt with different responses are different preferences and both stay.
Output rows follow `schemas.preferences.PREFERENCE_PAIRS`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from builders.cleaning import decontamination, exact_dedup_step, near_dedup_step
from builders.runner import Build, BuildError
from curation.preferences import (
    HELPSTEER2_ATTRIBUTES,
    group_rated_responses,
    pairs_from_ratings,
    pairs_from_signed_preferences,
    select_pair_columns,
)
from lake.steps import Step

NAME = "preference_pairs"
DOMAIN = "chat"
OUTPUT_KIND = "preference_pairs"
FORMATS = ("helpsteer3", "helpsteer2")
DEFAULTS: dict[str, Any] = {
    "format": "helpsteer3",
    "mapping": {"problem": "context"},
    "attribute": "helpfulness",
    "benchmarks": ["ifeval"],
    "benchmark_dir": "",
    "ngram": 9,
    "decontam_rule": "literal",
    "near_dup_threshold": 0.9,
    "num_perm": 112,
    "on_error": "raise",
}
"""`attribute`: the HelpSteer2 rating that decides a pair. `benchmarks`: add the RLHF
stage's chat evaluations (an ArenaHard jsonl with a `problem` field, ...) by path."""


def steps(params: dict[str, Any], build: Build) -> list[Step]:
    """The recipe, top to bottom."""
    if params["format"] not in FORMATS:
        raise BuildError(f"unknown format {params['format']!r}; formats: {', '.join(FORMATS)}")
    if params["attribute"] not in HELPSTEER2_ATTRIBUTES:
        raise BuildError(
            f"unknown attribute {params['attribute']!r}; one of {', '.join(HELPSTEER2_ATTRIBUTES)}"
        )
    benchmarks = build.load_benchmarks(params["benchmarks"], params["benchmark_dir"])
    return [
        *human_pairs(params),
        decontamination(params, benchmarks, text_column="context_text"),
        exact_dedup_step(text_column="pair_text", reference_columns=()),
        near_dedup_step(params, text_column="pair_text", keep_apart=()),
        Step("pair_columns", select_pair_columns, scope="rows"),
    ]


def human_pairs(params: dict[str, Any]) -> list[Step]:
    """The format's pairs: one per HelpSteer3 row, or per two rated HelpSteer2 responses."""
    field = (params.get("mapping") or {}).get("problem")
    if params["format"] == "helpsteer3":
        return [
            Step(
                "signed_preference_pairs",
                pairs_from_signed_preferences,
                {"context_name": field},
                scope="rows",
            )
        ]
    attribute = {"attribute": params["attribute"]}
    return [
        Step(
            "group_by_prompt",
            group_rated_responses,
            {**attribute, "prompt_name": field},
            partition="prompt",
        ),
        Step("rating_pairs", pairs_from_ratings, attribute, scope="rows", fan_out=True),
    ]


def toy_profile(workdir: Path) -> tuple[list[str], dict[str, Any]]:
    """The toy world: HelpSteer3-shaped pairs, on-topic replies preferred to off-topic ones
    (a tenth are ties), decontaminated against the RLHF stage's held-out requests."""
    from builders.worlds.toy_profile import chat_sources

    return [chat_sources(workdir, "helpsteer3")], {
        "benchmarks": [chat_sources(workdir, "benchmark")]
    }


def toy_helpsteer2_profile(workdir: Path) -> tuple[list[str], dict[str, Any]]:
    """The toy world in HelpSteer2's shape: rated responses, two per request."""
    from builders.worlds.toy_profile import chat_sources

    return [chat_sources(workdir, "helpsteer2")], {
        "format": "helpsteer2",
        "mapping": {"problem": "prompt"},
        "benchmarks": [chat_sources(workdir, "benchmark")],
    }


def toy_heldout_profile(workdir: Path) -> tuple[list[str], dict[str, Any]]:
    """Pairs of the held-out requests, for the RLHF stage's held-out prompts."""
    from builders.worlds.toy_profile import chat_sources

    return [chat_sources(workdir, "heldout")], {
        "benchmarks": [chat_sources(workdir, "training_requests")]
    }


PROFILES = {
    "toy": toy_profile,
    "toy-helpsteer2": toy_helpsteer2_profile,
    "toy-heldout": toy_heldout_profile,
}
