"""The one interface every teacher backend implements (its values: `schemas.generation`).

A backend turns `GenerationRequest`s (one chat, one seed each) into `Completion`s. It may
batch, parallelise or reorder internally, but it yields each completion as soon as it is
done so the caller can commit small chunks and a killed run loses little.
"""

from __future__ import annotations

from typing import Literal, Protocol

from schemas.generation import Generator

BackendName = Literal["hf", "vllm", "openai"]
BACKENDS: tuple[str, ...] = ("hf", "vllm", "openai")


class Backend(Generator, Protocol):
    """A teacher backend: a `Generator` bound to one model."""

    model: str


class BackendError(RuntimeError):
    """A backend could not produce a completion; the message says which request and why."""
