"""Split a teacher response into its reasoning (`<think>` part) and its final answer.

Teachers differ in where the opening tag lives: most write `<think>` themselves, DeepSeek-R1's
newer templates put it at the end of the prompt so the response starts inside the reasoning,
and Qwen3's non-thinking template pre-fills an empty `<think></think>`. OpenAI-compatible
servers with a reasoning parser return the reasoning in a separate field. All of these end up
as the same pair: `reasoning` (None when there is none) and `answer`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"

_LEADING_OPEN = re.compile(r"^\s*<think>")


@dataclass(frozen=True)
class SplitResponse:
    """Reasoning (None if the response has none), final answer, and whether `</think>` closed."""

    reasoning: str | None
    answer: str
    reasoning_closed: bool


def split_response(
    text: str, *, opened_in_prompt: bool = False, reasoning: str | None = None
) -> SplitResponse:
    """Split `text` at the first `</think>`.

    `opened_in_prompt`: the rendered prompt ended with `<think>`, so `text` starts inside the
    reasoning. `reasoning`: a server already separated it (then `text` is the answer).
    An opened but never closed reasoning (cut at the length limit) gives an empty answer and
    `reasoning_closed=False`. A `</think>` with no `<think>` before it counts as closing a
    reasoning opened in the prompt. Empty reasoning (`<think>\\n\\n</think>`) becomes None.
    """
    if reasoning is not None:
        return SplitResponse(_none_if_empty(reasoning), text.strip(), True)
    body = text
    opened = opened_in_prompt
    match = _LEADING_OPEN.match(body)
    if match:
        body = body[match.end() :]
        opened = True
    close = body.find(THINK_CLOSE)
    if close >= 0:
        return SplitResponse(
            _none_if_empty(body[:close]), body[close + len(THINK_CLOSE) :].strip(), True
        )
    if opened:
        return SplitResponse(_none_if_empty(body), "", False)
    return SplitResponse(None, text.strip(), True)


def prompt_opens_reasoning(rendered_prompt: str) -> bool:
    """True when a rendered prompt ends with an open `<think>` (DeepSeek-R1-style templates)."""
    tail = rendered_prompt.rstrip()
    return tail.endswith(THINK_OPEN)


def _none_if_empty(text: str) -> str | None:
    stripped = text.strip()
    return stripped or None
