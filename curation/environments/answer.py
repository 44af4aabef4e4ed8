"""Environments scored by a reward kind on the final answer; a verifier is a one-step one.

`AnswerScoring` gives an environment the `score` of a reward kind of the registry
(`curation.verify.rewards.REWARDS`), with the row's columns as its inputs: a kind with a table
verifier checks each transcript's last assistant turn (and says why); any other gets the turns
after the opening as a TRL conversational completion (`workplace_state` replays their calls). `RewardEnvironment` is that and nothing
more: no tools, one turn, so every reward kind runs through the episode runner as the
environments with tools do.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import polars as pl

from curation.verify.rewards import Reward
from schemas.environment import Opening, Scored, ToolError, Transcript
from schemas.tool_calls import ToolCall


class AnswerScoring:
    """`score` by a reward kind on each transcript's final turn (clients bound up front)."""

    def __init__(self, reward: Reward, **clients: Any) -> None:
        self.reward = reward
        self.function = reward.bind(**clients)
        self.columns: tuple[str, ...] = ("messages", *reward.columns)

    def score(
        self, rows: Sequence[Mapping[str, Any]], transcripts: Sequence[Transcript]
    ) -> list[Scored]:
        finals = [t.final for t in transcripts]
        reward = self.reward
        if reward.table is not None:  # a table verifier says why, not only how much
            df = pl.DataFrame(
                {c: [row.get(c) for row in rows] for c in reward.columns},
                strict=False,
            )
            fields = {"reference": reward.columns[0], "kwargs": "kwargs"}
            verdicts = reward.table(df, finals, fields)
            return [Scored(v.reward(), f"{reward.name}: {v.detail}") for v in verdicts]
        prompts = [t.messages[: t.opening_turns] for t in transcripts]
        columns = {c: [row.get(c) for row in rows] for c in reward.columns}
        values = self.function(prompts, [t.completion for t in transcripts], **columns)
        return [Scored(None if v is None else float(v), f"{reward.name}: {v}") for v in values]


class NoTools:
    """The session of an environment that offers no tools."""

    def call(self, call: ToolCall, timeout_s: float) -> str:
        raise ToolError(f"no tool {call.name!r}: this task offers no tools")

    def close(self) -> None:
        pass


def opening_messages(row: Mapping[str, Any]) -> tuple[dict[str, Any], ...]:
    """The row's chat (`messages`: a list of role/content dicts, or a plain `prompt` string)."""
    if "messages" in row and row["messages"] is not None:
        return tuple(dict(m) for m in row["messages"])
    if isinstance(row.get("prompt"), str):
        return ({"role": "user", "content": row["prompt"]},)
    raise ValueError(f"row has neither messages nor a prompt string (columns: {sorted(row)})")


class RewardEnvironment(AnswerScoring):
    """A reward kind as a one-step environment: the row's chat, no tools, one reply, scored."""

    def __init__(self, reward: Reward, **clients: Any) -> None:
        super().__init__(reward, **clients)
        self.name = reward.name

    def open(self, row: Mapping[str, Any]) -> tuple[Opening, NoTools]:
        return Opening(opening_messages(row)), NoTools()
