"""Seeded token sampling: what a sample is, for the hf teacher backend and the hf rollout engine
alike (a contract between the two floors that sample, so it lives below both).

A sample must depend only on (weights, prompt, sampling, seed), never on which other rows share
its batch: each row draws its uniforms up front from a CPU `torch.Generator` seeded with its
request's seed (the same numbers on any device), and step t picks the token where the row's
cumulative probability first exceeds its t-th uniform (inverse-CDF sampling), for all rows at
once. Temperature, top-k and top-p are applied first, in that order, top-k and top-p with
transformers' own warpers. `vllm_sampling_arguments` hands vLLM the same parameters.
torch and transformers are imported only when a tensor function runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from schemas.generation import SamplingParams

if TYPE_CHECKING:
    import torch


def seeded_uniforms(seed: int, steps: int) -> torch.Tensor:
    """`steps` uniforms in [0, 1) from a CPU generator seeded with `seed`."""
    import torch

    return torch.rand(steps, generator=torch.Generator().manual_seed(seed))


def truncate(scaled: torch.Tensor, sampling: SamplingParams) -> torch.Tensor:
    """Top-k, then top-p, on temperature-scaled logits (-inf outside), as transformers does."""
    from transformers import TopKLogitsWarper, TopPLogitsWarper

    if sampling.top_k > 0:
        scaled = TopKLogitsWarper(sampling.top_k)(None, scaled)  # type: ignore[arg-type]
    if sampling.top_p < 1.0:
        scaled = TopPLogitsWarper(sampling.top_p)(None, scaled)  # type: ignore[arg-type]
    return scaled


def inverse_cdf_sample(truncated: torch.Tensor, draws: torch.Tensor) -> torch.Tensor:
    """Per row of [rows, vocab] logits, the token where the cumulative probability first
    exceeds the row's draw in `draws` [rows]."""
    import torch

    cdf = torch.softmax(truncated, dim=-1).cumsum(dim=-1)
    # Scale by the total so rounding can never point past the last token with mass.
    chosen = torch.searchsorted(cdf, draws[:, None] * cdf[:, -1:], right=True).squeeze(1)
    return chosen.clamp_(max=truncated.shape[-1] - 1)


def vllm_sampling_arguments(sampling: SamplingParams) -> dict[str, Any]:
    """Keyword arguments of `vllm.SamplingParams` for `sampling` (top_k -1 is vLLM's "off",
    valid in all versions; stop tokens only when set)."""
    arguments: dict[str, Any] = {
        "temperature": sampling.temperature,
        "top_p": sampling.top_p,
        "top_k": sampling.top_k if sampling.top_k > 0 else -1,
        "max_tokens": sampling.max_new_tokens,
    }
    if sampling.stop_token_ids:
        arguments["stop_token_ids"] = list(sampling.stop_token_ids)
    return arguments
