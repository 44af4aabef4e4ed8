"""Verifiable instructions of the IFEval taxonomy for general prompts (IF-RL data).

The Cascade recipe's IF-RL data are general prompts with 1..N constraints of the IFEval
taxonomy attached (Llama-Nemotron IF, LMSYS prompts + IFEval-taxonomy constraints), each
checked by the IF verifier as the reward. Modules: `taxonomy` (the 25 types our verifier
checks: kwargs draws, IFEval wording, conflicts), `witness` (a response the verifier accepts,
the proof that a drawn set can be satisfied), `attach` (the recipe step and the pass-rate
measurement over attached instructions).
"""

from curation.instructions.attach import (
    assemble_prompt,
    attach_instructions,
    draw_instruction_set,
    instruction_reference,
    measure_instruction_pass_rates,
)
from curation.instructions.taxonomy import (
    CONFLICTS,
    INSTRUCTIONS,
    LANGUAGES,
    conflicting_pairs,
    conflicts,
    kwargs_conflict,
)
from curation.instructions.witness import compliant_response

__all__ = [
    "CONFLICTS",
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
    "measure_instruction_pass_rates",
]
