"""if_rl_ifbench: prompts for IF-RL sub-stage 2, general prompts with IF-Bench-Train constraints.

Following the Cascade recipe's IF-RL data (sub-stage 2 trains on the IF-Bench-Train taxonomy:
the IF-RLVR data of Pyatkin et al. 2025, constraints attached to Tulu-3-SFT prompts): take
each conversation's single user turn as the prompt (`allenai/tulu-3-sft-mixture` rows are
chats; read with `--set mapping.problem=messages`, or give plain prompt files), decontaminate
against IFEval and IFBench with word 9-grams, remove exact and near duplicates, keep the
prompts disjoint from the general SFT prompts, then attach 1-5 of the 29 IF-RLVR constraints
to each (IFBench's released IF-RLVR set carries up to 5), never two that conflict, each set
checked to be satisfiable under the IF verifier that rewards the stage. IFBench's own 58
constraints stay out: they are what the stage is evaluated on. The optional pass-rate filter
is `if_rl`'s (`policy`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from builders import if_rl
from builders.runner import Build
from curation.general.conversations import single_turn_prompts
from lake.steps import Step

NAME = "if_rl_ifbench"
DOMAIN = "if"
OUTPUT_KIND = "prompts"
DEFAULTS: dict[str, Any] = {
    **if_rl.DEFAULTS,
    "benchmarks": ["ifeval", "ifbench"],
    "taxonomy": "iftrain",
    "instructions_per_prompt": [1, 5],
    "generations_table": "if_rl_ifbench_generations",
    "mapping": {},
}
"""`if_rl`'s parameters, with the IF-RLVR taxonomy; `mapping` maps the sources' fields
(`{"problem": "messages"}` for Tulu-3-SFT's chats)."""


def steps(params: dict[str, Any], build: Build) -> list[Step]:
    """The recipe, top to bottom: single-turn prompts, then `if_rl`'s steps."""
    return [
        Step("single_turn_prompts", single_turn_prompts, {}, scope="rows"),
        *if_rl.steps(params, build),
    ]


def toy_profile(workdir: Path) -> tuple[list[str], dict[str, Any]]:
    """The toy world's short requests of their own split with 1-2 easy IF-RLVR constraints,
    no teacher or policy model."""
    from builders.worlds.toy_domains import toy_instructions

    sources, params = if_rl.toy_profile(workdir, "rl_ifbench")
    return sources, {**params, "instruction_ids": list(toy_instructions("iftrain"))}


def toy_heldout_profile(workdir: Path) -> tuple[list[str], dict[str, Any]]:
    """The held-out requests with this recipe's constraints (the toy cascade's held-out set)."""
    from builders.worlds.toy_domains import toy_instructions

    sources, params = if_rl.toy_profile(workdir, "heldout")
    return sources, {**params, "instruction_ids": list(toy_instructions("iftrain"))}


PROFILES = {"toy": toy_profile, "toy-heldout": toy_heldout_profile}
