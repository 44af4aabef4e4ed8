"""Rewards scored by a reward model: what the model sees of a response, its scores, and the
`reward_model` and `if_verifier+reward_model` kinds of `curation.verify.rewards`.

The reward model itself is a client passed in (`RewardModel`: anything with `score`); the
in-process and HTTP clients are in `training.reward_clients`, the training of one in
`training.reward_model`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Protocol

from curation.verify.ifeval import ifeval_reward
from curation.verify.result import final_answer_part

Z_EPS = 1e-6  # added to a group's std so near-constant groups do not explode


class RewardModel(Protocol):
    """Scores (prompt conversation, answer text) pairs; higher is better.

    Implementations: `training.reward_clients.SequenceClassifierRM` (a local transformers
    model) and `RemoteRewardModel` (a `cascade serve-reward` endpoint).
    """

    def score(self, prompts: Sequence[Sequence[dict]], answers: Sequence[str]) -> list[float]: ...


def rm_answer(response: str) -> str:
    """What a reward model sees: the text after `</think>` (leading whitespace dropped, as the
    RM was trained on bare answers), the whole output when `</think>` is missing (an
    unfinished thought, which the RM tends to rate low, so it is penalized).

    >>> rm_answer("<think>\\nhmm\\n</think>\\nHello"), rm_answer("<think>\\nstill thinking")
    ('Hello', '<think>\\nstill thinking')
    """
    return final_answer_part(response).lstrip() if "</think>" in response else response


def rm_scores(
    model: RewardModel, prompts: Sequence[object], completions: Sequence[str]
) -> list[float]:
    """The reward model's score of each (prompt, completion): the one place that decides what
    an RM sees (`rm_answer` of the completion; a prompt given as text is one user turn)."""
    chats = [
        [{"role": "user", "content": p}] if isinstance(p, str) else [dict(m) for m in p]  # type: ignore[union-attr]
        for p in prompts
    ]
    scores = model.score(chats, [rm_answer(c) for c in completions])
    if len(scores) != len(completions):
        raise ValueError(f"reward model returned {len(scores)} scores for {len(completions)}")
    return [float(x) for x in scores]


def z_scores(values: Sequence[float]) -> list[float]:
    """(v - mean) / (population std + Z_EPS); all zeros for a constant group.

    >>> [round(z, 4) for z in z_scores([1.0, 0.0, 0.0, 1.0])]
    [1.0, -1.0, -1.0, 1.0]
    >>> z_scores([0.5, 0.5])
    [0.0, 0.0]
    """
    if not values:
        return []
    mean = sum(values) / len(values)
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))
    if std == 0:
        return [0.0] * len(values)
    return [(v - mean) / (std + Z_EPS) for v in values]


def reward_model_score(
    prompts: Sequence[Any], completions: Sequence[str], *, reward_model: RewardModel, **_: Any
) -> list[float | None]:
    """Reward `reward_model`: the model's score of each response (see `rm_answer`).

    >>> class Length:
    ...     def score(self, prompts, answers):
    ...         return [float(len(a)) for a in answers]
    >>> reward_model_score(["Hi?"], ["<think>\\nhm\\n</think>\\nHello"], reward_model=Length())
    [5.0]
    """
    return list(rm_scores(reward_model, prompts, completions))


def if_verifier_with_reward_model(
    prompts: Sequence[Any],
    completions: Sequence[str],
    *,
    reward_model: RewardModel,
    **columns: Any,
) -> list[float | None]:
    """Reward `if_verifier+reward_model`: 1 + sigmoid(z) when every instruction is followed
    (z: the reward model's score z-normalized over the responses of the call, one group),
    else 0; the IF columns are those of `ifeval_reward`."""
    passed = ifeval_reward(prompts, completions, **columns)
    scores = rm_scores(reward_model, prompts, completions)
    return [
        None if p is None else (1.0 + _sigmoid(z) if p >= 1.0 else 0.0)
        for p, z in zip(passed, z_scores(scores), strict=True)
    ]


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))
