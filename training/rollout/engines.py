"""Build a rollout engine by name; apart from the engines, so none of them imports it back."""

from __future__ import annotations

import torch

from training.rollout.engine import RolloutEngine


def make_rollout_engine(
    kind: str,
    policy: torch.nn.Module,
    *,
    batch_size: int,
    device: torch.device | None = None,
    model_dir: str | None = None,
    gpu_memory_utilization: float = 0.3,
    seed: int = 0,
    max_model_len: int | None = None,
) -> RolloutEngine:
    """The `hf` engine (a copy of `policy` decoding with a static cache) or `vllm`."""
    if kind == "hf":
        from training.rollout.hf import HfEngine

        return HfEngine.from_policy(policy, batch_size=batch_size, device=device)
    if kind == "vllm":
        from training.rollout.vllm import VllmEngine

        if model_dir is None:
            raise ValueError("the vllm engine starts from a saved model directory")
        return VllmEngine(
            model_dir,
            gpu_memory_utilization=gpu_memory_utilization,
            seed=seed,
            max_model_len=max_model_len,
        )
    raise ValueError(f"unknown rollout engine {kind!r}; known: hf, vllm")
