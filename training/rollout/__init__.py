"""Rollout engines: sample responses from the current policy, with their log-probs.

`make_rollout_engine(kind, ...)` builds the `hf` engine (transformers, CPU or GPU) or the optional
`vllm` engine (imported only when chosen). Requests and completions are generation's one
vocabulary (`schemas.generation`); `rollout_request` makes a token-id prompt request.
"""

from training.rollout.engine import (
    POLICY,
    RolloutEngine,
    rollout_request,
    sampling_logprobs,
)
from training.rollout.engines import make_rollout_engine

__all__ = [
    "POLICY",
    "RolloutEngine",
    "make_rollout_engine",
    "rollout_request",
    "sampling_logprobs",
]
