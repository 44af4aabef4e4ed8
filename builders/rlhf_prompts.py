"""rlhf_prompts: the RLHF stage's prompts, a subset of the reward model's preference prompts.

Following the Cascade recipe's RLHF data: only prompts from the reward model's own
preference data (prompts outside its distribution destabilize or collapse training), with
math and competitive-programming prompts excluded (leaving math in cost about 2 points on
AIME25), disjoint from the SFT prompts like every Cascade 1 RL set.

Sources are `preference_pairs` tables of the lake (built by `preference_pairs` or
`rm_offtopic_pairs`; several may be given): `--source preference_pairs_hs3 --source
rm_offtopic_pairs`. Their rows are ingested with `problem=prompt` (the final user turn) and
`source_id=prompt_uid` (the pair's source row); the steps lift the whole context back into
`messages`, collapse pairs that share a context into one prompt, exclude math and code
prompts by the source's category when it names one and else by content rules (the drop
detail keeps the evidence), decontaminate against the evaluation benchmarks (word 9-grams),
remove near duplicates, keep the set disjoint from the SFT sets, and optionally draw a seeded
subsample of `size` prompts.

Rows are prompts with `messages` (JSON turns ending with the user's), for an RL stage with
`messages_column: messages`; `category`, `pair_source` and `pair_method` say where each came
from.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from builders.cleaning import (
    decontamination,
    disjoint_from_sft,
    exact_dedup_step,
    near_dedup_step,
)
from builders.runner import Build
from curation.preferences import (
    CODE_RULES,
    MATH_RULES,
    exclude_math_and_code,
    prompts_from_pairs,
    subsample,
)
from curation.preferences.math_and_code import CODE_CATEGORIES, MATH_CATEGORIES
from lake.steps import Step

NAME = "rlhf_prompts"
DOMAIN = "chat"
OUTPUT_KIND = "prompts"
DEFAULTS: dict[str, Any] = {
    "mapping": {"problem": "prompt", "source_id": "prompt_uid"},
    "math_categories": list(MATH_CATEGORIES),
    "code_categories": list(CODE_CATEGORIES),
    "math_rules": list(MATH_RULES),
    "code_rules": list(CODE_RULES),
    "benchmarks": ["ifeval"],
    "benchmark_dir": "",
    "ngram": 9,
    "decontam_rule": "literal",
    "near_dup_threshold": 0.8,
    "num_perm": 112,
    "sft_datasets": ["sft_general"],
    "size": 0,
    "seed": 0,
    "on_error": "raise",
}
"""`size` 0 keeps every prompt. `benchmarks`: add the stage's chat evaluations (an
ArenaHard jsonl with a `problem` field, ...) by path."""


def steps(params: dict[str, Any], build: Build) -> list[Step]:
    """The recipe, top to bottom."""
    benchmarks = build.load_benchmarks(params["benchmarks"], params["benchmark_dir"])
    context = "context_text"
    recipe = [
        Step("prompts_from_pairs", prompts_from_pairs, scope="rows"),
        exact_dedup_step(name="same_prompt", text_column=context),
        Step(
            "exclude_math_and_code",
            exclude_math_and_code,
            {
                "math_categories": params["math_categories"],
                "code_categories": params["code_categories"],
                "math_rules": params["math_rules"],
                "code_rules": params["code_rules"],
            },
            scope="rows",
        ),
        decontamination(params, benchmarks, text_column=context),
        near_dedup_step(params, text_column=context, keep_apart=("numbers",)),
        *disjoint_from_sft(params, build),
    ]
    if params["size"]:
        recipe.append(
            Step("subsample", subsample, {"size": params["size"], "seed": params["seed"]})
        )
    return recipe


TOY_PAIR_TABLES = ["helpsteer3_pairs", "helpsteer2_pairs", "rm_offtopic_pairs"]
"""The toy lake's preference tables (built by `make toy-cascade` under these names)."""


def toy_profile(workdir: Path) -> tuple[list[str], dict[str, Any]]:
    """The toy world: the reward model's own preference tables, decontaminated against the
    held-out requests and disjoint from `sft_general`."""
    from builders.worlds.toy_profile import chat_sources

    return list(TOY_PAIR_TABLES), {"benchmarks": [chat_sources(workdir, "benchmark")]}


def toy_heldout_profile(workdir: Path) -> tuple[list[str], dict[str, Any]]:
    """The held-out requests' pairs table (`preference_pairs --profile toy-heldout --out
    helpsteer3_pairs_heldout`), kept apart from the training requests."""
    from builders.worlds.toy_profile import chat_sources

    return ["helpsteer3_pairs_heldout"], {
        "benchmarks": [chat_sources(workdir, "training_requests")]
    }


PROFILES = {"toy": toy_profile, "toy-heldout": toy_heldout_profile}
