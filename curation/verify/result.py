"""The one result type every verifier returns: did it pass, a score, and why.

`passed` is None when the verifier could not decide (a timeout, an unparsable reference):
callers that filter drop such rows with that reason, and callers that reward return None so
the trainer skips the sample instead of learning from a silent 0.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Verdict:
    """Outcome of one verification: `passed` (None = undecided), `score`, human `detail`, and
    for an undecided verdict caused by its inputs, which one could not be used (`bad_input`:
    "reference", or "kwargs" for IFEval's instruction arguments)."""

    passed: bool | None
    score: float
    detail: str
    bad_input: str | None = None

    @property
    def decided(self) -> bool:
        return self.passed is not None

    def reward(self) -> float | None:
        """The score as an RL reward, or None when undecided (the trainer skips it)."""
        return self.score if self.decided else None


def completion_text(completion: object) -> str:
    """Text of a TRL-style completion: a string, or a list of chat messages (last one's content)."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list) and completion and isinstance(completion[-1], dict):
        return str(completion[-1].get("content", ""))
    if isinstance(completion, dict):
        return str(completion.get("content", ""))
    raise TypeError(f"cannot read a completion of type {type(completion).__name__}")


def final_answer_part(response: str) -> str:
    """The part after the last `</think>` (the whole response when there is no think block)."""
    head, sep, tail = response.rpartition("</think>")
    return tail if sep else response


def json_value(value: Any) -> Any:
    """JSON text of an object or a list as that object; anything else as it is (inputs come
    as Python objects or as JSON text, depending on how a file was read)."""
    if isinstance(value, str) and value.strip()[:1] in ("[", "{"):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value
    return value
