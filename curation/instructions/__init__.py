"""Verifiable instructions for general prompts (IF-RL data), of two taxonomies.

The Cascade recipe's IF-RL data are general prompts with 1..10 constraints attached, each
checked by the IF verifier as the reward: sub-stage 1 of the IFEval taxonomy (Llama-Nemotron
IF, LMSYS prompts + IFEval-taxonomy constraints), sub-stage 2 of the IF-Bench-Train taxonomy
(IF-RLVR constraints on Tulu-3-SFT prompts). Modules: `taxonomy` (IFEval's 25 types: kwargs
draws, IFEval wording, conflicts), `witness` (a response the verifier accepts, the proof that a
drawn IFEval set can be satisfied), `iftrain` (the 29 IF-RLVR types with their conflicts and
witness writer), `attach` (the recipe step and the pass-rate measurement over attached
instructions).
"""

from curation.instructions.attach import (
    DEFAULT_PER_PROMPT,
    TAXONOMIES,
    assemble_prompt,
    attach_instructions,
    draw_instruction_set,
    instruction_reference,
    measure_instruction_pass_rates,
    taxonomy_named,
)
from curation.instructions.iftrain import (
    IFTRAIN,
    IFTRAIN_CONFLICTS,
    IFTRAIN_INSTRUCTIONS,
    iftrain_witness,
)
from curation.instructions.taxonomy import (
    CONFLICTS,
    IFEVAL,
    INSTRUCTIONS,
    LANGUAGES,
    Taxonomy,
    conflicting_pairs,
    conflicts,
    kwargs_conflict,
)
from curation.instructions.witness import compliant_response

__all__ = [
    "CONFLICTS",
    "DEFAULT_PER_PROMPT",
    "IFEVAL",
    "IFTRAIN",
    "IFTRAIN_CONFLICTS",
    "IFTRAIN_INSTRUCTIONS",
    "TAXONOMIES",
    "Taxonomy",
    "INSTRUCTIONS",
    "LANGUAGES",
    "assemble_prompt",
    "attach_instructions",
    "compliant_response",
    "conflicting_pairs",
    "conflicts",
    "draw_instruction_set",
    "instruction_reference",
    "kwargs_conflict",
    "iftrain_witness",
    "measure_instruction_pass_rates",
    "taxonomy_named",
]
