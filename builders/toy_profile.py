"""The `toy` profile of the recipes: the toy world's prompts and tiny models of our own.

No real teacher runs on our machines, so `--profile toy` proves the model-in-the-loop steps
for real: the toy world's tiny weak and strong models (trained once per lake by the project's
SFT trainer, on CPU, in a minute or two) answer column-arithmetic prompts through the `hf`
backend, and every pass rate, majority answer and response filter is computed from what they
actually generated.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from builders.toy_world import toy_problems, train_toy_models, write_jsonl

RL_PROMPTS = 120
SFT_PROMPTS = 80
EVAL_PROMPTS = 60
DIGITS = (1, 2)


@dataclass(frozen=True)
class ToySetup:
    """Where the toy files and models of a lake are."""

    models: dict[str, Path]
    rl_prompts: Path
    sft_prompts: Path
    eval_file: Path

    def sampler(self, name: str, *, k: int, temperature: float = 1.0) -> dict[str, Any]:
        """Recipe parameters for sampling toy model `name` ("weak" or "strong") k times."""
        return {
            "model": str(self.models[name]),
            "backend": "hf",
            "backend_options": {"batch_size": 32, "num_threads": 2},
            "mode": "think",
            "mode_switch": "flag",
            "k": k,
            "temperature": temperature,
            "top_p": 1.0,
            "max_new_tokens": 96,
        }


def toy_setup(workdir: Path) -> ToySetup:
    """The toy files and models for the lake `workdir` belongs to (made once, then reused)."""
    root = (workdir.parent / "toy").resolve()
    models = {name: root / "models" / name / "sft" / "final" for name in ("weak", "strong")}
    if not all((m / "config.json").is_file() for m in models.values()):
        models = train_toy_models(root / "models")
    # The digits the toy models were trained on: the pass rates then spread from easy
    # (one digit, no carry) to hard (two digits, two carries).
    eval_rows = toy_problems(EVAL_PROMPTS, seed=102, digits=DIGITS)
    sft_rows = toy_problems(SFT_PROMPTS, seed=101, digits=DIGITS, exclude=eval_rows)
    rl_rows = toy_problems(RL_PROMPTS, seed=103, digits=DIGITS, exclude=eval_rows + sft_rows)
    files = {}
    for name, rows in (("rl_prompts", rl_rows), ("sft_prompts", sft_rows), ("eval", eval_rows)):
        files[name] = root / f"{name}.jsonl"
        write_jsonl(files[name], rows)
    return ToySetup(models, files["rl_prompts"], files["sft_prompts"], files["eval"])
