"""A preference prompt's context as chat turns, and the texts derived from it.

Sources spell a prompt three ways: a list of {role, content} turns (HelpSteer3's `context`),
that list as JSON text (how ingest keeps nested fields), or plain text (one user turn, where
HelpSteer2's `<extra_id_1>Assistant` / `<extra_id_1>User` markers separate earlier turns).
Every form becomes the same list of turns ending with the user's turn the responses answer.
"""

from __future__ import annotations

import json
import re
from typing import Any

ROLES = ("system", "user", "assistant")
_EXTRA_ID_TURN = re.compile(r"\n?<extra_id_1>(User|Assistant)\n?")


class ContextError(ValueError):
    """A context is not a list of chat turns ending with a user turn; says what is wrong."""


def context_messages(value: Any) -> list[dict[str, str]]:
    """The context as turns [{role, content}, ...] ending with a non-empty user turn.

    >>> context_messages("Hi<extra_id_1>Assistant\\nHello!<extra_id_1>User\\nA joke?")
    [{'role': 'user', 'content': 'Hi'}, {'role': 'assistant', 'content': 'Hello!'}, \
{'role': 'user', 'content': 'A joke?'}]
    >>> context_messages('[{"role": "user", "content": "Why?"}]')
    [{'role': 'user', 'content': 'Why?'}]
    """
    if value is None:
        raise ContextError("the context is missing")
    if isinstance(value, str):
        stripped = value.strip()
        if stripped.startswith("["):
            try:
                value = json.loads(stripped)
            except json.JSONDecodeError:
                return _text_turns(value)
        else:
            return _text_turns(value)
    if not isinstance(value, list):
        raise ContextError(f"expected a list of turns or text, got {type(value).__name__}")
    if not value:
        raise ContextError("the context has no turns")
    turns: list[dict[str, str]] = []
    for n, turn in enumerate(value):
        if not isinstance(turn, dict):
            raise ContextError(f"turn {n} is a {type(turn).__name__}, expected an object")
        role, content = turn.get("role"), turn.get("content")
        if role not in ROLES:
            raise ContextError(f"turn {n} has role {role!r}, expected one of {ROLES}")
        if not isinstance(content, str):
            raise ContextError(f"turn {n} has no text content")
        turns.append({"role": role, "content": content})
    if turns[-1]["role"] != "user":
        raise ContextError(f"the last turn is {turns[-1]['role']!r}, expected the user's")
    if not turns[-1]["content"].strip():
        raise ContextError("the last user turn is empty")
    return turns


def _text_turns(text: str) -> list[dict[str, str]]:
    parts = _EXTRA_ID_TURN.split(text)
    turns = [{"role": "user", "content": parts[0]}]
    for marker, content in zip(parts[1::2], parts[2::2], strict=True):
        turns.append({"role": marker.lower(), "content": content})
    if turns[-1]["role"] != "user":
        raise ContextError("the text ends with an assistant turn, expected the user's")
    if not turns[-1]["content"].strip():
        raise ContextError("the last user turn is empty")
    return turns


def context_text(turns: list[dict[str, str]]) -> str:
    """One text for the whole context: the prompt itself for a single user turn, else
    `role: content` turns separated by blank lines (what ids, dedup and decontamination read).

    >>> context_text([{"role": "user", "content": "Why?"}])
    'Why?'
    """
    if len(turns) == 1 and turns[0]["role"] == "user":
        return turns[0]["content"]
    return "\n\n".join(f"{t['role']}: {t['content']}" for t in turns)


def user_text(turns: list[dict[str, str]]) -> str:
    """The user's turns only, separated by blank lines (what a topic classifier reads: an
    assistant's earlier answer may quote code or formulas the user never asked for)."""
    return "\n\n".join(t["content"] for t in turns if t["role"] == "user")


def messages_json(turns: list[dict[str, str]]) -> str:
    """Turns as the JSON text the `messages` column holds."""
    return json.dumps(turns, ensure_ascii=False)
