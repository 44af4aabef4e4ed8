"""The contract between the RL loop and whatever samples responses.

The loop hands an engine `GenerationRequest`s with token-id prompts (`prompt_ids`) and one
seed each; the engine yields a `Completion` with the sampled `token_ids` and their `logprobs`
per request as soon as that request is done (so rewards can start while others still decode)
and takes new policy weights after every optimizer step.

Log-probs: `Completion.logprobs[t]` is log softmax(logits / temperature) of the sampled token
(temperature 1 for greedy), before top-k / top-p truncation. `sampling_logprobs` computes the
same quantity from a training forward, so the two can be compared (the on-policy check).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol

import torch

from schemas.generation import GenerationRequest, Generator, SamplingParams

POLICY = "policy"
"""The model rollout requests name: an engine serves the policy being trained."""


def rollout_request(
    key: int, prompt_ids: Sequence[int], sampling: SamplingParams, seed: int
) -> GenerationRequest:
    """A request for the policy: a prompt already rendered to token ids, with its own seed."""
    return GenerationRequest(key, POLICY, (), sampling, seed, prompt_ids=prompt_ids)


def rollout_prompt(request: GenerationRequest) -> Sequence[int]:
    """The request's token-id prompt, or a ValueError: engines take rendered prompts only,
    and need a stop token (the end-of-turn token) to know where a response ends."""
    if request.prompt_ids is None:
        raise ValueError(f"request {request.key}: a rollout engine needs prompt_ids")
    if not request.sampling.stop_token_ids:
        raise ValueError(
            f"request {request.key}: give at least one stop token (the end-of-turn token)"
        )
    return request.prompt_ids


class RolloutEngine(Generator, Protocol):
    """What the RL loop needs from an engine: a `Generator` of the policy (yielding each
    completion as it finishes) that takes new weights after every optimizer step."""

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Take the policy's current parameters (after each optimizer step)."""
        ...


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
