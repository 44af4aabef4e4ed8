"""Tiny instruction-following prompt sets for the toy profiles of `if_rl` and `if_rl_ifbench`.

Short requests a tiny model can answer in a line ("Write a sentence about cats."), from a few
templates and topics; the RL prompts and the held-out eval prompts use different templates,
so decontaminating one against the other keeps them apart. Nothing is trained or downloaded:
the constraints the toy profiles attach are checked by the IF verifier alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from builders.toy_world import write_jsonl

TOPICS = (
    "cats", "dogs", "rain", "the sea", "apples", "trees", "music", "the moon", "bread",
    "snow", "birds", "summer", "a river", "coffee", "books", "the wind",
)  # fmt: skip
RL_TEMPLATES = (
    "Write a sentence about {}.",
    "Describe {} in a few words.",
    "Tell me one fact about {}.",
)
EVAL_TEMPLATES = ("Say something nice about {}.",)


@dataclass(frozen=True)
class ToyIFFiles:
    """The toy IF prompt files of a lake."""

    rl_prompts: Path
    eval_file: Path


def toy_prompts(templates: tuple[str, ...], source: str) -> list[dict[str, str]]:
    """One row per (template, topic): `id` and `problem`, as a prompt file or a benchmark."""
    texts = [t.format(topic) for t in templates for topic in TOPICS]
    return [{"id": f"{source}-{i}", "problem": text} for i, text in enumerate(texts)]


def toy_if_files(workdir: Path) -> ToyIFFiles:
    """Write (or rewrite, identically) the toy IF files beside the lake `workdir` belongs to."""
    root = (workdir.parent / "toy").resolve()
    rl = root / "if_rl_prompts.jsonl"
    evaluation = root / "if_eval.jsonl"
    write_jsonl(rl, toy_prompts(RL_TEMPLATES, "toy_if"))
    write_jsonl(evaluation, toy_prompts(EVAL_TEMPLATES, "toy_if_eval"))
    return ToyIFFiles(rl, evaluation)
