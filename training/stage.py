"""What every stage gets from the runner and hands back, and how it finds its model.

A stage starts from the previous stage's final model (`init_from`) or, first in the cascade,
from the manifest's base model and tokenizer; its datasets arrive already hash-checked.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from schemas.training_manifest import AnyStage, TrainingManifest
from training.datasets import VerifiedRef
from training.models import build_model, is_local_model, load_tokenizer


@dataclass
class StageContext:
    """Where a stage reads from and writes to, and how the run was started."""

    manifest: TrainingManifest
    manifest_path: Path
    stage: AnyStage
    stage_dir: Path
    init_from: Path | None  # previous stage's final model (None: the manifest's base model)
    datasets: list[VerifiedRef]  # the stage's references, hash-checked by the runner
    lake_path: str | Path | None = None
    resume: bool = False
    show_progress: bool = True
    extra_provenance: dict = field(default_factory=dict)
    eval_dataset: VerifiedRef | None = None  # RL stages with `evaluation`
    reward_fn: object | None = None  # RL: replaces the stage's reward (TRL-style callable)
    stage_finals: dict[str, Path] = field(default_factory=dict)  # earlier stages' final dirs
    control: str | None = None  # GRPO: a control run (training.episode.CONTROLS)

    @property
    def checkpoint_dir(self) -> Path:
        return self.stage_dir / "checkpoints"

    @property
    def final_dir(self) -> Path:
        return self.stage_dir / "final"


@dataclass
class StageResult:
    final_dir: Path
    steps: int
    last_loss: float | None
    summary: str | None = None  # RL: why the stage ended, how many steps carried a signal


def stage_tokenizer(ctx: StageContext, rank: int, texts: Iterable[str] | None = None) -> object:
    """The previous stage's tokenizer, or the manifest's (trained in-process from `texts` and
    kept in `<stage>/tokenizer` so a resumed run uses the very same one)."""
    if ctx.init_from is not None:
        return load_tokenizer(str(ctx.init_from))
    saved = ctx.stage_dir / "tokenizer"
    exists = is_local_model(saved) or (saved / "tokenizer.json").is_file()
    torch.distributed.barrier()  # every rank has looked before rank 0 may write it
    if exists:
        return load_tokenizer(str(saved))
    tokenizer = load_tokenizer(ctx.manifest.tokenizer or ctx.manifest.base_model, texts=texts)
    if rank == 0:
        tokenizer.save_pretrained(saved)  # type: ignore[attr-defined]
    return tokenizer


def stage_model(ctx: StageContext, vocab_size: int, attn: str) -> torch.nn.Module:
    """The model the stage starts from (fp32 weights; DeepSpeed casts for bf16)."""
    base = str(ctx.init_from) if ctx.init_from is not None else ctx.manifest.base_model
    return build_model(base, ctx.manifest.model_overrides, vocab_size, attn, ctx.stage.seed)
