"""A micro batch of episodes packed into one row, as the RL update and its objectives read it.

Positions restart at 0 for each episode, so transformers treats each one as its own sequence
(no attention mask, no cache); each column gives one value per position.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from schemas.chat_template import IGNORE_INDEX
from training.episode import Episode


@dataclass
class PackedEpisodes:
    """A micro batch: its episodes packed into one row (positions restart per episode)."""

    input_ids: torch.Tensor  # [1, T]
    position_ids: torch.Tensor  # [1, T]
    labels: torch.Tensor  # [1, T], the next token at response positions, else IGNORE_INDEX
    response: torch.Tensor  # [1, T] bool: the position predicts a token the model sampled
    trained: torch.Tensor  # [1, T] bool: ... of an episode that is trained on
    advantage: torch.Tensor  # [1, T]
    length: torch.Tensor  # [1, T] the response length of the position's episode
    rollout_logp: torch.Tensor  # [1, T]
    episode: torch.Tensor  # [1, T] index of the episode within the micro batch (-1: none)


def pack_episodes(episodes: list[Episode], device: torch.device) -> PackedEpisodes:
    """Position t predicts token t+1: a response of R tokens after a prompt of P tokens is
    predicted at positions P-1 .. P+R-2 of its sequence. Of an agentic episode, only the
    tokens the model sampled are targets (`Episode.response_mask`); `length` counts those."""
    cols: dict[str, list] = {k: [] for k in PackedEpisodes.__dataclass_fields__}
    for i, e in enumerate(episodes):
        n_prompt, n_resp = len(e.prompt_ids), len(e.response_ids)
        n = n_prompt + n_resp
        sampled = e.response_mask if e.response_mask is not None else [True] * n_resp
        at_response = [False] * (n_prompt - 1) + list(sampled) + [False]
        targets = [t if m else IGNORE_INDEX for t, m in zip(e.response_ids, sampled, strict=True)]
        cols["input_ids"] += e.prompt_ids + e.response_ids
        cols["position_ids"] += range(n)
        cols["labels"] += [IGNORE_INDEX] * (n_prompt - 1) + targets + [IGNORE_INDEX]
        cols["response"] += at_response
        cols["trained"] += [r and e.trained for r in at_response]
        cols["advantage"] += [e.advantage] * n
        cols["length"] += [e.model_tokens] * n
        cols["rollout_logp"] += [0.0] * (n_prompt - 1) + e.rollout_logprobs + [0.0]
        cols["episode"] += [i] * n
    dtypes = {"response": torch.bool, "trained": torch.bool, "advantage": torch.float32}
    dtypes |= {"rollout_logp": torch.float32}
    return PackedEpisodes(
        **{
            k: torch.tensor(v, dtype=dtypes.get(k, torch.long), device=device)[None]
            for k, v in cols.items()
        }
    )


def packed_logits(model: torch.nn.Module, batch: PackedEpisodes) -> torch.Tensor:
    """Logits of a packed row. No cache and no attention mask: that is how transformers reads
    restarting position ids as sequence boundaries (with a cache, episodes would see each
    other)."""
    return model(input_ids=batch.input_ids, position_ids=batch.position_ids, use_cache=False).logits
