"""Build a teacher backend by name; apart from the backends, so none of them imports it back.

Heavy libraries (torch, vllm, httpx) are imported only for the backend chosen.
"""

from __future__ import annotations

from typing import Any

from curation.generate.backend import BACKENDS, Backend


def make_backend(name: str, model: str, **options: Any) -> Backend:
    """Build a backend by name; heavy libraries are imported only for the chosen one."""
    if name == "hf":
        from curation.generate.hf import HfBackend

        return HfBackend(model, **options)
    if name == "vllm":
        from curation.generate.vllm import VllmBackend

        return VllmBackend(model, **options)
    if name == "openai":
        from curation.generate.openai import OpenAIBackend

        return OpenAIBackend(model, **options)
    raise ValueError(f"unknown backend {name!r}; choose one of {', '.join(BACKENDS)}")
