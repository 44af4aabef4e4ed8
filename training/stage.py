"""What every stage gets from the runner and hands back, and the set-up SFT, reward-model and
RL stages share: the process group, attention and precision, tokenizer, starting model,
DeepSpeed engine, seeding and resume, and the test hook that slows steps.

A stage starts from the previous stage's final model (`init_from`) or, first in the cascade,
from the manifest's base model and tokenizer; its datasets arrive already hash-checked.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from schemas.training_manifest import AnyStage, TrainingManifest
from training import checkpoint as ckpt
from training.datasets import VerifiedRef
from training.distributed import (
    enable_gradient_checkpointing,
    init_distributed,
    make_deepspeed_engine,
)
from training.models import build_model, is_local_model, load_tokenizer, pick_attn_implementation

STEP_DELAY_ENV = "CASCADE_TRAIN_STEP_DELAY_S"  # tests: slow steps so a kill lands mid-run


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


@dataclass(frozen=True)
class StageSetup:
    """Where this process trains: its rank in the world, its device, and the attention
    implementation and precision that follow from the manifest and the device."""

    rank: int
    world: int
    device: torch.device
    attn: str
    bf16: bool

    @property
    def frozen_dtype(self) -> torch.dtype:
        """The dtype of frozen models (KL reference, teachers): the policy's compute dtype."""
        return torch.bfloat16 if self.bf16 else torch.float32


def start_stage(ctx: StageContext) -> StageSetup:
    """Join the process group, make the stage's directory, refuse to overwrite checkpoints
    without `--resume`, and choose attention and bf16 (bf16 only on GPU)."""
    rank, world, device = init_distributed()
    ctx.stage_dir.mkdir(parents=True, exist_ok=True)
    ckpt.refuse_to_overwrite(ctx.checkpoint_dir, ctx.stage.name, ctx.resume)
    on_gpu = device.type == "cuda"
    attn = pick_attn_implementation(ctx.manifest.attn_implementation, on_gpu)
    return StageSetup(rank, world, device, attn, ctx.stage.deepspeed.bf16 and on_gpu)


def stage_engine(
    model: torch.nn.Module,
    stage: AnyStage,
    world: int,
    total_steps: int,
    bf16: bool,
) -> tuple[object, torch.optim.lr_scheduler.LambdaLR]:
    """`model` (activation checkpointing as the stage asks, no KV cache) in a DeepSpeed engine
    with the stage's optimizer, schedule and batch split; returns (engine, scheduler)."""
    if stage.gradient_checkpointing:
        enable_gradient_checkpointing(model)
    model.config.use_cache = False
    return make_deepspeed_engine(
        model,
        stage.optimizer,
        stage.deepspeed,
        stage.batch.micro_batch_size,
        stage.batch.accumulation_for(world),
        total_steps,
        bf16,
    )


def resume_stage(engine: object, ctx: StageContext, data_identity: dict, rank: int) -> dict | None:
    """Seed the stage, then (with `--resume`) restore its newest checkpoint, trained on the
    same data (`data_identity`): its client state (None: start from step 0)."""
    torch.manual_seed(ctx.stage.seed)
    return ckpt.resume(engine, ctx, data_identity, rank)


def step_delay() -> float:
    """Seconds to sleep after each step (`CASCADE_TRAIN_STEP_DELAY_S`; tests kill mid-run)."""
    return float(os.environ.get(STEP_DELAY_ENV, "0") or 0)
