"""math_rl_v2: prompts for the Math RL stage.

Following the Cascade recipe's Math RL data section (AceReason-Math, 49K -> 14K in the
paper): competition math prompts whose answers a rule verifier can check, so we drop what
cannot be verified (multiple choice, proofs, several questions at once, figures we do not
have, non-English text, missing or unparseable reference answers); decontaminate against the
evaluation benchmarks with word 9-grams; remove exact and near duplicates, keeping template
siblings that ask different questions; keep only problems whose reference a teacher's
majority answer agrees with (noisy sources: DeepSeek-R1, up to 8 attempts); drop what a
7B-class weak model already solves in >= 75% of 16 samples; and keep the RL prompts disjoint
from the math SFT sets.

Each model is a parameter (`teacher`, `weak`: an HF id or local path on vLLM or
transformers, or a model behind an OpenAI-compatible endpoint); set one to `none` to skip
its step (the demo profile has no model).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from builders.cleaning import cleaning, disjoint_from_sft
from builders.runner import Build
from curation.difficulty import difficulty_filter, majority_answer_check, measure_pass_rates
from curation.generate.samples import Sampler
from curation.math.filters import DEFAULT_RULES, filter_math_rl_prompts
from lake.steps import Step, skipped_step

NAME = "math_rl_v2"
DOMAIN = "math"
BOXED = "Please reason step by step, and put your final answer within \\boxed{}."
DEFAULTS: dict[str, Any] = {
    "rules": list(DEFAULT_RULES),
    "benchmarks": ["aime24", "aime25", "math500", "amc", "minerva", "olympiadbench"],
    "benchmark_dir": "",
    "ngram": 9,
    "decontam_rule": "boilerplate-aware",
    "near_dup_threshold": 0.6,
    "num_perm": 112,
    "teacher": {
        "model": "deepseek-ai/DeepSeek-R1",
        "backend": "vllm",
        "k": 8,
        "temperature": 0.6,
        "top_p": 0.95,
        "max_new_tokens": 32768,
        "system_prompt": BOXED,
    },
    "weak": {
        "model": "nvidia/AceReason-Nemotron-7B",
        "backend": "vllm",
        "k": 16,
        "temperature": 0.6,
        "top_p": 0.95,
        "max_new_tokens": 32768,
        "system_prompt": BOXED,
    },
    "too_easy_at": 0.75,
    "sft_datasets": ["math_sft"],
    "on_error": "raise",
}


def steps(params: dict[str, Any], build: Build) -> list[Step]:
    """The recipe, top to bottom."""
    recipe = [
        Step("rule_filters", filter_math_rl_prompts, {"rules": params["rules"]}, scope="rows"),
        *cleaning(params, build),
    ]
    if params["teacher"]:
        recipe.append(
            Step(
                "majority_answer",
                majority_answer_check,
                {"lake": build.lake, "sampler": Sampler.from_params(params["teacher"])},
                scope="rows",
            )
        )
    else:
        recipe.append(skipped_step("majority_answer", "teacher is none"))
    if params["weak"]:
        weak = Sampler.from_params(params["weak"])
        recipe += [
            Step(
                "weak_pass_rate",
                measure_pass_rates,
                {"lake": build.lake, "label": "weak", "sampler": weak, "verifier": "math"},
                scope="rows",
            ),
            Step(
                "too_easy",
                difficulty_filter,
                {"easy_label": "weak", "easy_at_least": params["too_easy_at"]},
                scope="rows",
            ),
        ]
    else:
        recipe += [
            skipped_step("weak_pass_rate", "weak is none"),
            skipped_step("too_easy", "weak is none"),
        ]
    return [*recipe, *disjoint_from_sft(params, build)]


def demo_profile(workdir: Path) -> tuple[list[str], dict[str, Any]]:
    """The bundled demo: the project's own generated corpus and demo benchmark."""
    from builders.worlds.demo_corpus import write_demo_corpus

    files = write_demo_corpus(workdir / "demo")
    no_models = {"teacher": None, "weak": None, "sft_datasets": []}
    return [str(p) for p in files.sources], {"benchmarks": [str(files.benchmark)], **no_models}


def toy_profile(workdir: Path) -> tuple[list[str], dict[str, Any]]:
    """The toy world: column-arithmetic prompts; the strong toy model is the teacher and the
    weak one measures difficulty (their pass rates are real: they generate every answer)."""
    from builders.worlds.toy_profile import toy_setup

    toy = toy_setup(workdir)
    return [str(toy.rl_prompts)], {
        "benchmarks": [str(toy.eval_file)],
        "teacher": toy.sampler("strong", k=4),
        "weak": toy.sampler("weak", k=8),
        "sft_datasets": [],
    }


def toy_heldout_profile(workdir: Path) -> tuple[list[str], dict[str, Any]]:
    """The same recipe on toy prompts no other split uses (the toy cascade's held-out set)."""
    from builders.worlds.toy_profile import toy_setup

    sources, params = toy_profile(workdir)
    toy = toy_setup(workdir)
    return [str(toy.heldout_prompts)], {**params, "benchmarks": [str(toy.rl_prompts)]}


PROFILES = {"demo": demo_profile, "toy": toy_profile, "toy-heldout": toy_heldout_profile}
