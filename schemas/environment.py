"""The contract of an agentic episode: what an environment gives a model and what it answers.

An `Environment` turns one dataset row into an episode. `open(row)` gives the opening chat and
the tools it offers (JSON schemas, rendered into the system prompt by the chat template) with a
`ToolSession`, the episode's private side of the tools (its state: a python namespace, a
calendar, a checked-out repository). The runner (`curation.environments.runner`) then loops:
the model speaks a turn; its `<tool_call>` blocks go to the session, whose answers come back as
tool turns; a turn without calls ends the episode. At the end `score` gives each episode of a
group its reward and the evidence for it. A single-turn verifier is an environment without
tools: one turn, then the reward.

What is the runner's and not an environment's, so every environment behaves alike: reading calls
out of a turn (a malformed or unknown call is answered with an error turn, never a crash), the
limits of `EpisodeLimits` (turns, tokens, seconds and characters per tool call, truncation with
`TRUNCATION_MARKER`) and the reason an episode ended (`END_REASONS`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import pyarrow as pa

from schemas.tables import TableContract, register_contract
from schemas.tool_calls import ToolCall

END_REASONS = ("answered", "max_turns", "max_tokens", "length")
"""Why an episode ended: `answered` (a turn without tool calls: the model's final answer),
`max_turns` (the turn limit came with calls still pending), `max_tokens` (the episode's token
budget ran out), `length` (a turn was cut at its own token cap)."""

TRUNCATION_MARKER = "\n[... output truncated: {dropped} more characters]"
"""Appended to a tool result cut at `max_tool_output_chars`, so the model can tell."""


@dataclass(frozen=True)
class EpisodeLimits:
    """Per-episode limits. Tokens count the whole conversation: the opening, every model turn
    and every tool result. A tool call that runs past `tool_timeout_s` answers with an error."""

    max_turns: int = 8
    max_total_tokens: int = 4096
    tool_timeout_s: float = 10.0
    max_tool_output_chars: int = 4000

    def __post_init__(self) -> None:
        for name in ("max_turns", "max_total_tokens", "max_tool_output_chars"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.tool_timeout_s <= 0:
            raise ValueError(f"tool_timeout_s must be > 0, got {self.tool_timeout_s}")


class ToolError(Exception):
    """A tool call failed (bad arguments, the tool raised, it timed out); the message is what
    the model is told in the error turn."""


class ToolSession(Protocol):
    """One episode's live tools. `call` runs one well-formed call of a tool the opening
    offered and returns its output text, or raises ToolError. It must return within
    `timeout_s` (the sandbox's own deadline, for code). Sessions hold an episode's state, so
    calls of one episode run in order; different episodes' sessions run concurrently."""

    def call(self, call: ToolCall, timeout_s: float) -> str: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class Opening:
    """How an episode starts: the chat (dicts of role and content) and the tools it offers."""

    messages: tuple[dict[str, Any], ...]
    tools: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True)
class Scored:
    """An episode's reward (None: undecided, e.g. a verifier timeout) and why."""

    reward: float | None
    evidence: str


@dataclass
class Transcript:
    """A finished episode as text: the whole conversation (the opening, then assistant turns
    with their `tool_calls` and tool turns, as chat dicts the chat template renders), how it
    ended, and its counts. `final` is the last assistant turn's text: what answer-scored
    environments verify."""

    messages: list[dict[str, Any]]
    tools: tuple[dict[str, Any], ...]
    end_reason: str
    turns: int = 0
    tool_calls: int = 0
    tool_errors: int = 0
    tool_seconds: float = 0.0
    truncated_outputs: int = 0
    opening_turns: int = 0  # how many of `messages` are the opening

    @property
    def completion(self) -> list[dict[str, Any]]:
        """The turns after the opening: the episode as a TRL conversational completion."""
        return self.messages[self.opening_turns :]

    @property
    def final(self) -> str:
        """The last assistant turn as the model wrote it (its `<think>` block included)."""
        for message in reversed(self.messages):
            if message["role"] == "assistant":
                reasoning = message.get("reasoning")
                if reasoning is None:
                    return message["content"]
                return f"<think>\n{reasoning}\n</think>\n{message['content']}"
        return ""


class Environment(Protocol):
    """See the module docstring. `columns`: the row columns it reads (a dataset must have
    them); `name`: its registry name (`curation.environments.ENVIRONMENTS`)."""

    name: str
    columns: tuple[str, ...]

    def open(self, row: Mapping[str, Any]) -> tuple[Opening, ToolSession]: ...

    def score(
        self, rows: Sequence[Mapping[str, Any]], transcripts: Sequence[Transcript]
    ) -> list[Scored]:
        """A group's rewards, one per transcript (a group: GRPO's rollouts of one prompt)."""
        ...


EPISODES = TableContract(
    kind="episodes",
    schema=pa.schema(
        [
            pa.field("id", pa.string(), nullable=False),
            pa.field("prompt_id", pa.string(), nullable=False),
            pa.field("environment", pa.string(), nullable=False),
            pa.field("model", pa.string(), nullable=False),
            pa.field("backend", pa.string(), nullable=False),
            pa.field("mode", pa.string(), nullable=False),
            pa.field("mode_switch", pa.string(), nullable=False),
            pa.field("sample_index", pa.int32(), nullable=False),
            pa.field("seed", pa.int64(), nullable=False),
            pa.field("temperature", pa.float64(), nullable=False),
            pa.field("top_p", pa.float64(), nullable=False),
            pa.field("top_k", pa.int32(), nullable=False),
            pa.field("max_new_tokens", pa.int32(), nullable=False),
            pa.field("messages", pa.string(), nullable=False),
            pa.field("tools", pa.string(), nullable=False),
            pa.field("end_reason", pa.string(), nullable=False),
            pa.field("turns", pa.int32(), nullable=False),
            pa.field("tool_calls", pa.int32(), nullable=False),
            pa.field("tool_errors", pa.int32(), nullable=False),
            pa.field("reward", pa.float64()),
            pa.field("passed", pa.bool_()),
            pa.field("evidence", pa.string(), nullable=False),
        ]
    ),
    description=(
        "One teacher episode in an environment per row. id: fingerprint of (model, opening "
        "chat, tools, environment, mode, mode_switch, sampling, limits, seed), the cache key. "
        "messages: the whole conversation as JSON (the opening, assistant turns with reasoning "
        "and tool_calls, tool turns), what SFT trains on with tools; tools: the offered JSON "
        "schemas. end_reason: answered | max_turns | max_tokens | length. reward: the "
        "environment's score (null: undecided); passed: reward > 0 (null when undecided); "
        "evidence: why."
    ),
)

register_contract(EPISODES)
