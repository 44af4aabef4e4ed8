"""Transformers backend: batched `generate` on CPU or GPU, one seed per sample.

`generate` draws all rows of a batch from one global random stream, so a sample would
depend on which other prompts shared its batch. To keep "sample i of prompt p with seed s"
the same whatever the batching (and so cacheable), sampling is done by a logits processor
that gives each row its own seeded stream and hands greedy decoding a one-hot choice.
The model's own generation_config defaults (temperature, repetition penalty) are not used:
the request's `SamplingParams` is the whole truth, as it is for the other backends.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from curation.generate.backend import BackendError, render_chat
from curation.generate.split import prompt_opens_reasoning
from schemas.generation import Completion, GenerationRequest, SamplingParams
from schemas.sampling import inverse_cdf_sample, seeded_uniforms, truncate

if TYPE_CHECKING:
    import torch


def completion_length(token_ids: Sequence[int], eos_ids: set[int]) -> tuple[int, str]:
    """Tokens that belong to the completion (through the first end token) and why it ended.

    >>> completion_length([5, 7, 2, 2], {2})
    (3, 'stop')
    >>> completion_length([5, 7, 9], {2})
    (3, 'length')
    """
    for index, token in enumerate(token_ids):
        if token in eos_ids:
            return index + 1, "stop"
    return len(token_ids), "length"


class SeededRowSampler:
    """Logits processor: sample each row from its own seeded stream, return a one-hot.

    The sampling itself is `schemas.sampling` (shared with the rollout engine): each
    row's `max_new_tokens` uniforms are drawn up front from its seed, and step t samples with
    the t-th one after temperature, top-k and top-p.
    """

    def __init__(
        self, seeds: Sequence[int], sampling: SamplingParams, device: torch.device
    ) -> None:
        import torch

        self.uniforms = torch.stack(
            [seeded_uniforms(s, sampling.max_new_tokens) for s in seeds]
        ).to(device)
        self.sampling = sampling
        self.step = 0

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        import torch

        scaled = scores.float() / self.sampling.temperature
        chosen = inverse_cdf_sample(truncate(scaled, self.sampling), self.uniforms[:, self.step])
        self.step += 1
        one_hot = torch.full_like(scores, float("-inf"))
        one_hot.scatter_(1, chosen[:, None], 0.0)
        return one_hot


class HfBackend:
    """A transformers causal LM as a teacher; `batch_size` prompts per `generate` call.

    `num_threads` sets torch's CPU threads for the whole process (None: torch's default).
    `path` loads the weights from a directory while `model` only names them: rows and cache
    keys then hold that name (a stable identity such as a content hash of the weights), not
    one machine's directory, so the same model builds the same rows in any lake.
    """

    name = "hf"

    def __init__(
        self,
        model: str,
        *,
        batch_size: int = 8,
        device: str | None = None,
        dtype: str = "auto",
        num_threads: int | None = None,
        path: str | None = None,
    ) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.model = model
        self.batch_size = batch_size
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        if num_threads is not None and self.device.type == "cpu":
            # On a busy CPU intra-op threads spin against other processes: 1 can be 100x faster.
            torch.set_num_threads(num_threads)
        if dtype == "auto":
            torch_dtype = torch.bfloat16 if self.device.type == "cuda" else torch.float32
        else:
            torch_dtype = getattr(torch, dtype)
        source = path or model
        if path is not None and not Path(path).expanduser().is_dir():
            raise BackendError(f"model {model!r}: directory {path} does not exist")
        if source.startswith(("/", "./", "../", "~")) and not Path(source).expanduser().exists():
            raise BackendError(f"model directory {source} does not exist")
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(source)
            self.lm = AutoModelForCausalLM.from_pretrained(source, dtype=torch_dtype)
        except (OSError, ValueError) as exc:
            raise BackendError(f"cannot load model {model!r} with transformers: {exc}") from exc
        self.lm.to(self.device).eval()
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.eos_ids = _end_token_ids(self.tokenizer, self.lm.generation_config)
        # Special tokens are not text, except the reasoning markers some tokenizers mark
        # special: dropping those would hide where a response's reasoning ends.
        markers = {self.tokenizer.convert_tokens_to_ids(m) for m in ("<think>", "</think>")}
        self.hidden_ids = set(self.tokenizer.all_special_ids) - markers
        if not self.eos_ids:
            raise BackendError(f"model {model!r} declares no end-of-sequence token")

    def generate(self, requests: Sequence[GenerationRequest]) -> Iterator[Completion]:
        """Batch requests of equal sampling, shortest prompts together; yield per batch."""
        for request in requests:
            if request.model != self.model:
                raise BackendError(
                    f"request {request.key} is for model {request.model!r}, "
                    f"this backend serves {self.model!r}"
                )
        rendered = {r.key: render_chat(self.tokenizer, r) for r in requests}
        lengths = {
            key: len(self.tokenizer(text, add_special_tokens=False)["input_ids"])
            for key, text in rendered.items()
        }
        by_sampling: dict[SamplingParams, list[GenerationRequest]] = {}
        for request in requests:
            by_sampling.setdefault(request.sampling, []).append(request)
        for sampling, group in by_sampling.items():
            group = sorted(group, key=lambda r: lengths[r.key])
            for start in range(0, len(group), self.batch_size):
                batch = group[start : start + self.batch_size]
                yield from self._generate_batch(batch, [rendered[r.key] for r in batch], sampling)

    def _generate_batch(
        self, batch: list[GenerationRequest], prompts: list[str], sampling: SamplingParams
    ) -> list[Completion]:
        import torch
        from transformers import GenerationConfig, LogitsProcessorList

        encoded = self.tokenizer(
            prompts, return_tensors="pt", padding=True, add_special_tokens=False
        ).to(self.device)
        eos_ids = self.eos_ids | set(sampling.stop_token_ids)
        config = GenerationConfig(
            max_new_tokens=sampling.max_new_tokens,
            do_sample=False,
            pad_token_id=self.tokenizer.pad_token_id,
            eos_token_id=sorted(eos_ids),
        )
        processors = LogitsProcessorList()
        if sampling.temperature > 0:
            processors.append(SeededRowSampler([r.seed for r in batch], sampling, self.device))
        with torch.inference_mode():
            output = self.lm.generate(
                **encoded, generation_config=config, logits_processor=processors
            )
        new_tokens = output[:, encoded["input_ids"].shape[1] :].tolist()
        prompt_tokens = encoded["attention_mask"].sum(dim=1).tolist()
        completions = []
        for request, prompt, tokens, n_prompt in zip(
            batch, prompts, new_tokens, prompt_tokens, strict=True
        ):
            n, finish = completion_length(tokens, eos_ids)
            completions.append(
                Completion(
                    key=request.key,
                    text=self.tokenizer.decode(
                        [t for t in tokens[:n] if t not in self.hidden_ids],
                        skip_special_tokens=False,
                    ),
                    prompt_tokens=int(n_prompt),
                    completion_tokens=n,
                    finish_reason=finish,
                    opened_in_prompt=prompt_opens_reasoning(prompt),
                )
            )
        return completions

    def close(self) -> None:
        import torch

        del self.lm
        if self.device.type == "cuda":
            torch.cuda.empty_cache()


def _end_token_ids(tokenizer: Any, generation_config: Any) -> set[int]:
    ids: set[int] = set()
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    configured = getattr(generation_config, "eos_token_id", None)
    if isinstance(configured, int):
        ids.add(configured)
    elif configured:
        ids.update(int(i) for i in configured)
    return ids
