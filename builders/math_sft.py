"""math_sft: math SFT responses for stage 1 (16K), from a thinking teacher.

Following the Cascade recipe's reasoning SFT data (Math S1: AceReason-Nemotron-1.1 prompts,
DeepSeek-R1, 353K prompts and 2.77M samples, ~7.8 responses per prompt): decontaminate the
prompts with the SFT rule (any shared word 9-gram with a benchmark item drops the sample),
remove exact and near duplicates, let the teacher answer each prompt k times in thinking
mode, and keep the responses that are complete (not cut at the length cap), fit the stage's
sequence length, and agree with the reference answer where there is one (ground-truth
mismatch drops); prompts without a reference keep their longest traces.

One output row per response: `problem`, `reasoning`, `final_answer`, `mode` (think), with
the prompt's `uid` as `prompt_uid`, ready for a training manifest's SFT stage
(`prompt_column: problem`, `reasoning_column: reasoning`, `response_column: final_answer`,
`mode_column: mode`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from builders.cleaning import cleaning
from builders.runner import Build
from curation.difficulty import response_filters
from curation.generate.samples import Sampler, sample_responses
from lake.steps import Step

NAME = "math_sft"
DOMAIN = "math"
OUTPUT_KIND = "generic"
BOXED = "Please reason step by step, and put your final answer within \\boxed{}."
DEFAULTS: dict[str, Any] = {
    "benchmarks": ["aime24", "aime25", "math500", "amc", "minerva", "olympiadbench", "gsm8k"],
    "benchmark_dir": "",
    "ngram": 9,
    "near_dup_threshold": 0.6,
    "teacher": {
        "model": "deepseek-ai/DeepSeek-R1",
        "backend": "vllm",
        "mode": "think",
        "k": 8,
        "temperature": 0.6,
        "top_p": 0.95,
        "max_new_tokens": 16384,
        "system_prompt": BOXED,
    },
    "max_response_tokens": 16384,
    "longest_without_reference": 4,
    "on_error": "raise",
}


def steps(params: dict[str, Any], build: Build) -> list[Step]:
    """The recipe, top to bottom."""
    return [
        *prompt_cleaning(params, build),
        *teacher_responses(params, build),
    ]


def prompt_cleaning(params: dict[str, Any], build: Build) -> list[Step]:
    """SFT decontamination (any shared 9-gram), then exact and near dedup."""
    return cleaning(params, build, rule="literal")


def teacher_responses(params: dict[str, Any], build: Build) -> list[Step]:
    """k thinking responses per prompt, then the responses an SFT stage may train on."""
    return [
        Step(
            "teacher_responses",
            sample_responses,
            {"lake": build.lake, "sampler": Sampler.from_params(params["teacher"])},
            scope="rows",
            fan_out=True,
        ),
        Step(
            "response_filters",
            response_filters,
            {
                "max_tokens": params["max_response_tokens"],
                "verifier": "math",
                "longest_without_reference": params["longest_without_reference"],
            },
            partition="prompt_uid",
        ),
    ]


def toy_profile(workdir: Path) -> tuple[list[str], dict[str, Any]]:
    """The toy world: column-arithmetic prompts, the strong toy model as the teacher."""
    from builders.worlds.toy_profile import toy_setup

    toy = toy_setup(workdir)
    return [str(toy.sft_prompts)], {
        "benchmarks": [str(toy.eval_file)],
        "teacher": toy.sampler("strong", k=4),
        "max_response_tokens": 96,
    }


PROFILES = {"toy": toy_profile}
