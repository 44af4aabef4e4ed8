"""math_sft_s2: math SFT responses for stage 2 (32K): the stage-1 prompts minus easy ones.

Following the Cascade recipe (Math S2: DeepSeek-R1-0528, 163K prompts, 1.88M samples, ~11.5
responses per prompt): the stage-1 prompts lose those the stage-1 teacher answered in fewer
than 2K tokens on average ("easy removal by length"), and a newer teacher answers the rest k
times in thinking mode with a 32K budget, with the same response filters as stage 1.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from builders import math_sft
from builders.runner import Build
from curation.difficulty import easy_by_length, measure_pass_rates
from curation.generate.samples import Sampler
from lake.steps import Step

NAME = "math_sft_s2"
DOMAIN = "math"
OUTPUT_KIND = "generic"
DEFAULTS: dict[str, Any] = {
    **math_sft.DEFAULTS,
    "length_teacher": math_sft.DEFAULTS["teacher"],
    "min_teacher_tokens": 2048,
    "teacher": {
        **math_sft.DEFAULTS["teacher"],
        "model": "deepseek-ai/DeepSeek-R1-0528",
        "k": 12,
        "max_new_tokens": 32768,
    },
    "max_response_tokens": 32768,
}


def steps(params: dict[str, Any], build: Build) -> list[Step]:
    """The recipe, top to bottom."""
    return [
        *math_sft.prompt_cleaning(params, build),
        Step(
            "length_teacher",
            measure_pass_rates,
            {
                "lake": build.lake,
                "label": "length_teacher",
                "sampler": Sampler.from_params(params["length_teacher"]),
                "verifier": "math",
            },
            scope="rows",
        ),
        Step(
            "easy_by_length",
            easy_by_length,
            {"label": "length_teacher", "min_tokens": params["min_teacher_tokens"]},
            scope="rows",
        ),
        *math_sft.teacher_responses(params, build),
    ]


def toy_profile(workdir: Path) -> tuple[list[str], dict[str, Any]]:
    """The toy world: prompts the strong model answers at length; the weak model measures."""
    sources, params = math_sft.toy_profile(workdir)
    from builders.worlds.toy_profile import toy_setup

    toy = toy_setup(workdir)
    return sources, {
        **params,
        "length_teacher": toy.sampler("strong", k=2),
        "min_teacher_tokens": 20,  # one-digit sums are answered in fewer tokens: the easy ones
    }


PROFILES = {"toy": toy_profile}
