"""What the RL loop (training/grpo.py) asks of an objective, GRPO's or MOPD's.

The loop samples groups, asks the objective which episodes it trains on and to `prepare` the
batch (GRPO: group z-score advantages), then for each micro batch computes the policy's
log-probs once and asks for the objective's `loss` (a sum over the micro batch's trained
tokens) and the partial sums behind its `stats`. Everything that differs between the two lives
behind this interface; the loop holds no branch on the stage type.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import torch

from curation.environments.runner import EpisodeRunner
from schemas.training_manifest import EvalSpec
from training.episode import Episode
from training.packed_episodes import PackedEpisodes
from training.rewards import RewardPool
from training.rl_data import EpochFilter, Prompt
from training.stage import StageContext, StageSetup
from training.stopping import SignalWatch


@dataclass
class MicroBatch:
    """One micro batch as the update computed it: what an objective's loss reads."""

    episodes: list[Episode]
    packed: PackedEpisodes
    logits: torch.Tensor  # the policy's, [1, T, V], with gradient
    labels: torch.Tensor  # [1, T], the packed labels with ignored positions read as token 0
    logp: torch.Tensor  # the policy's log-probs of the trained tokens (sampling temperature)
    temperature: float

    @property
    def trained(self) -> torch.Tensor:
        """[1, T] bool: the positions whose token is trained on (where `logp` comes from)."""
        return self.packed.trained


class Objective(Protocol):
    """An RL stage's objective: scoring, advantages and loss around the shared loop."""

    progress: str  # the log field the progress bar shows
    level: str  # loss normalizer: "token" (trained tokens) or "sequence" (trained responses)
    reward_columns: Sequence[str]  # prompt columns the reward reads (refused when missing)
    resample_rounds: int | None  # batch-level filtering: extra sampling rounds (None: off)
    sum_names: tuple[str, ...]  # the partial sums `loss` returns, summed over micro batches
    pool: RewardPool | None  # scores each group as its rollouts finish (None: no reward)
    judge: RewardPool | None  # scores held-out prompts (None: no evaluation)
    evaluation: EvalSpec | None
    watch: SignalWatch | None  # fails a stage whose rewards carry no gradient
    episodes: EpisodeRunner | None  # an environment stage's multi-turn episodes (None: one turn)

    def epoch_filter(self) -> EpochFilter | None:
        """Epoch-level dynamic filtering of the prompt stream, if the stage asks for it."""
        ...

    def load(self, ctx: StageContext, setup: StageSetup, tokenizer: object) -> None:
        """Bring up the frozen models and reward clients (after the policy's engine)."""
        ...

    def domain(self, prompt: Prompt) -> str | None:
        """The prompt's domain, kept on its episodes (MOPD: which teacher scores them)."""
        ...

    def trains_on(self, episode: Episode) -> bool:
        """Whether a scored episode may move the policy."""
        ...

    def prepare(self, groups: list[list[Episode]]) -> None:
        """Fill in what the loss reads of the batch's episodes (GRPO: advantages)."""
        ...

    def loss(self, batch: MicroBatch) -> tuple[torch.Tensor, dict[str, float]]:
        """The loss summed over the micro batch's trained tokens, and its partial sums."""
        ...

    def stats(self, sums: dict[str, float], trained_tokens: int) -> dict[str, float]:
        """The step's log fields from the partial sums over the whole batch."""
        ...

    def close(self) -> None:
        """Stop the scoring threads."""
        ...


def frozen(model: torch.nn.Module, device: torch.device, dtype: torch.dtype) -> torch.nn.Module:
    """An eval-mode, gradient-free model on `device` (the KL reference, MOPD teachers)."""
    model.requires_grad_(False)
    return model.to(device=device, dtype=dtype).eval()
