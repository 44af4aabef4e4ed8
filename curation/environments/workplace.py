"""The `workplace` environment: function calling with state (people, a calendar, mail).

Each episode gets its own world, generated from the row's `workplace` seed; the tools read and
change it (`curation.verify.workplace`), and a refused call (an unknown person, a bad date) is
an error turn. The reward (`workplace_state`) replays the episode's calls on a fresh world and
compares it with the goal's solved world: state, not wording, decides.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from curation.environments.answer import AnswerScoring, opening_messages
from curation.verify.rewards import Reward, reward_named
from curation.verify.workplace import WORKPLACE_TOOLS, WorkplaceError, World, verify_workplace
from schemas.environment import Opening, Scored, ToolError, Transcript
from schemas.tool_calls import ToolCall


class WorkplaceSession:
    """One episode's world."""

    def __init__(self, world: World) -> None:
        self.world = world

    def call(self, call: ToolCall, timeout_s: float) -> str:
        try:
            result = self.world.call(call.name, json.loads(call.arguments))
        except WorkplaceError as exc:
            raise ToolError(str(exc)) from None
        return json.dumps(result, ensure_ascii=False)

    def close(self) -> None:
        pass


class WorkplaceEnvironment(AnswerScoring):
    """The workplace tools over the row's task; `workplace_state` scores unless told another."""

    name = "workplace"

    def __init__(self, reward: Reward | None = None, **clients: Any) -> None:
        super().__init__(reward or reward_named("workplace_state"), **clients)
        if "workplace" not in self.columns:
            self.columns = (*self.columns, "workplace")

    def score(
        self, rows: Sequence[Mapping[str, Any]], transcripts: Sequence[Transcript]
    ) -> list[Scored]:
        """The stage's reward kind; `workplace_state` with the verdict's reason as evidence."""
        if self.reward.name != "workplace_state":
            return super().score(rows, transcripts)
        verdicts = [
            verify_workplace(t.completion, row.get("workplace"))
            for row, t in zip(rows, transcripts, strict=True)
        ]
        return [Scored(v.reward(), f"workplace_state: {v.detail}") for v in verdicts]

    def open(self, row: Mapping[str, Any]) -> tuple[Opening, WorkplaceSession]:
        spec = row.get("workplace")
        try:
            seed = (json.loads(spec) if isinstance(spec, str) else spec)["seed"]
        except (TypeError, ValueError, KeyError):
            raise ValueError(f"row has no workplace {{seed, goal}} JSON: {spec!r}") from None
        session = WorkplaceSession(World.from_seed(int(seed)))
        return Opening(opening_messages(row), WORKPLACE_TOOLS), session
