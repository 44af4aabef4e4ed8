"""Rollout engines: sample responses from the current policy, with their log-probs.

`make_rollout_engine(kind, ...)` builds the `hf` engine (transformers, CPU or GPU) or the optional
`vllm` engine (imported only when chosen).
"""

from training.rollout.engine import (
    Rollout,
    RolloutEngine,
    RolloutRequest,
    SamplingParams,
    sampling_logprobs,
)
from training.rollout.engines import make_rollout_engine

__all__ = [
    "Rollout",
    "RolloutEngine",
    "RolloutRequest",
    "SamplingParams",
    "make_rollout_engine",
    "sampling_logprobs",
]
