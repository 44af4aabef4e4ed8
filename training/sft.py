"""One SFT stage with DeepSpeed: packed ChatML data, assistant-only token-level loss.

Reads top to bottom: distributed setup, data (hash-checked), tokenizer and model, DeepSpeed
engine, resume, then the loop (micro batches -> backward -> step -> log -> checkpoint), and
the final model save with its provenance.

Loss: the sum of per-token cross-entropy over the global batch's target tokens divided by
their count (token-level mean over the whole global batch, whatever the packing or the
accumulation split), so packed and unpacked batches give the same gradient.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F

from schemas.training_manifest import SFTStage, TrainingManifest
from training import checkpoint as ckpt
from training.chat_template import IGNORE_INDEX
from training.models import build_model, is_local_model, load_tokenizer, pick_attn_implementation
from training.packing import Batch, collate, epoch_rows
from training.sft_data import load_verified, tokenize_stage, training_texts

STEP_DELAY_ENV = "CASCADE_TRAIN_STEP_DELAY_S"  # tests: slow steps so a kill lands mid-run


@dataclass
class StageContext:
    """Where a stage reads from and writes to, and how the run was started."""

    manifest: TrainingManifest
    manifest_path: Path
    stage: SFTStage
    stage_dir: Path
    init_from: Path | None  # previous stage's final model (None: the manifest's base model)
    lake_path: str | Path | None = None
    resume: bool = False
    show_progress: bool = True
    extra_provenance: dict = field(default_factory=dict)


@dataclass
class StageResult:
    final_dir: Path
    steps: int
    last_loss: float | None


# ---------------------------------------------------------------- distributed setup ----------


def init_distributed() -> tuple[int, int, torch.device]:
    """Join (or create) the process group: NCCL on GPU, gloo on CPU; single process by default."""
    import deepspeed

    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("LOCAL_RANK", "0")
    os.environ.setdefault("WORLD_SIZE", "1")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    if "MASTER_PORT" not in os.environ:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            os.environ["MASTER_PORT"] = str(s.getsockname()[1])
    on_gpu = torch.cuda.is_available()
    if not torch.distributed.is_initialized():
        deepspeed.init_distributed(dist_backend="nccl" if on_gpu else "gloo")
    rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
    if on_gpu:
        local = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local)
        return rank, world, torch.device("cuda", local)
    return rank, world, torch.device("cpu")


def deepspeed_config(stage: SFTStage, accumulation: int, bf16: bool) -> dict:
    """The DeepSpeed config a stage implies (optimizer and scheduler are passed as objects)."""
    spec = stage.deepspeed
    zero: dict = {"stage": spec.zero_stage}
    if spec.offload_optimizer:
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    if spec.offload_params:
        zero["offload_param"] = {"device": "cpu", "pin_memory": True}
    if spec.zero_stage == 3:
        zero["stage3_gather_16bit_weights_on_model_save"] = True
    if spec.zero_stage >= 1:
        zero["overlap_comm"] = torch.cuda.is_available()
    return {
        "train_micro_batch_size_per_gpu": stage.batch.micro_batch_size,
        "gradient_accumulation_steps": accumulation,
        "gradient_clipping": spec.gradient_clipping,
        "zero_optimization": zero,
        "bf16": {"enabled": bf16},
        "steps_per_print": 10**9,
        "wall_clock_breakdown": False,
    }


def lr_lambda(stage: SFTStage, total_steps: int) -> Callable[[int], float]:
    """Linear warmup, then cosine / linear decay to `min_learning_rate_ratio` (or constant)."""
    opt = stage.optimizer
    warmup = (
        opt.warmup_steps if opt.warmup_steps is not None else round(opt.warmup_ratio * total_steps)
    )
    floor = opt.min_learning_rate_ratio

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / (warmup + 1)
        if opt.schedule == "constant":
            return 1.0
        progress = min(1.0, (step - warmup) / max(1, total_steps - warmup))
        decay = (
            0.5 * (1 + math.cos(math.pi * progress)) if opt.schedule == "cosine" else (1 - progress)
        )
        return floor + (1 - floor) * decay

    return factor


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
    import deepspeed

    stage, manifest = ctx.stage, ctx.manifest
    rank, world, device = init_distributed()
    on_gpu = device.type == "cuda"
    stage_dir, checkpoint_dir = ctx.stage_dir, ctx.stage_dir / "checkpoints"
    final_dir = stage_dir / "final"
    stage_dir.mkdir(parents=True, exist_ok=True)

    if not ctx.resume and ckpt.complete_tags(checkpoint_dir):
        raise ValueError(
            f"stage {stage.name!r} already has checkpoints in {checkpoint_dir}; pass --resume "
            "to continue or remove the directory to start over"
        )

    # --- data: verify every hash before anything else -------------------------------------
    verified = [
        load_verified(
            ref,
            f"{ctx.manifest_path}: stages[{stage.name}].datasets[{i}]",
            ctx.manifest_path.parent,
            ctx.lake_path,
        )
        for i, ref in enumerate(stage.datasets)
    ]

    # --- tokenizer and model ----------------------------------------------------------------
    tokenizer_dir = stage_dir / "tokenizer"
    if ctx.init_from is not None:
        tokenizer = load_tokenizer(str(ctx.init_from))
    elif is_local_model(tokenizer_dir) or (tokenizer_dir / "tokenizer.json").is_file():
        tokenizer = load_tokenizer(str(tokenizer_dir))
    else:
        tokenizer = load_tokenizer(
            manifest.tokenizer or manifest.base_model, texts=training_texts(verified)
        )
        if rank == 0:
            tokenizer.save_pretrained(tokenizer_dir)
    data = tokenize_stage(stage, verified, tokenizer)
    if not data.samples:
        raise ValueError(f"stage {stage.name!r}: no sample fits max_seq_len {stage.max_seq_len}")
    stream = DataStream([len(s.input_ids) for s in data.samples], stage)
    total_steps = stream.total_steps()
    accumulation = stage.batch.accumulation_for(world)

    attn = pick_attn_implementation(manifest.attn_implementation, on_gpu)
    base = str(ctx.init_from) if ctx.init_from is not None else manifest.base_model
    model = build_model(base, manifest.model_overrides, len(tokenizer), attn, stage.seed)
    if stage.gradient_checkpointing:
        if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5.x name
            model.activation_checkpointing_enable({"use_reentrant": False})
        else:
            model.gradient_checkpointing_enable({"use_reentrant": False})
    model.config.use_cache = False

    # --- DeepSpeed engine -------------------------------------------------------------------
    bf16 = stage.deepspeed.bf16 and on_gpu
    opt = stage.optimizer
    optimizer = torch.optim.AdamW(
        model.parameters(),
        lr=opt.learning_rate,
        betas=opt.betas,
        eps=opt.eps,
        weight_decay=opt.weight_decay,
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(stage, total_steps))
    engine, _, _, _ = deepspeed.initialize(
        model=model,
        optimizer=optimizer,
        lr_scheduler=scheduler,
        config=deepspeed_config(stage, accumulation, bf16),
    )

    if stage.packing:
        check_packing_isolation(engine, device, len(tokenizer), atol=0.1 if bf16 else 1e-3)

    # --- resume -----------------------------------------------------------------------------
    data_fingerprint = {
        "datasets": [v.sha256 for v in data.verified],
        "samples": len(data.samples),
        "sample_tokens": sum(stream.lengths),
    }
    start_step = 0
    torch.manual_seed(stage.seed)
    if ctx.resume:
        if rank == 0:
            ckpt.remove_incomplete(checkpoint_dir)
        torch.distributed.barrier()
        tags = ckpt.complete_tags(checkpoint_dir)
        if tags:
            _, tag = tags[-1]
            _, client = engine.load_checkpoint(str(checkpoint_dir), tag=tag)
            if client["data"] != data_fingerprint:
                raise ValueError(
                    f"stage {stage.name!r}: checkpoint {tag} was trained on different data "
                    f"({client['data']}) than now ({data_fingerprint}); cannot resume"
                )
            start_step = client["step"]
            ckpt.restore_rng_state(client["rng"])

    # --- logging ----------------------------------------------------------------------------
    log_path = stage_dir / "log.jsonl"
    if rank == 0:
        _truncate_log(log_path, start_step)
    tensorboard = _tensorboard(stage_dir) if rank == 0 else None
    provenance = {
        "manifest_path": str(ctx.manifest_path),
        "manifest": manifest.model_dump(mode="json"),
        "stage": stage.name,
        "datasets": [
            {
                "ref": v.ref.ref,
                "location": v.location,
                "sha256": v.sha256,
                "rows": len(v.rows),
                "upsample": v.ref.upsample,
                "limit": v.ref.limit,
            }
            for v in data.verified
        ],
        "samples": len(data.samples),
        "dropped_too_long": data.dropped_too_long,
        "dropped_no_target": data.dropped_no_target,
        "init_from": str(ctx.init_from) if ctx.init_from else manifest.base_model,
        "code_version": _code_version(),
        "world_size": world,
        "bf16": bf16,
        "attn_implementation": attn,
        **ctx.extra_provenance,
    }

    # --- the loop ---------------------------------------------------------------------------
    delay = float(os.environ.get(STEP_DELAY_ENV, "0") or 0)
    micro = stage.batch.micro_batch_size
    pad_id = tokenizer.pad_token_id
    last_loss: float | None = None
    started = time.perf_counter()
    with _progress(ctx.show_progress and rank == 0, stage.name, total_steps, start_step) as bar:
        for step in range(start_step, total_steps):
            rows = stream.global_batch(step)
            batches = [
                collate(rows[i : i + micro], data.samples, pad_id)
                for i in range(0, len(rows), micro)
            ]
            n_targets = sum(b.target_tokens for b in batches)
            mine = batches[rank * accumulation : (rank + 1) * accumulation]
            loss_sum = 0.0
            step_start = time.perf_counter()
            for batch in mine:
                batch = batch.to(device)
                per_token = token_losses(engine, batch)
                # DeepSpeed averages gradients over ranks; scale so the result is the mean over
                # every target token of the global batch.
                loss = per_token.sum() * (world / n_targets)
                engine.backward(loss, scale_wrt_gas=False)
                engine.step()
                loss_sum += float(per_token.detach().sum())
            if world > 1:
                total = torch.tensor([loss_sum], device=device)
                torch.distributed.all_reduce(total)
                loss_sum = float(total.item())
            last_loss = loss_sum / n_targets
            done = step + 1
            seconds = time.perf_counter() - step_start
            record = {
                "step": done,
                "loss": last_loss,
                "lr": scheduler.get_last_lr()[0],
                "grad_norm": _grad_norm(engine),
                "target_tokens": n_targets,
                "tokens": sum(int(b.input_ids.numel()) for b in batches),
                "useful_tokens": sum(b.real_tokens for b in batches),
                "step_seconds": seconds,
                "epoch": stream.position(step)[0],
            }
            if rank == 0:
                with open(log_path, "a") as fh:
                    fh.write(json.dumps(record) + "\n")
                if tensorboard is not None:
                    for key in ("loss", "lr", "grad_norm"):
                        if record[key] is not None:
                            tensorboard.add_scalar(f"{stage.name}/{key}", record[key], done)
            bar(done, last_loss)
            if done % stage.checkpoint_every_steps == 0 or done == total_steps:
                _save_checkpoint(
                    engine,
                    checkpoint_dir,
                    done,
                    stream,
                    data_fingerprint,
                    {**provenance, "step": done},
                    rank,
                    stage.keep_checkpoints,
                )
            if delay:
                time.sleep(delay)

    # --- final model ------------------------------------------------------------------------
    _save_final(
        engine,
        tokenizer,
        final_dir,
        {**provenance, "step": total_steps, "train_seconds": time.perf_counter() - started},
        rank,
        stage.deepspeed.zero_stage,
    )
    if tensorboard is not None:
        tensorboard.close()
    engine.destroy()
    return StageResult(final_dir, total_steps, last_loss)


def _grad_norm(engine: object) -> float | None:
    norm = engine.get_global_grad_norm()  # type: ignore[attr-defined]
    if norm is None:
        return None
    return float(norm)


def _save_checkpoint(
    engine: object,
    checkpoint_dir: Path,
    step: int,
    stream: DataStream,
    fingerprint: dict,
    provenance: dict,
    rank: int,
    keep: int,
) -> None:
    epoch, index = stream.position(step) if step < stream.total_steps() else (None, None)
    client = {
        "step": step,
        "data": fingerprint,
        "position": {"epoch": epoch, "batch_in_epoch": index},
        "rng": ckpt.rng_state(),
    }
    tag = ckpt.tag_for(step)
    engine.save_checkpoint(str(checkpoint_dir), tag=tag, client_state=client)  # type: ignore[attr-defined]
    torch.distributed.barrier()
    if rank == 0:
        ckpt.mark_complete(checkpoint_dir / tag, provenance)
        ckpt.rotate(checkpoint_dir, keep)
    torch.distributed.barrier()


def _save_final(
    engine: object,
    tokenizer: object,
    final_dir: Path,
    provenance: dict,
    rank: int,
    zero_stage: int,
) -> None:
    """Save a plain transformers model (+ tokenizer, provenance) the next stage can load."""
    import deepspeed

    module = engine.module  # type: ignore[attr-defined]
    tmp = final_dir.with_name(final_dir.name + ".tmp")
    if rank == 0 and tmp.exists():
        shutil.rmtree(tmp)
    params = list(module.parameters())
    if zero_stage == 3:
        with deepspeed.zero.GatheredParameters(params, modifier_rank=None):
            if rank == 0:
                module.save_pretrained(
                    tmp,
                    state_dict={
                        k: v.detach().cpu().clone() for k, v in module.state_dict().items()
                    },
                )
    elif rank == 0:
        module.save_pretrained(tmp)
    if rank == 0:
        tokenizer.save_pretrained(tmp)  # type: ignore[attr-defined]
        (tmp / ckpt.TRAINED_ON).write_text(json.dumps(provenance, indent=2, default=str))
        if final_dir.exists():
            shutil.rmtree(final_dir)
        tmp.rename(final_dir)
    torch.distributed.barrier()


def _truncate_log(log_path: Path, keep_through_step: int) -> None:
    """On resume, drop log lines of steps the killed run did after its last checkpoint."""
    if not log_path.exists():
        return
    kept = [
        line
        for line in log_path.read_text().splitlines()
        if line.strip() and json.loads(line)["step"] <= keep_through_step
    ]
    log_path.write_text("".join(line + "\n" for line in kept))


def _tensorboard(stage_dir: Path) -> object | None:
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:  # tensorboard is optional; jsonl is always written
        return None
    return SummaryWriter(str(stage_dir / "tensorboard"))


def _code_version() -> str:
    from lake.files import code_version

    return code_version()


class _progress:
    """A rich progress bar over steps (a no-op when disabled)."""

    def __init__(self, enabled: bool, name: str, total: int, start: int) -> None:
        self.enabled, self.name, self.total, self.start = enabled, name, total, start

    def __enter__(self) -> Callable[[int, float | None], None]:
        if not self.enabled:
            return lambda done, loss: None
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.progress = Progress(
            TextColumn(f"[bold]{self.name}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("loss {task.fields[loss]}"),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
        )
        self.progress.__enter__()
        task = self.progress.add_task(self.name, total=self.total, completed=self.start, loss="-")

        def update(done: int, loss: float | None) -> None:
            self.progress.update(
                task, completed=done, loss=f"{loss:.4f}" if loss is not None else "-"
            )

        return update

    def __exit__(self, *exc: object) -> None:
        if self.enabled:
            self.progress.__exit__(*exc)
