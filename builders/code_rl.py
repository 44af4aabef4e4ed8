"""code_rl: prompts for the Code RL stage.

Following the Cascade recipe's Code RL data section (AceReason-Nemotron coding corpus:
TACO, APPS, DeepCoder, ...; 9.8K prompts in Cascade 1): the reward is 1 only if every test
passes, so keep only problems a test run can judge (drop interactive and special-judge
problems, and problems without tests); decontaminate by word 9-grams, by original problem
URL and by benchmark tests; deduplicate by text and by behaviour; then measure difficulty:
drop what a 7B-class weak model solves 8/8 (nothing left to learn) and what the strong
teacher solves 0/8 (no signal, or broken tests).

`weak` and `strong` are model parameters (an HF id or local path on vLLM or transformers,
or a model behind an OpenAI-compatible endpoint); `none` skips that side of the filter.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from builders import code_sft
from builders.runner import Build
from curation.code.checkable import filter_checkable_by_tests
from curation.difficulty import difficulty_filter, measure_pass_rates
from curation.generate.samples import Sampler
from lake.steps import Step, skipped_step

NAME = "code_rl"
DOMAIN = "code"
PYTHON = (
    "Solve the problem in Python 3. Think it through, then give the complete program in a "
    "```python code block."
)
_SAMPLING = {
    "backend": "vllm",
    "mode": "think",
    "k": 8,
    "temperature": 0.6,
    "top_p": 0.95,
    "max_new_tokens": 32768,
    "system_prompt": PYTHON,
}
TEACHER_KEYS = (
    "teacher", "backend", "backend_options", "mode", "k", "max_new_tokens", "temperature",
    "top_p", "seed", "generations_table", "untested_keep",
)  # fmt: skip
"""code_sft's trace-sampling parameters, which Code RL does not use."""

DEFAULTS: dict[str, Any] = {
    **{k: v for k, v in code_sft.DEFAULTS.items() if k not in TEACHER_KEYS},
    "weak": {"model": "nvidia/AceReason-Nemotron-7B", **_SAMPLING},
    "strong": {"model": "deepseek-ai/DeepSeek-R1-0528", **_SAMPLING},
    "too_easy_at": 1.0,
    "too_hard_at": 0.0,
}


def steps(params: dict[str, Any], build: Build) -> list[Step]:
    """The recipe, top to bottom."""
    recipe = [
        *code_sft.problem_cleaning(params, build),
        Step("checkable_by_tests", filter_checkable_by_tests, scope="rows"),
    ]
    labels = {}
    for label in ("weak", "strong"):
        if params[label]:
            labels[label] = True
            recipe.append(
                Step(
                    f"{label}_pass_rate",
                    measure_pass_rates,
                    {
                        "lake": build.lake,
                        "label": label,
                        "sampler": Sampler.from_params(params[label]),
                        "verifier": "code",
                    },
                    scope="rows",
                )
            )
        else:
            recipe.append(skipped_step(f"{label}_pass_rate", f"{label} is none"))
    if labels:
        recipe.append(
            Step(
                "difficulty",
                difficulty_filter,
                {
                    "easy_label": "weak" if "weak" in labels else None,
                    "easy_at_least": params["too_easy_at"],
                    "hard_label": "strong" if "strong" in labels else None,
                    "hard_at_most": params["too_hard_at"],
                },
                scope="rows",
            )
        )
    else:
        recipe.append(skipped_step("difficulty", "weak and strong are none"))
    return recipe


def toy_profile(workdir: Path, split: str = "rl") -> tuple[list[str], dict[str, Any]]:
    """The toy world: tiny-function problems; the weak and strong toy coders measure them."""
    from builders.code_sft import toy_profile as code_sft_toy
    from builders.worlds.toy_profile import code_rows, toy_file, toy_models

    _, params = code_sft_toy(workdir)
    models = toy_models(workdir, "code")
    shared = {k: v for k, v in params.items() if k in DEFAULTS}
    return [toy_file(workdir, f"code_{split}", code_rows(split))], {
        **shared,
        "weak": models["weak"].sampler(k=8, max_new_tokens=96),
        "strong": models["strong"].sampler(k=8, max_new_tokens=96),
    }


def toy_heldout_profile(workdir: Path) -> tuple[list[str], dict[str, Any]]:
    """The same recipe on toy problems no other split uses (the toy cascade's held-out set)."""
    return toy_profile(workdir, "heldout")


PROFILES = {"toy": toy_profile, "toy-heldout": toy_heldout_profile}
