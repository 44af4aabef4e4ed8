"""Verifiers: decide whether a response is right, usable as filters and as RL rewards.

Each family returns `Verdict(passed, score, detail)`; each has a TRL-style reward function
`(prompts, completions, **columns) -> list[float | None]` (None = undecided, skip it):

    from curation.verify import math_reward, code_reward, ifeval_reward, swe_reward
    rewards = math_reward(prompts, completions, answer=batch["answer"])

Names are imported lazily: sandbox and math workers start as `python -m curation.verify.X`,
which runs this file first, and must stay small (they fork per program).
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "Verdict": "result",
    "completion_text": "result",
    "final_answer_part": "result",
    "MathVerifier": "math",
    "extract_boxed": "math",
    "math_reward": "math",
    "majority_vote_frame": "math",
    "code_reward": "code",
    "verify_code": "code",
    "verify_code_batch": "code",
    "ifeval_reward": "ifeval",
    "verify_ifeval": "ifeval",
    "swe_reward": "swe",
    "verify_patch": "swe",
    "PatchJudge": "patch_judge",
    "verify_syntax": "syntax",
    "code_switching_penalty": "language",
    "verify_no_code_switching": "language",
    "verify_frame": "table",
    "verify_step": "table",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'curation.verify' has no attribute {name!r}")
    return getattr(importlib.import_module(f"curation.verify.{module}"), name)
