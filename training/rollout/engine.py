"""The contract between the RL loop and whatever samples responses.

The loop hands an engine token-id prompts with one seed each; the engine yields a `Rollout`
per request as soon as that request is done (so rewards can start while others still decode)
and takes new policy weights after every optimizer step.

Log-probs: `Rollout.logprobs[t]` is log softmax(logits / temperature) of the sampled token
(temperature 1 for greedy), before top-k / top-p truncation. `sampling_logprobs` computes the
same quantity from a training forward, so the two can be compared (the on-policy check).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

import torch


@dataclass(frozen=True)
class SamplingParams:
    """How responses are sampled; `temperature=0` is greedy, `top_k=0` disables top-k."""

    max_new_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    stop_token_ids: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.temperature < 0 or not 0 < self.top_p <= 1 or self.top_k < 0:
            raise ValueError(f"invalid sampling parameters {self}")
        if not self.stop_token_ids:
            raise ValueError("give at least one stop token (the end-of-turn token)")

    @property
    def logprob_temperature(self) -> float:
        return self.temperature if self.temperature > 0 else 1.0


@dataclass(frozen=True)
class RolloutRequest:
    """One response to sample: the prompt's token ids and this sample's own seed.

    A sample depends only on (weights, prompt, seed), never on which other requests share
    its batch, so rollouts are the same on one rank or eight, and after a resume.
    """

    key: int
    prompt_ids: Sequence[int]
    seed: int
    max_new_tokens: int | None = None  # a tighter cap than the sampling's for this request


@dataclass
class Rollout:
    """A sampled response: its tokens (with the stop token when it stopped) and log-probs."""

    key: int
    token_ids: list[int]
    logprobs: list[float]
    finish_reason: Literal["stop", "length"]
    extra: dict = field(default_factory=dict)


class RolloutEngine(Protocol):
    """What the RL loop needs from an engine."""

    name: str

    def generate(
        self, requests: Sequence[RolloutRequest], sampling: SamplingParams
    ) -> Iterator[Rollout]:
        """Yield one Rollout per request, in the order they finish."""
        ...

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Take the policy's current parameters (after each optimizer step)."""
        ...

    def close(self) -> None: ...


def sampling_logprobs(
    logits: torch.Tensor, tokens: torch.Tensor, temperature: float
) -> torch.Tensor:
    """log softmax(logits / temperature) at `tokens` (the engines' log-prob convention).

    >>> logits = torch.tensor([[0.0, 0.0], [2.0, 0.0]])
    >>> sampling_logprobs(logits, torch.tensor([1, 0]), 1.0).exp().round(decimals=3)
    tensor([0.5000, 0.8810])
    """
    scaled = logits.float() / temperature
    return torch.log_softmax(scaled, dim=-1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
