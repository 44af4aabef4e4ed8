"""rm_offtopic_pairs: synthetic reward-model pairs whose rejected answer is a good answer to
the wrong question.

Following the Cascade recipe's off-topic trick (the in-house part of the RM's 82K pairs):
decontaminate and dedup the prompts as for every set; a teacher (DeepSeek-V3) rewrites each
prompt into a closely related but different one whose correct answer looks like a correct
answer to the original (`rewrite_instruction`); an LLM judge answers YES/NO to "do these two
instructions ask the same thing?" (`judge_instruction`) and only rewrites judged different
are kept (YES: `judged_same`, with the verdict and reply as detail; anything else:
`unparseable_verdict`); then rejected = the strong model's (DeepSeek-V3-0324) answer to the
rewrite, chosen = the weak model's (DeepSeek-V3) answer to the original. One account swaps
which V3 version is strong and which weak; both are parameters.

Every model is a parameter (an HF id or local path on vLLM or transformers, or a served
name behind an OpenAI-compatible endpoint) and is sampled once per request (k=1); every
request and raw reply, the judge's included, is cached in `generations_table`. The parsed
verdict is a column of the output (`judge_verdict`) or the detail of the drop. Output rows
follow `schemas.preferences.PREFERENCE_PAIRS`, with method `off_topic_rewrite` and the
lineage columns rewrite, judge_verdict, chosen_model, rejected_model and the generation ids.
Prompts are single user turns (`problem`); the category is read from `category_field`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from builders.cleaning import cleaning
from builders.runner import Build, BuildError
from curation.generate.samples import Sampler
from curation.preferences import (
    JUDGE_INSTRUCTION,
    REWRITE_INSTRUCTION,
    judge_rewrites,
    offtopic_pairs,
    rewrite_prompts,
    select_pair_columns,
)
from lake.steps import Step

NAME = "rm_offtopic_pairs"
DOMAIN = "chat"
OUTPUT_KIND = "preference_pairs"
_ANSWERING = {"mode": "no_think", "k": 1, "temperature": 0.6, "top_p": 0.95}
DEFAULTS: dict[str, Any] = {
    "benchmarks": ["ifeval"],
    "benchmark_dir": "",
    "ngram": 9,
    "decontam_rule": "literal",
    "near_dup_threshold": 0.8,
    "num_perm": 112,
    "rewrite_instruction": REWRITE_INSTRUCTION,
    "judge_instruction": JUDGE_INSTRUCTION,
    "rewriter": {
        "model": "deepseek-ai/DeepSeek-V3",
        "backend": "vllm",
        **_ANSWERING,
        "max_new_tokens": 1024,
    },
    "judge": {
        "model": "deepseek-ai/DeepSeek-V3-0324",
        "backend": "vllm",
        "mode": "no_think",
        "k": 1,
        "temperature": 0.0,
        "max_new_tokens": 16,
    },
    "strong": {
        "model": "deepseek-ai/DeepSeek-V3-0324",
        "backend": "vllm",
        **_ANSWERING,
        "max_new_tokens": 8192,
    },
    "weak": {
        "model": "deepseek-ai/DeepSeek-V3",
        "backend": "vllm",
        **_ANSWERING,
        "max_new_tokens": 8192,
    },
    "category_field": "category",
    "generations_table": "rm_offtopic_generations",
    "on_error": "raise",
}
MODELS = ("rewriter", "judge", "strong", "weak")
TWO = ("original", "rewrite")


def steps(params: dict[str, Any], build: Build) -> list[Step]:
    """The recipe, top to bottom."""
    models = {name: _sampler(params, name) for name in MODELS}
    for key, names in (("rewrite_instruction", ("prompt",)), ("judge_instruction", TWO)):
        missing = [n for n in names if "{" + n + "}" not in params[key]]
        if missing:
            raise BuildError(f"{key} must contain {', '.join('{' + n + '}' for n in missing)}")
    table = {"lake": build.lake, "table": params["generations_table"]}
    return [
        *cleaning(params, build, keep_apart=("numbers",)),
        Step(
            "rewrite",
            rewrite_prompts,
            {**table, "sampler": models["rewriter"], "instruction": params["rewrite_instruction"]},
            scope="rows",
        ),
        Step(
            "judge_rewrite",
            judge_rewrites,
            {**table, "sampler": models["judge"], "instruction": params["judge_instruction"]},
            scope="rows",
        ),
        Step(
            "answer_pairs",
            offtopic_pairs,
            {
                **table,
                "strong": models["strong"],
                "weak": models["weak"],
                "category_field": params["category_field"],
            },
            scope="rows",
        ),
        Step("pair_columns", select_pair_columns, scope="rows"),
    ]


def _sampler(params: dict[str, Any], name: str) -> Sampler:
    if not params[name]:
        raise BuildError(f"rm_offtopic_pairs needs a {name} model; {name} is not set")
    try:
        sampler = Sampler.from_params(params[name])
    except ValueError as exc:
        raise BuildError(f"{name}: {exc}") from None
    if sampler.k != 1:
        raise BuildError(f"{name}: the off-topic recipe samples once per request; set {name}.k=1")
    return sampler


def toy_profile(workdir: Path) -> tuple[list[str], dict[str, Any]]:
    """The toy world: the general toy models rewrite each request to another subject, judge
    whether the two ask the same, and answer (the strong one the rewrite, the weak one the
    original)."""
    from builders.worlds.toy_profile import chat_sources, toy_models

    models = toy_models(workdir, "general")
    answer = {"k": 1, "mode": "no_think", "temperature": 0.6, "max_new_tokens": 64}
    return [chat_sources(workdir, "offtopic")], {
        "benchmarks": [chat_sources(workdir, "benchmark")],
        "rewriter": models["strong"].sampler(**answer),
        "judge": {**models["strong"].sampler(**answer), "temperature": 0.0, "max_new_tokens": 8},
        "strong": models["strong"].sampler(**answer),
        "weak": models["weak"].sampler(**answer),
    }


PROFILES = {"toy": toy_profile}
