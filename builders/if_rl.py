"""if_rl: prompts for IF-RL sub-stage 1, general prompts with verifiable IFEval-taxonomy constraints.

Following the Cascade recipe's IF-RL data (Llama-Nemotron IF prompts with 1-10 IFEval-taxonomy
constraints; LMSYS-Chat-1M prompts with IFEval-taxonomy constraints attached): decontaminate
the general prompts against IFEval with word 9-grams, remove exact and near duplicates, keep
them disjoint from the general SFT prompts, then attach 1-10 instructions of the IFEval
taxonomy to each, never two that contradict each other, and each set checked to be
satisfiable under the IF verifier that rewards the RL stage. (`taxonomy=iftrain` attaches
the IF-RLVR constraints instead: that is `if_rl_ifbench`, sub-stage 2.) Decontamination, dedup and
disjointness look at the prompt as written, before instructions are attached: IFEval's own
items carry the same instruction wording, which would otherwise match every row.

The recipe's IF-RL filters at batch level during RL (groups all right or all wrong carry no
gradient), so a pass-rate filter here is optional: set `policy` to a model (an HF id, a local
path, or a model behind an OpenAI-compatible endpoint) to drop prompts it always or never
satisfies.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from builders.cleaning import cleaning, disjoint_from_sft
from builders.runner import Build
from curation.difficulty import difficulty_filter
from curation.generate.samples import Sampler
from curation.instructions import attach_instructions, measure_instruction_pass_rates
from lake.steps import Step, skipped_step

NAME = "if_rl"
DOMAIN = "if"
OUTPUT_KIND = "prompts"
DEFAULTS: dict[str, Any] = {
    "benchmarks": ["ifeval"],
    "benchmark_dir": "",
    "ngram": 9,
    "decontam_rule": "boilerplate-aware",
    "near_dup_threshold": 0.6,
    "num_perm": 112,
    "sft_datasets": ["sft_general"],
    "taxonomy": "ifeval",
    "instructions_per_prompt": [1, 10],
    "instruction_ids": [],
    "max_prompt_words": 1024,
    "seed": 0,
    "policy": None,
    "too_easy_at": 1.0,
    "too_hard_at": 0.0,
    "generations_table": "if_rl_generations",
    "on_error": "raise",
}
"""`instruction_ids` empty = every type of the taxonomy (IFEval's 25); `policy` None = no
pass-rate step (else a sampler's settings: model, backend, k, temperature, ...)."""


def steps(params: dict[str, Any], build: Build) -> list[Step]:
    """The recipe, top to bottom."""
    recipe = [
        *cleaning(params, build),
        *disjoint_from_sft(params, build),
        Step(
            "attach_instructions",
            attach_instructions,
            {
                "per_prompt": [int(n) for n in params["instructions_per_prompt"]],
                "taxonomy": params["taxonomy"],
                "seed": int(params["seed"]),
                "instruction_ids": list(params["instruction_ids"]) or None,
                "max_prompt_words": params["max_prompt_words"],
            },
            scope="rows",
        ),
    ]
    if params["policy"]:
        recipe += [
            Step(
                "policy_pass_rate",
                measure_instruction_pass_rates,
                {
                    "lake": build.lake,
                    "label": "policy",
                    "sampler": Sampler.from_params(params["policy"]),
                    "generations_table": params["generations_table"],
                },
                scope="rows",
            ),
            Step(
                "difficulty",
                difficulty_filter,
                {
                    "easy_label": "policy",
                    "easy_at_least": params["too_easy_at"],
                    "hard_label": "policy",
                    "hard_at_most": params["too_hard_at"],
                },
                scope="rows",
            ),
        ]
    else:
        recipe += [
            skipped_step("policy_pass_rate", "policy is none"),
            skipped_step("difficulty", "policy is none"),
        ]
    return recipe


def toy_profile(workdir: Path, split: str = "rl") -> tuple[list[str], dict[str, Any]]:
    """The toy world's short requests ("Compose a text on the otter.", `builders.worlds.toy_domains`)
    with 1-2 easy constraints, no teacher or policy model; decontaminated against the held-out
    requests (`--set sft_datasets=sft_general` keeps them disjoint from a toy SFT set too)."""
    from builders.worlds.toy_domains import toy_instructions
    from builders.worlds.toy_profile import if_sources

    return [if_sources(workdir, split)], {
        "benchmarks": [if_sources(workdir, "heldout" if split != "heldout" else "rl")],
        "near_dup_threshold": 0.95,  # one template's prompts differ by a word or two only
        "sft_datasets": [],
        "instructions_per_prompt": [1, 2],
        "instruction_ids": list(toy_instructions("ifeval")),
    }


def toy_heldout_profile(workdir: Path) -> tuple[list[str], dict[str, Any]]:
    """The same recipe on requests no other split uses (the toy cascade's held-out set)."""
    return toy_profile(workdir, "heldout")


PROFILES = {"toy": toy_profile, "toy-heldout": toy_heldout_profile}
