"""The one interface every teacher backend implements (its values: `schemas.generation`).

A backend turns `GenerationRequest`s (one chat, one seed each) into `Completion`s. It may
batch, parallelise or reorder internally, but it yields each completion as soon as it is
done so the caller can commit small chunks and a killed run loses little.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Literal, Protocol

from schemas.generation import Completion, GenerationRequest

BackendName = Literal["hf", "vllm", "openai"]
BACKENDS: tuple[str, ...] = ("hf", "vllm", "openai")


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
