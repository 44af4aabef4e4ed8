"""sft_general: general-domain SFT conversations with parallel thinking and non-thinking replies.

Following the Cascade recipe's general-domain SFT data (chat, QA, creative writing, safety,
instruction following, role-play; responses regenerated because the sources' own were short,
uneven and inconsistent in style): every prompt gets parallel replies from a thinking teacher
(DeepSeek-R1-0528) and a non-thinking teacher (DeepSeek-V3-0324), several per prompt with
different seeds for scarce categories (instruction following, creative writing); replies cut
at the length cap, over the stage's length, in the wrong mode, or disagreeing with a
verifiable reference (an option letter or a math answer: ground-truth mismatch) are dropped,
and so are the replies of a prompt left without one of its two modes; then multi-turn
synthesis: a second turn asking to rewrite a creative-writing answer under a new
requirement, answered by the teacher, and random concatenation of unrelated single-turn
samples into one conversation.

One row per conversation: `messages` (JSON list of {role, content, reasoning?}) and `mode`
(think | no_think), for an SFT stage with `messages_column: messages`, `mode_column: mode`.
A prompt's category is read from `category_field` (a column, or a key of the source's
metadata). Not done here: keeping high-quality human responses as they are, and the
auxiliary-model cross-check for prompts without ground truth (the recipe does not say how).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from builders.runner import Build, BuildError
from curation.dedup import exact_dedup
from curation.difficulty import response_filters
from curation.general.conversations import (
    add_rewrite_turns,
    as_conversations,
    concatenate_conversations,
    parallel_responses,
    reply_mode_check,
    require_parallel_modes,
)
from curation.general.ground_truth import ground_truth_check
from curation.generate.samples import Sampler
from lake.steps import Step

NAME = "sft_general"
DOMAIN = "chat"
OUTPUT_KIND = "generic"
DEFAULTS: dict[str, Any] = {
    "think_teacher": {
        "model": "deepseek-ai/DeepSeek-R1-0528",
        "backend": "vllm",
        "mode": "think",
        "k": 1,
        "temperature": 0.6,
        "top_p": 0.95,
        "max_new_tokens": 16384,
    },
    "no_think_teacher": {
        "model": "deepseek-ai/DeepSeek-V3-0324",
        "backend": "vllm",
        "mode": "no_think",
        "k": 1,
        "temperature": 0.6,
        "top_p": 0.95,
        "max_new_tokens": 16384,
    },
    "category_field": "category",
    "scarce_categories": ["instruction_following", "creative_writing"],
    "scarce_k": 3,
    "max_response_tokens": 16384,
    "mcq_letters": "ABCDEFGHIJ",
    "rewrite_categories": ["creative_writing"],
    "rewrite_share": 0.5,
    "rewrite_requirements": [
        "Rewrite your previous answer so that it is half as long.",
        "Rewrite your previous answer in a more formal tone.",
        "Rewrite your previous answer for a ten-year-old reader.",
        "Rewrite your previous answer as a poem.",
        "Rewrite your previous answer in the first person.",
        "Rewrite your previous answer with a surprising ending.",
    ],
    "concat_share": 0.1,
    "concat_size": 2,
    "seed": 0,
    "generations_table": "sft_general_generations",
    "on_error": "raise",
}
"""Shares and rewrite requirements are our choices; the recipe does not report them."""


def steps(params: dict[str, Any], build: Build) -> list[Step]:
    """The recipe, top to bottom."""
    think = _teacher(params, "think_teacher", "think")
    no_think = _teacher(params, "no_think_teacher", "no_think")
    table = params["generations_table"]
    recipe = [
        Step("exact_dedup", exact_dedup, {"id_column": "uid"}, partition="normalized_text"),
        Step(
            "parallel_responses",
            parallel_responses,
            {
                "lake": build.lake,
                "samplers": [think, no_think],
                "scarce_categories": list(params["scarce_categories"]),
                "scarce_k": int(params["scarce_k"]),
                "category_field": params["category_field"],
                "table": table,
            },
            scope="rows",
            fan_out=True,
        ),
        Step(
            "response_filters",
            response_filters,
            {"max_tokens": params["max_response_tokens"], "verifier": None},
            scope="rows",
        ),
        Step("reply_mode", reply_mode_check, scope="rows"),
        Step("ground_truth", ground_truth_check, {"letters": params["mcq_letters"]}, scope="rows"),
        Step("parallel_pairs", require_parallel_modes, partition="prompt_uid"),
        Step("conversations", as_conversations, scope="rows"),
    ]
    if float(params["rewrite_share"]) > 0:
        recipe.append(
            Step(
                "rewrite_turns",
                add_rewrite_turns,
                {
                    "lake": build.lake,
                    "samplers": [think, no_think],
                    "requirements": list(params["rewrite_requirements"]),
                    "share": float(params["rewrite_share"]),
                    "categories": list(params["rewrite_categories"]),
                    "category_field": params["category_field"],
                    "seed": int(params["seed"]),
                    "table": table,
                    "max_tokens": params["max_response_tokens"],
                },
                scope="rows",
            )
        )
    if float(params["concat_share"]) > 0:
        recipe.append(
            Step(
                "concatenate",
                concatenate_conversations,
                {
                    "share": float(params["concat_share"]),
                    "size": int(params["concat_size"]),
                    "seed": int(params["seed"]),
                },
            )
        )
    return recipe


def _teacher(params: dict[str, Any], name: str, mode: str) -> Sampler:
    settings = params[name]
    if not settings:
        raise BuildError(f"{name} is required: every general prompt gets a {mode} reply")
    sampler = Sampler.from_params({"mode": mode, **settings})
    if sampler.mode != mode:
        raise BuildError(
            f"{name} must sample in mode {mode!r}, but its settings say {sampler.mode!r}"
        )
    return sampler


def toy_profile(workdir: Path) -> tuple[list[str], dict[str, Any]]:
    """The toy world: chat requests and IF requests, the general toy teacher in both modes."""
    from builders.worlds.toy_profile import general_sft_sources, toy_models

    strong = toy_models(workdir, "general")["strong"]
    return general_sft_sources(workdir), {
        "think_teacher": strong.sampler(k=1, mode="think", max_new_tokens=128),
        "no_think_teacher": strong.sampler(k=1, mode="no_think", max_new_tokens=128),
        "scarce_k": 2,
        "max_response_tokens": 128,
        "rewrite_share": 0.1,
    }


PROFILES = {"toy": toy_profile}
