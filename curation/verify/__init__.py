"""Verifiers: decide whether a response is right, usable as filters and as RL rewards.

Each family returns `Verdict(passed, score, detail)`; each has a TRL-style reward function
`(prompts, completions, **columns) -> list[float | None]` (None = undecided, skip it).
"""

from curation.verify.result import Verdict, completion_text, final_answer_part

__all__ = ["Verdict", "completion_text", "final_answer_part"]
