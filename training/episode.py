"""The one contract between rollout and update: an `Episode` per sampled response.

Rollout fills in the tokens and the engine's log-probs, scoring fills in the reward, the
advantage step fills in the advantage and whether the episode is trained on; the update reads
nothing else. Group statistics (z-scores, shared with the IF + reward-model reward of
`curation.verify.reward_model_score`) are pure functions over a group's rewards.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

from curation.verify.reward_model_score import z_scores
from schemas.environment import Transcript
from schemas.generation import Mode


@dataclass
class Episode:
    """One response to one prompt, from sampling to update.

    `trained` is False for responses that must not move the policy: undecided rewards (a
    verifier timeout), responses cut at the length cap under overlong filtering, and groups a
    filter kept only to fill the batch. Untrained episodes add nothing to the loss and do not
    count in its normalizer.
    """

    draw: int  # position of the prompt in the stage's stream of prompts
    sample: int  # index of this response among its prompt's rollouts
    prompt_uid: str
    mode: Mode
    prompt_ids: list[int]
    response_ids: list[int]
    rollout_logprobs: list[float]
    finish_reason: str
    domain: str | None = None  # MOPD: which teacher scores it
    response_text: str = ""
    reward: float | None = None
    code_switched: bool = False
    advantage: float = 0.0
    trained: bool = True
    # Agentic episodes (an environment stage): which response tokens the model sampled (tool
    # results and template tokens between turns are context: no gradient, log-prob 0), and
    # the conversation. None: every response token is the model's (one turn).
    response_mask: list[bool] | None = None
    transcript: Transcript | None = None

    @property
    def truncated(self) -> bool:
        return self.finish_reason == "length"

    @property
    def completion(self) -> str | list[dict]:
        """What the reward reads: the reply's text, or an episode's turns after its opening
        (TRL's conversational completion: the final answer last, tool calls replayable)."""
        return self.response_text if self.transcript is None else self.transcript.completion

    @property
    def model_tokens(self) -> int:
        """Response tokens the model sampled: what the loss is normalized by."""
        if self.response_mask is None:
            return len(self.response_ids)
        return sum(self.response_mask)

    @property
    def solved(self) -> bool:
        """A positive reward counts as solved (epoch filtering, pass rates)."""
        return self.reward is not None and self.reward > 0


def group_advantages(rewards: Sequence[float | None], shaping: str = "none") -> list[float]:
    """GRPO advantages of one group: z-score of the decided rewards (None -> 0).

    `shaping="tanh"` squashes the z-scores into [-1, 1] (the recipe's RLHF stabilizer).

    >>> [round(a, 3) for a in group_advantages([1.0, 0.0, None, 0.0])]
    [1.414, -0.707, 0.0, -0.707]
    >>> [round(a, 3) for a in group_advantages([1.0, 0.0], shaping="tanh")]
    [0.762, -0.762]
    """
    decided = [r for r in rewards if r is not None]
    z = iter(z_scores(decided))
    out = [next(z) if r is not None else 0.0 for r in rewards]
    if shaping == "tanh":
        out = [math.tanh(a) for a in out]
    elif shaping != "none":
        raise ValueError(f"unknown reward shaping {shaping!r}")
    return out


def has_signal(rewards: Sequence[float | None]) -> bool:
    """A group carries gradient only when its decided rewards are not all equal.

    >>> has_signal([1.0, 1.0, None]), has_signal([1.0, 0.0])
    (False, True)
    """
    decided = {r for r in rewards if r is not None}
    return len(decided) > 1


CONTROLS = ("shuffled-rewards",)
"""Control runs of a GRPO stage (`cascade train --control`): `shuffled-rewards` permutes the
batch's rewards across all its episodes before the advantages, so the update has the real
run's reward distribution and batch shape but no link between a response and its reward."""


def shuffle_rewards(episodes: Sequence[Episode], rng: random.Random) -> None:
    """Permute the decided rewards of the trained episodes across the whole batch, in place.

    Untrained episodes (undecided, capped under overlong filtering, fill-in groups) keep theirs:
    they carry no gradient either way. The multiset of rewards, hence the logged mean, is
    unchanged.

    >>> eps = [Episode(0, i, "p", "think", [], [], [], "stop", reward=float(i)) for i in range(4)]
    >>> shuffle_rewards(eps, random.Random(0))
    >>> sorted(e.reward for e in eps), [e.reward for e in eps] != [0.0, 1.0, 2.0, 3.0]
    ([0.0, 1.0, 2.0, 3.0], True)
    """
    chosen = [e for e in episodes if e.trained and e.reward is not None]
    rewards = [e.reward for e in chosen]
    rng.shuffle(rewards)
    for episode, reward in zip(chosen, rewards, strict=True):
        episode.reward = reward
