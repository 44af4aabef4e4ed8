"""One SFT stage with DeepSpeed: packed ChatML data, assistant-only token-level loss.

`run_sft_stage` reads top to bottom: setup, data, tokenizer and model, engine, resume, then the
loop (micro batches -> backward -> step -> log -> checkpoint) and the final model.

Loss: the sum of per-token cross-entropy over the global batch's target tokens divided by
their count (token-level mean over the whole global batch, whatever the packing, the
accumulation split or the number of ranks), so packed and unpacked batches give the same
gradient.
"""

from __future__ import annotations

import math
import time

import torch
import torch.nn.functional as F

from schemas.chat_template import IGNORE_INDEX
from schemas.training_manifest import SFTStage
from training import checkpoint as ckpt
from training.datasets import load
from training.distributed import all_sum, grad_norm, optimizer_step
from training.packing import Batch, collate, epoch_rows
from training.sft_data import tokenize_stage, training_texts
from training.stage import (
    StageContext,
    StageResult,
    resume_stage,
    stage_engine,
    stage_model,
    stage_tokenizer,
    start_stage,
    step_delay,
)
from training.step_log import StepLog

# ---------------------------------------------------------------- data stream ----------------


class DataStream:
    """Global batches in a fixed order that depends only on (seed, epoch): resumable by step."""

    def __init__(self, lengths: list[int], stage: SFTStage) -> None:
        self.lengths = lengths
        self.stage = stage
        self._epochs: dict[int, list[list[int]]] = {}  # only the current epoch is kept
        self._steps: dict[int, int] = {}  # full batches per epoch, kept for every epoch seen

    def rows(self, epoch: int) -> list[list[int]]:
        if epoch not in self._epochs:
            self._epochs = {
                epoch: epoch_rows(
                    self.lengths, self.stage.max_seq_len, self.stage.seed, epoch, self.stage.packing
                )
            }
        return self._epochs[epoch]

    def steps_in_epoch(self, epoch: int) -> int:
        if epoch not in self._steps:
            self._steps[epoch] = len(self.rows(epoch)) // self.stage.batch.global_batch_size
        return self._steps[epoch]

    def total_steps(self) -> int:
        """max_steps, else epochs x steps per epoch (epoch 0's packing; partial epochs allowed)."""
        if self.stage.max_steps is not None:
            return self.stage.max_steps
        per_epoch = self.steps_in_epoch(0)
        if per_epoch == 0:
            raise ValueError(
                f"stage {self.stage.name!r}: {len(self.rows(0))} rows per epoch is less than "
                f"one global batch of {self.stage.batch.global_batch_size}"
            )
        return max(1, math.ceil((self.stage.epochs or 1) * per_epoch))

    def position(self, step: int) -> tuple[int, int]:
        """(epoch, batch index in epoch) of global step `step`."""
        epoch = 0
        while step >= (n := self.steps_in_epoch(epoch)):
            if n == 0:
                raise ValueError(f"stage {self.stage.name!r}: an epoch holds no full batch")
            step -= n
            epoch += 1
        return epoch, step

    def global_batch(self, step: int) -> list[list[int]]:
        epoch, index = self.position(step)
        size = self.stage.batch.global_batch_size
        return self.rows(epoch)[index * size : (index + 1) * size]


def token_losses(model: torch.nn.Module, batch: Batch) -> torch.Tensor:
    """Per-position cross-entropy (0 where labels are ignored), shape [batch, seq]."""
    out = model(input_ids=batch.input_ids, position_ids=batch.position_ids, use_cache=False)
    logits = out.logits.float()
    losses = F.cross_entropy(
        logits.reshape(-1, logits.shape[-1]),
        batch.labels.reshape(-1),
        ignore_index=IGNORE_INDEX,
        reduction="none",
    )
    return losses.view_as(batch.labels)


def check_packing_isolation(
    model: torch.nn.Module, device: torch.device, vocab: int, atol: float
) -> float:
    """Fail fast if the attention backend lets a packed sample see the one before it.

    Packing relies on transformers turning restarting position ids into sequence boundaries;
    a backend or version that ignores them would train on cross-sample attention silently.
    One tiny forward (fixed tokens, no RNG) compares a sample alone and packed after another.
    Returns the largest logit difference.
    """
    first = torch.arange(5, 17) % vocab
    second = torch.arange(40, 49) % vocab
    was_training = model.training
    model.eval()
    with torch.no_grad():
        alone = model(
            input_ids=second[None].to(device),
            position_ids=torch.arange(9)[None].to(device),
            use_cache=False,
        ).logits[0]
        packed = model(
            input_ids=torch.cat([first, second])[None].to(device),
            position_ids=torch.cat([torch.arange(12), torch.arange(9)])[None].to(device),
            use_cache=False,
        ).logits[0, 12:]
    model.train(was_training)
    diff = float((alone.float() - packed.float()).abs().max())
    if diff > atol:
        raise RuntimeError(
            f"packed samples are not isolated with this attention backend (logits differ by "
            f"{diff:.3g} > {atol}); use attn_implementation sdpa, eager or flash_attention_2 "
            "with a transformers version that reads packed position ids, or set packing false"
        )
    return diff


# ---------------------------------------------------------------- the stage ------------------


def run_sft_stage(ctx: StageContext) -> StageResult:
    """Train one SFT stage to its final model directory; resume from the last checkpoint."""
    stage: SFTStage = ctx.stage  # type: ignore[assignment]
    setup = start_stage(ctx)
    rank, world, device, bf16 = setup.rank, setup.world, setup.device, setup.bf16

    # --- data, tokenizer, model, engine (hashes were checked by the runner) ------------------
    datasets = [load(v) for v in ctx.datasets]
    tokenizer = stage_tokenizer(ctx, rank, texts=training_texts(datasets))
    data = tokenize_stage(stage, datasets, tokenizer)
    if not data.samples:
        raise ValueError(f"stage {stage.name!r}: no sample fits max_seq_len {stage.max_seq_len}")
    stream = DataStream([len(s.input_ids) for s in data.samples], stage)
    total_steps = stream.total_steps()
    model = stage_model(ctx, len(tokenizer), setup.attn)
    engine, scheduler = stage_engine(model, stage, world, total_steps, bf16)
    if stage.packing:
        check_packing_isolation(engine, device, len(tokenizer), atol=0.1 if bf16 else 1e-3)

    # --- resume -------------------------------------------------------------------------------
    data_identity = {
        "datasets": [d.ref.content_hash for d in datasets],
        "samples": len(data.samples),
        "sample_tokens": sum(stream.lengths),
    }
    client = resume_stage(engine, ctx, data_identity, rank)
    start_step = client["step"] if client else 0
    record = ckpt.provenance(
        ctx,
        [d.describe() for d in datasets],
        samples=len(data.samples),
        dropped_too_long=data.dropped_too_long,
        dropped_no_target=data.dropped_no_target,
        world_size=world,
        bf16=bf16,
        attn_implementation=setup.attn,
    )

    # --- the loop: micro batches -> backward -> one step -> log -> checkpoint ----------------
    accumulation = stage.batch.accumulation_for(world)
    micro = stage.batch.micro_batch_size
    delay = step_delay()
    last_loss: float | None = None
    started = time.perf_counter()
    with StepLog(ctx.stage_dir, stage.name, total_steps, start_step, rank) as log:
        for step in range(start_step, total_steps):
            step_start = time.perf_counter()
            rows = stream.global_batch(step)
            batches = [
                collate(rows[i : i + micro], data.samples, tokenizer.pad_token_id)
                for i in range(0, len(rows), micro)
            ]
            n_targets = sum(b.target_tokens for b in batches)
            loss_sum = 0.0
            for batch in batches[rank * accumulation : (rank + 1) * accumulation]:
                per_token = token_losses(engine, batch.to(device))
                # DeepSpeed averages gradients over ranks: scale so the result is the mean over
                # every target token of the global batch.
                engine.backward(per_token.sum() * (world / n_targets), scale_wrt_gas=False)
                optimizer_step(engine)
                loss_sum += float(per_token.detach().sum())
            last_loss = all_sum(loss_sum, device) / n_targets
            done = step + 1
            log.write(
                {
                    "step": done,
                    "loss": last_loss,
                    "lr": scheduler.get_last_lr()[0],
                    "grad_norm": grad_norm(engine),
                    "target_tokens": n_targets,
                    "tokens": sum(int(b.input_ids.numel()) for b in batches),
                    "useful_tokens": sum(b.real_tokens for b in batches),
                    "step_seconds": time.perf_counter() - step_start,
                    "epoch": stream.position(step)[0],
                }
            )
            if done % stage.checkpoint_every_steps == 0 or done == total_steps:
                saved = {"data": data_identity}
                keep = stage.keep_checkpoints
                ckpt.save_step(engine, ctx.checkpoint_dir, done, saved, record, rank, keep)
            if delay:
                time.sleep(delay)

    # --- final model --------------------------------------------------------------------------
    record.update(step=total_steps, train_seconds=time.perf_counter() - started)
    ckpt.save_final(engine, tokenizer, ctx.final_dir, record, rank, stage.deepspeed.zero_stage)
    engine.destroy()
    return StageResult(ctx.final_dir, total_steps, last_loss)
