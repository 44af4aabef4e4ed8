"""Process group, DeepSpeed engine and learning-rate schedule: what SFT and RL stages share.

One process per device: `torchrun --nproc_per_node N` (or DeepSpeed's launcher) sets RANK /
WORLD_SIZE; a plain `python` run is a world of one. GPUs talk NCCL, CPUs gloo, so the same code
path runs the multi-GPU job and its CPU test.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import sys
import weakref
from collections.abc import Callable, Iterator

import torch

from schemas.training_manifest import DeepSpeedSpec, OptimizerSpec


@contextlib.contextmanager
def notes_to_stderr() -> Iterator[None]:
    """DeepSpeed prints its notes ("Setting accelerator to CPU", op builds) on stdout, where a
    command's own output goes: inside this block, and from its logger after it, they go to
    stderr."""
    with contextlib.redirect_stdout(sys.stderr):
        import deepspeed  # noqa: F401  (its logger is made on import)

        yield
    for handler in logging.getLogger("DeepSpeed").handlers:
        if isinstance(handler, logging.StreamHandler) and handler.stream is sys.stdout:
            handler.setStream(sys.stderr)


def init_distributed() -> tuple[int, int, torch.device]:
    """Join (or create) the process group: NCCL on GPU, gloo on CPU; single process by default."""
    with notes_to_stderr():
        import deepspeed

    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("LOCAL_RANK", "0")
    os.environ.setdefault("WORLD_SIZE", "1")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    # A world of one lets its store bind any free port (0): picking one here and binding it
    # later races other processes for it.
    os.environ.setdefault("MASTER_PORT", "0" if os.environ["WORLD_SIZE"] == "1" else "29500")
    on_gpu = torch.cuda.is_available()
    if not torch.distributed.is_initialized():
        with notes_to_stderr():
            deepspeed.init_distributed(dist_backend="nccl" if on_gpu else "gloo")
    rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
    if on_gpu:
        local = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local)
        return rank, world, torch.device("cuda", local)
    return rank, world, torch.device("cpu")


def deepspeed_config(spec: DeepSpeedSpec, micro_batch: int, accumulation: int, bf16: bool) -> dict:
    """The DeepSpeed config a stage implies (optimizer and scheduler are passed as objects)."""
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
        "train_micro_batch_size_per_gpu": micro_batch,
        "gradient_accumulation_steps": accumulation,
        "gradient_clipping": spec.gradient_clipping,
        "zero_optimization": zero,
        "bf16": {"enabled": bf16},
        "steps_per_print": 10**9,
        "wall_clock_breakdown": False,
    }


def lr_lambda(opt: OptimizerSpec, total_steps: int) -> Callable[[int], float]:
    """Linear warmup, then cosine / linear decay to `min_learning_rate_ratio` (or constant)."""
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


def make_deepspeed_engine(
    model: torch.nn.Module,
    opt: OptimizerSpec,
    spec: DeepSpeedSpec,
    micro_batch: int,
    accumulation: int,
    total_steps: int,
    bf16: bool,
) -> tuple[object, torch.optim.lr_scheduler.LambdaLR]:
    """A DeepSpeed engine over AdamW with the stage's schedule; returns (engine, scheduler)."""
    import deepspeed

    optimizer = torch.optim.AdamW(
        model.parameters(),
        lr=opt.learning_rate,
        betas=opt.betas,
        eps=opt.eps,
        weight_decay=opt.weight_decay,
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(opt, total_steps))
    with notes_to_stderr():
        engine, _, _, _ = deepspeed.initialize(
            model=model,
            optimizer=optimizer,
            lr_scheduler=scheduler,
            config=deepspeed_config(spec, micro_batch, accumulation, bf16),
        )
    return engine, scheduler


def enable_gradient_checkpointing(model: torch.nn.Module) -> None:
    """Recompute activations in backward (transformers 5 renamed the method)."""
    if hasattr(model, "activation_checkpointing_enable"):
        model.activation_checkpointing_enable({"use_reentrant": False})
    else:
        model.gradient_checkpointing_enable({"use_reentrant": False})


_MEASURED_NORMS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
"""engine -> the gradient norm `optimizer_step` measured where DeepSpeed keeps none."""


def optimizer_step(engine: object) -> None:
    """`engine.step()`, measuring the gradient norm first when DeepSpeed will not: its plain
    fp32 path (ZeRO-0, no bf16/fp16) clips without keeping the norm, so a log would read None
    for every step of such a stage. At the accumulation boundary the gradients in `.grad` are
    already averaged over ranks, so the norm is the global one (before clipping, as
    DeepSpeed's own)."""
    boundary = engine.is_gradient_accumulation_boundary()  # type: ignore[attr-defined]
    if boundary and engine.zero_optimization_stage() == 0:  # type: ignore[attr-defined]
        grads = [p.grad for p in engine.module.parameters() if p.grad is not None]  # type: ignore[attr-defined]
        norms = [torch.linalg.vector_norm(g.detach().float()) for g in grads]
        _MEASURED_NORMS[engine] = (
            float(torch.linalg.vector_norm(torch.stack(norms))) if norms else 0.0
        )
    engine.step()  # type: ignore[attr-defined]


def grad_norm(engine: object) -> float | None:
    """The global gradient norm of the last step (None before the first)."""
    norm = engine.get_global_grad_norm()  # type: ignore[attr-defined]
    if norm is None:
        return _MEASURED_NORMS.get(engine)
    return float(norm)


def all_sum(value: float, device: torch.device) -> float:
    """Sum a float over ranks (itself in a world of one)."""
    if torch.distributed.get_world_size() == 1:
        return value
    total = torch.tensor([value], dtype=torch.float64, device=device)
    torch.distributed.all_reduce(total)
    return float(total.item())
