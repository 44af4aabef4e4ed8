"""The policy-gradient losses, as sums over the tokens of one micro batch.

Every function returns a *sum*; the update divides by one normalizer computed over the whole
global batch (all micro batches, all ranks), so the result does not depend on how the batch is
split. With strict on-policy GRPO (one optimizer step per rollout batch) the importance ratio
is exactly 1, so the surrogate is plain `A * log pi` with no clipping (recipe 7.1):

    L = -(1 / sum_i |o_i|) sum_i sum_t A_i log pi(o_i,t | q, o_i,<t)       token level
    L = -(1 / N) sum_i (1 / |o_i|) sum_t A_i log pi(o_i,t | q, o_i,<t)       sequence level

`token_weights` gives the 1 or 1/|o_i| factor per token; the normalizer is then the count of
trained response tokens (token level) or trained responses (sequence level).
"""

from __future__ import annotations

import torch


def token_weights(lengths: torch.Tensor, level: str) -> torch.Tensor:
    """Per-token weight: 1 (token level) or 1 / response length (sequence level).

    `lengths` holds, for every token, the length of the response it belongs to.

    >>> token_weights(torch.tensor([2.0, 2.0, 4.0]), "sequence")
    tensor([0.5000, 0.5000, 0.2500])
    """
    if level == "token":
        return torch.ones_like(lengths, dtype=torch.float32)
    if level == "sequence":
        return 1.0 / lengths.float().clamp(min=1)
    raise ValueError(f"unknown loss level {level!r}")


def grpo_loss_sum(
    logp: torch.Tensor,
    advantages: torch.Tensor,
    weights: torch.Tensor,
    *,
    kl_coef: float = 0.0,
    ref_logp: torch.Tensor | None = None,
    entropy_coef: float = 0.0,
    entropy: torch.Tensor | None = None,
) -> torch.Tensor:
    """sum_t w_t * (-A_t log pi_t + kl_coef * KL_t - entropy_coef * H_t) over trained tokens.

    All tensors are 1-D over the micro batch's trained response tokens. KL_t is the k3
    estimator exp(r) - r - 1 with r = log pi_ref - log pi (non-negative, unbiased for
    KL(pi || pi_ref)).

    >>> logp = torch.log(torch.tensor([0.5, 0.25, 0.5]))
    >>> adv = torch.tensor([1.0, 1.0, -0.5])
    >>> round(float(grpo_loss_sum(logp, adv, torch.ones(3))), 4)  # -(log .5 + log .25 - .5 log .5)
    1.7329
    """
    loss = -(weights * advantages * logp)
    if kl_coef:
        if ref_logp is None:
            raise ValueError("kl_coef > 0 needs the reference model's log-probs")
        r = ref_logp - logp
        loss = loss + kl_coef * weights * (torch.exp(r) - r - 1)
    if entropy_coef:
        if entropy is None:
            raise ValueError("entropy_coef > 0 needs the token entropies")
        loss = loss - entropy_coef * weights * entropy
    return loss.sum()


def mopd_loss_sum(
    logp: torch.Tensor,
    teacher_logp: torch.Tensor,
    rollout_logp: torch.Tensor,
    ratio_low: float = 0.5,
    ratio_high: float = 2.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Multi-domain on-policy distillation (Cascade 2): the loss sum and the token weights.

    a_t = log pi_teacher - log pi_train (reverse KL on the sampled token, no gradient);
    w_t = rho_t * 1[ratio_low <= rho_t <= ratio_high] with rho_t = pi_train / pi_rollout (no
    gradient); loss = -sum_t w_t * a_t * log pi_train. Divide by the number of valid tokens.

    >>> logp = torch.log(torch.tensor([0.5, 0.5]))
    >>> loss, w = mopd_loss_sum(logp, torch.log(torch.tensor([0.25, 0.5])), logp)
    >>> round(float(loss), 4), w.tolist()  # a = (log .5, 0): -(1 * log .5 * log .5)
    (-0.4805, [1.0, 1.0])
    """
    advantage = (teacher_logp - logp).detach()
    ratio = torch.exp(logp.detach() - rollout_logp)
    weight = ratio * ((ratio >= ratio_low) & (ratio <= ratio_high)).float()
    return -(weight * advantage * logp).sum(), weight


def token_entropy(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """Entropy of softmax(logits / temperature) per position.

    >>> round(float(token_entropy(torch.zeros(1, 4), 1.0)[0]), 4)  # log 4
    1.3863
    """
    logp = torch.log_softmax(logits.float() / temperature, dim=-1)
    return -(logp.exp() * logp).sum(dim=-1)
