"""vLLM backend: offline `LLM.generate` on GPUs, the backend for real teachers.

vLLM is an optional extra (`pip install 'cascade-curation[vllm]'`) and is imported only when
this backend is built. Requests for the same chat and sampling whose seeds run consecutively
(`s, s+1, ..., s+n-1`, what `plan_jobs` produces for k samples) become one
`SamplingParams(n=n, seed=s)`: vLLM seeds child i with `s + i`, so the prompt is prefilled
once and each sample keeps its own seed. After a resumed run only the missing seeds are
asked for, still as consecutive runs. This module is not exercised on the development
machines (no GPU, vLLM not installable); its unit test runs wherever vllm imports.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any

from curation.generate.backend import BackendError, render_chat
from curation.generate.split import prompt_opens_reasoning
from schemas.generation import Completion, GenerationRequest
from schemas.sampling import vllm_sampling_arguments


def seed_runs(requests: Sequence[GenerationRequest]) -> list[list[GenerationRequest]]:
    """Group requests that differ only by consecutive seeds, each group in seed order."""
    by_prompt: dict[str, list[GenerationRequest]] = {}
    for request in requests:
        identity = json.dumps(
            [request.model, request.messages, request.template_kwargs, request.sampling.as_dict()],
            sort_keys=True,
        )
        by_prompt.setdefault(identity, []).append(request)
    runs: list[list[GenerationRequest]] = []
    for group in by_prompt.values():
        group.sort(key=lambda r: r.seed)
        current = [group[0]]
        for request in group[1:]:
            if request.seed == current[-1].seed + 1:
                current.append(request)
            else:
                runs.append(current)
                current = [request]
        runs.append(current)
    return runs


def sampling_params_for(run: Sequence[GenerationRequest]) -> Any:
    """`vllm.SamplingParams` for one seed run: n samples, child i seeded with seed + i."""
    from vllm import SamplingParams

    return SamplingParams(n=len(run), seed=run[0].seed, **vllm_sampling_arguments(run[0].sampling))


class VllmBackend:
    """One model in an offline vLLM engine; `prompts_per_call` seed runs per generate call."""

    name = "vllm"

    def __init__(
        self,
        model: str,
        *,
        tensor_parallel_size: int = 1,
        max_model_len: int | None = None,
        gpu_memory_utilization: float = 0.9,
        dtype: str = "auto",
        prompts_per_call: int = 512,
    ) -> None:
        try:
            from vllm import LLM
        except ImportError as exc:
            raise BackendError(
                "backend 'vllm' needs the vllm package (pip install 'cascade-curation[vllm]' on "
                f"a machine with a supported GPU); import failed: {exc}"
            ) from None
        self.model = model
        self.prompts_per_call = prompts_per_call
        self.llm = LLM(
            model=model,
            tensor_parallel_size=tensor_parallel_size,
            max_model_len=max_model_len,
            gpu_memory_utilization=gpu_memory_utilization,
            dtype=dtype,
        )
        self.tokenizer = self.llm.get_tokenizer()

    def generate(self, requests: Sequence[GenerationRequest]) -> Iterator[Completion]:
        """Yield after each `LLM.generate` call, so results are committed as they come."""
        runs = seed_runs(requests)
        for start in range(0, len(runs), self.prompts_per_call):
            chunk = runs[start : start + self.prompts_per_call]
            prompts = [render_chat(self.tokenizer, run[0]) for run in chunk]
            params = [sampling_params_for(run) for run in chunk]
            outputs = self.llm.generate(prompts, params, use_tqdm=False)
            for run, prompt, output in zip(chunk, prompts, outputs, strict=True):
                for sample in output.outputs:
                    yield Completion(
                        key=run[sample.index].key,
                        text=sample.text,
                        prompt_tokens=len(output.prompt_token_ids or []),
                        completion_tokens=len(sample.token_ids),
                        finish_reason=str(sample.finish_reason or "stop"),
                        opened_in_prompt=prompt_opens_reasoning(prompt),
                    )

    def close(self) -> None:
        del self.llm
