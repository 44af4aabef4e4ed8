"""The one interface every teacher backend implements, and the values that cross it.

A backend turns `GenerationRequest`s (one chat, one seed each) into `Completion`s. It may
batch, parallelise or reorder internally, but it yields each completion as soon as it is
done so the caller can commit small chunks and a killed run loses little.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, Protocol

BackendName = Literal["hf", "vllm", "openai"]
BACKENDS: tuple[str, ...] = ("hf", "vllm", "openai")


@dataclass(frozen=True)
class Sampling:
    """Sampling parameters shared by all backends; `top_k=0` disables top-k.

    `temperature=0` means greedy decoding (seeds then make no difference).
    """

    max_new_tokens: int = 1024
    temperature: float = 0.6
    top_p: float = 0.95
    top_k: int = 0

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0 (0 disables it), got {self.top_k}")

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class GenerationRequest:
    """One sample to generate: a chat for one model, in one mode, with one seed.

    `messages` already carry any mode flag (`/think`); `template_kwargs` go to the chat
    template (Qwen3's `enable_thinking`), locally or via the server's `chat_template_kwargs`.
    `key` is the caller's id for the result (the cache fingerprint).
    """

    key: str
    model: str
    messages: tuple[dict[str, str], ...]
    sampling: Sampling
    seed: int
    template_kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Completion:
    """What a backend returns for one request.

    `finish_reason` is `stop` (the model ended) or `length` (cut at max_new_tokens).
    `reasoning` is set only when the backend got it separately (server-side reasoning
    parser); `opened_in_prompt` when the rendered prompt ended with `<think>`.
    `token_logprobs`, when asked for (the openai backend's `top_logprobs`), is one entry per
    generated token as OpenAI-compatible servers give it: `{"token", "logprob",
    "top_logprobs": [{"token", "logprob"}, ...]}`.
    """

    key: str
    text: str
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str
    reasoning: str | None = None
    opened_in_prompt: bool = False
    token_logprobs: tuple[dict[str, Any], ...] | None = None


class Backend(Protocol):
    """A teacher backend bound to one model."""

    name: str
    model: str

    def generate(self, requests: Sequence[GenerationRequest]) -> Iterator[Completion]:
        """Yield one Completion per request, in any order, as soon as each is done."""
        ...

    def close(self) -> None:
        """Free the model / connections (a run may load another model next)."""
        ...


class BackendError(RuntimeError):
    """A backend could not produce a completion; the message says which request and why."""
