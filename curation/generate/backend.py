"""The one interface every teacher backend implements (its values: `schemas.generation`).

A backend turns `GenerationRequest`s (one chat, one seed each) into `Completion`s. It may
batch, parallelise or reorder internally, but it yields each completion as soon as it is
done so the caller can commit small chunks and a killed run loses little.
"""

from __future__ import annotations

from typing import Any, Literal, Protocol

from schemas.generation import GenerationRequest, Generator

BackendName = Literal["hf", "vllm", "openai"]
BACKENDS: tuple[str, ...] = ("hf", "vllm", "openai")


class Backend(Generator, Protocol):
    """A teacher backend: a `Generator` bound to one model."""

    model: str


class BackendError(RuntimeError):
    """A backend could not produce a completion; the message says which request and why."""


def render_chat(tokenizer: Any, request: GenerationRequest) -> str:
    """A request's messages in the teacher tokenizer's own chat template: a teacher answers in
    the format it was trained on (its response is re-rendered in `schemas.chat_template` for
    the student)."""
    if not getattr(tokenizer, "chat_template", None):
        raise BackendError(
            f"model {request.model!r}: its tokenizer has no chat template, so prompts cannot "
            "be rendered the way the teacher was trained"
        )
    return tokenizer.apply_chat_template(
        [dict(m) for m in request.messages],
        tokenize=False,
        add_generation_prompt=True,
        **request.template_kwargs,
    )
