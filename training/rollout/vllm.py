"""The `vllm` rollout engine: a colocated vLLM `LLM` in the trainer's process (optional extra).

vLLM is imported only when this engine is built (`pip install -e '.[vllm]'`, GPU only). The
engine starts from the stage's initial model directory and takes the policy's weights after
every optimizer step through the model's own `load_weights`, then drops its prefix cache
(cached prompt KV was computed with the old weights). Run with
`VLLM_ENABLE_V1_MULTIPROCESSING=0` so the engine core lives in this process and its model
can be reached; tensor parallelism is 1 (each data-parallel rank has its own engine).

Log-probs: vLLM reports the sampled token's log-prob after its sampling processors
(`logprobs_mode="processed_logprobs"`), which equals the `hf` engine's convention
(temperature applied, no truncation) when top-k and top-p are off; the policy update
recomputes log-probs in the training forward either way.

The parts that do not need vLLM (request -> SamplingParams arguments, outputs -> Completions)
are plain functions, tested without it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import torch

from schemas.generation import Completion, GenerationRequest
from schemas.sampling import vllm_sampling_arguments
from training.rollout.engine import rollout_prompt


def import_vllm() -> Any:
    """The vllm module, or an ImportError saying how to get it."""
    try:
        import vllm
    except ImportError as exc:
        raise ImportError(
            "the vllm rollout engine needs the optional vllm package (pip install -e "
            "'.[vllm]', on a GPU machine); use rollout.engine 'hf' otherwise"
        ) from exc
    return vllm


def sampling_kwargs(request: GenerationRequest) -> dict:
    """Keyword arguments of `vllm.SamplingParams` for one request (n=1, its own seed)."""
    return {
        "n": 1,
        **vllm_sampling_arguments(request.sampling),
        "seed": request.seed,
        "logprobs": 0,  # the sampled token's log-prob only
        "detokenize": False,
    }


def completion_from_output(request: GenerationRequest, output: Any) -> Completion:
    """A Completion from a vLLM `RequestOutput` (its first and only completion).

    The stop token is kept at the end of a stopped response, as the `hf` engine does.
    """
    key, stop_token_ids = request.key, request.sampling.stop_token_ids
    completion = output.outputs[0]
    tokens = list(completion.token_ids)
    logprobs = [
        float(step[token].logprob) for token, step in zip(tokens, completion.logprobs, strict=True)
    ]
    stopped = completion.finish_reason == "stop"
    if stopped and (not tokens or tokens[-1] not in stop_token_ids):
        raise ValueError(
            f"vLLM request {key} stopped on {completion.stop_reason!r}, not on a stop token; "
            "only stop tokens are supported"
        )
    return Completion(
        key,
        "",
        len(rollout_prompt(request)),
        len(tokens),
        "stop" if stopped else "length",
        token_ids=tokens,
        logprobs=logprobs,
    )


class VllmEngine:
    """A colocated vLLM engine; see the module docstring."""

    name = "vllm"

    def __init__(
        self,
        model_dir: str,
        *,
        gpu_memory_utilization: float = 0.3,
        seed: int = 0,
        max_model_len: int | None = None,
    ) -> None:
        vllm = import_vllm()
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        self._vllm = vllm
        self.llm = vllm.LLM(
            model=model_dir,
            gpu_memory_utilization=gpu_memory_utilization,
            seed=seed,
            max_model_len=max_model_len,
            enable_prefix_caching=True,
            dtype="bfloat16",
            logprobs_mode="processed_logprobs",
        )

    def generate(self, requests: Sequence[GenerationRequest]) -> Iterator[Completion]:
        from vllm.inputs import TokensPrompt

        prompts = [TokensPrompt(prompt_token_ids=list(rollout_prompt(r))) for r in requests]
        params = [self._vllm.SamplingParams(**sampling_kwargs(r)) for r in requests]
        outputs = self.llm.generate(prompts, sampling_params=params, use_tqdm=False)
        for request, output in zip(requests, outputs, strict=True):
            yield completion_from_output(request, output)

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        model = _engine_model(self.llm)
        model.load_weights((name.removeprefix("module."), t) for name, t in weights)
        self.llm.reset_prefix_cache()

    def close(self) -> None:
        del self.llm


def _engine_model(llm: Any) -> Any:
    """The torch model inside a colocated vLLM engine (V1 in-process, or the V0 layout)."""
    executor = llm.llm_engine.model_executor
    worker = executor.driver_worker
    for path in (("worker", "model_runner", "model"), ("model_runner", "model")):
        node = worker
        for attr in path:
            node = getattr(node, attr, None)
            if node is None:
                break
        if node is not None:
            return node
    raise RuntimeError(
        "cannot reach the model inside this vLLM version's engine; run with "
        "VLLM_ENABLE_V1_MULTIPROCESSING=0 (weights are synced in-process)"
    )
