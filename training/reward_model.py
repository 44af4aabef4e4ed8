"""One reward-model stage (recipe 5.1): a Bradley-Terry reward model with DeepSpeed.

`run_reward_model_stage` reads top to bottom: setup, data (pairs split by prompt_id), tokenizer
and model, engine, resume, evaluation before training, then the loop (micro batches of pairs ->
backward -> step -> log -> evaluate -> checkpoint) and the final model with `eval.json`.

Model: the backbone as a transformers `*ForSequenceClassification` with one label, i.e. the
causal LM's transformer plus a linear head (`score`) read at the last non-pad token; saved
that way, it loads in `training.reward_clients.SequenceClassifierRM`, `cascade serve-reward` and any
server that takes transformers reward models.

Loss: the mean over the global batch of -log sigmoid(r(x, y+) - r(x, y-)), whatever the micro
batching, accumulation or number of ranks (each micro batch's sum is scaled by world / pairs).

Evaluation (RewardBench style): on the held-out pairs, a pair is right when r(chosen) >
r(rejected); accuracy overall, per `source` and per `category`, logged at step 0, every
`eval_every_steps` and at the end, and written to `final/eval.json`.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Sequence
from pathlib import Path

import torch
import torch.nn.functional as F

from schemas.chat_template import Message, render_text
from schemas.training_manifest import RewardModelStage
from training import checkpoint as ckpt
from training.datasets import LoadedDataset, load
from training.distributed import all_sum, grad_norm, optimizer_step
from training.models import TINY_DEFAULTS, is_local_model
from training.pair_data import PairStream, TokenizedPair, load_pairs, stage_pairs
from training.stage import (
    StageContext,
    StageResult,
    resume_stage,
    stage_engine,
    start_stage,
    step_delay,
)
from training.step_log import StepLog

EVAL_FILE = "eval.json"


def run_reward_model_stage(ctx: StageContext) -> StageResult:
    """Train one reward model to its final directory; resume from the last checkpoint."""
    stage: RewardModelStage = ctx.stage  # type: ignore[assignment]
    setup = start_stage(ctx)
    rank, world, device, attn, bf16 = setup.rank, setup.world, setup.device, setup.attn, setup.bf16

    # --- data, tokenizer, model, engine (hashes were checked by the runner) ------------------
    datasets = [load(v) for v in ctx.datasets]
    tokenizer = reward_tokenizer(ctx, rank, datasets)
    data = stage_pairs(stage, datasets, tokenizer)
    stream = PairStream(len(data.train), stage)
    total_steps = stream.total_steps()
    model = reward_backbone(
        stage, backbone_source(ctx), len(tokenizer), tokenizer.pad_token_id, attn
    )
    accumulation = stage.batch.accumulation_for(world)
    micro = stage.batch.micro_batch_size
    engine, scheduler = stage_engine(model, stage, world, total_steps, bf16)
    pad = tokenizer.pad_token_id

    # --- resume -------------------------------------------------------------------------------
    data_identity = {
        "datasets": [d.ref.content_hash for d in datasets],
        "train_pairs": len(data.train),
        "heldout_pairs": len(data.heldout),
    }
    client = resume_stage(engine, ctx, data_identity, rank)
    start_step = client["step"] if client else 0
    record = ckpt.provenance(
        ctx,
        [d.describe() for d in datasets],
        init_from=backbone_source(ctx),
        pairs=data.rows,
        train_pairs=len(data.train),
        heldout_pairs=len(data.heldout),
        dropped_too_long=data.too_long,
        world_size=world,
        bf16=bf16,
        attn_implementation=attn,
    )

    # --- the loop: micro batches of pairs -> backward -> one step -> log -> checkpoint --------
    delay = step_delay()
    last_loss: float | None = None
    final_eval: dict | None = None
    started = time.perf_counter()
    with StepLog(ctx.stage_dir, stage.name, total_steps, start_step, rank) as log:
        if start_step == 0 and data.heldout:
            log.write({"step": 0, **log_fields(evaluate(engine, data.heldout, stage, pad, device))})
        for step in range(start_step, total_steps):
            step_start = time.perf_counter()
            pairs = [data.train[i] for i in stream.global_batch(step)]
            pairs.sort(key=lambda tp: -tp.length)  # similar lengths share a micro batch
            chunks = [pairs[i : i + micro] for i in range(0, len(pairs), micro)]
            sums = {"loss": 0.0, "correct": 0.0, "margin": 0.0}
            for chunk in chunks[rank * accumulation : (rank + 1) * accumulation]:
                chosen, rejected = pair_scores(engine, chunk, pad, device)
                margin = chosen - rejected
                loss = -F.logsigmoid(margin).sum()
                # DeepSpeed averages gradients over ranks: scale so the result is the mean over
                # every pair of the global batch.
                engine.backward(loss * (world / len(pairs)), scale_wrt_gas=False)
                optimizer_step(engine)
                sums["loss"] += float(loss.detach())
                sums["correct"] += float((margin.detach() > 0).sum())
                sums["margin"] += float(margin.detach().sum())
            last_loss = all_sum(sums["loss"], device) / len(pairs)
            done = step + 1
            entry = {
                "step": done,
                "loss": last_loss,
                "accuracy": all_sum(sums["correct"], device) / len(pairs),
                "margin_mean": all_sum(sums["margin"], device) / len(pairs),
                "lr": scheduler.get_last_lr()[0],
                "grad_norm": grad_norm(engine),
                "pairs": len(pairs),
                "step_seconds": time.perf_counter() - step_start,
                "epoch": step // stream.per_epoch,
            }
            every = stage.eval_every_steps
            if data.heldout and (done == total_steps or (every and done % every == 0)):
                result = evaluate(engine, data.heldout, stage, pad, device)
                entry.update(log_fields(result))
                final_eval = result if done == total_steps else final_eval
            log.write(entry)
            if done % stage.checkpoint_every_steps == 0 or done == total_steps:
                saved = {"data": data_identity}
                keep = stage.keep_checkpoints
                ckpt.save_step(engine, ctx.checkpoint_dir, done, saved, record, rank, keep)
            if delay:
                time.sleep(delay)

    # --- final model and its evaluation -------------------------------------------------------
    if final_eval is None and data.heldout:  # resumed after the last checkpoint
        final_eval = evaluate(engine, data.heldout, stage, pad, device)
    evaluation = {
        "stage": stage.name,
        "step": total_steps,
        "heldout_fraction": stage.heldout_fraction,
        "heldout_seed": stage.heldout_seed,
        **(final_eval or {"pairs": 0}),
    }
    record.update(step=total_steps, train_seconds=time.perf_counter() - started, eval=evaluation)
    extra = {EVAL_FILE: json.dumps(evaluation, indent=2)}
    ckpt.save_final(
        engine, tokenizer, ctx.final_dir, record, rank, stage.deepspeed.zero_stage, extra
    )
    engine.destroy()
    return StageResult(ctx.final_dir, total_steps, last_loss)


# ---------------------------------------------------------------- model and tokenizer --------


def reward_tokenizer(ctx: StageContext, rank: int, datasets: Sequence[LoadedDataset]) -> object:
    """The backbone's tokenizer with its own chat template, or an in-process BPE trained on the
    pairs (kept in `<stage>/tokenizer` so a resumed run uses the very same one)."""
    from training.models import load_tokenizer, train_bpe_tokenizer

    stage: RewardModelStage = ctx.stage  # type: ignore[assignment]
    spec = stage.tokenizer or backbone_source(ctx)
    if not spec.startswith("in-process-bpe:"):
        return backbone_tokenizer(spec)
    saved = ctx.stage_dir / "tokenizer"
    exists = (saved / "tokenizer.json").is_file()
    torch.distributed.barrier()  # every rank has looked before rank 0 may write it
    if exists:
        return load_tokenizer(str(saved))
    texts = [
        render_text([*pair.messages, Message("assistant", reply)], "think")
        for d in datasets
        for pair in load_pairs(d)[:2000]
        for reply in (pair.chosen, pair.rejected)
    ]
    tokenizer = train_bpe_tokenizer(texts, int(spec.split(":", 1)[1]))
    if rank == 0:
        tokenizer.save_pretrained(saved)
    return tokenizer


def backbone_tokenizer(spec: str) -> object:
    """A hub or local tokenizer as the reward model uses it: its own chat template (refused
    without one) and a pad token (its eos when it has none)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(spec)
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError(f"reward model tokenizer {spec!r} has no chat template to render with")
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def backbone_source(ctx: StageContext) -> str:
    """Where the backbone comes from: an earlier stage's final dir (`stage:<name>`), else the
    stage's `backbone` as written."""
    return str(ctx.init_from) if ctx.init_from is not None else ctx.stage.backbone  # type: ignore[union-attr]


def reward_backbone(
    stage: RewardModelStage, source: str, vocab_size: int, pad_token_id: int, attn: str
) -> torch.nn.Module:
    """The backbone with a one-output linear head (`*ForSequenceClassification`), seeded."""
    from transformers import AutoConfig, AutoModelForSequenceClassification

    torch.manual_seed(stage.seed)
    if source.startswith("tiny-random:"):
        arch = source.split(":", 1)[1]
        fields = {**TINY_DEFAULTS, **(stage.backbone_overrides or {})}
        config = AutoConfig.for_model(arch, **fields, num_labels=1, pad_token_id=pad_token_id)
        config.vocab_size = vocab_size
        config._attn_implementation = attn
        return AutoModelForSequenceClassification.from_config(config, attn_implementation=attn)
    if source.startswith(("/", ".")) and not is_local_model(source):
        raise FileNotFoundError(f"reward-model backbone {source} is not a model directory")
    model = AutoModelForSequenceClassification.from_pretrained(
        source, num_labels=1, attn_implementation=attn, dtype=torch.float32
    )
    model.config.pad_token_id = pad_token_id
    return model


def pair_scores(
    model: object, pairs: Sequence[TokenizedPair], pad_token_id: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """r(x, y+) and r(x, y-) of each pair: one right-padded forward over both sides.

    The head reads the last non-pad token of each row (transformers' sequence classification
    pooling); `tokenize_pairs` guarantees a row never ends with the pad token.
    """
    rows = [tp.chosen_ids for tp in pairs] + [tp.rejected_ids for tp in pairs]
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = torch.tensor(row)
        mask[i, : len(row)] = 1
    out = model(input_ids=ids.to(device), attention_mask=mask.to(device), use_cache=False)  # type: ignore[operator]
    scores = out.logits[:, 0].float()
    return scores[: len(pairs)], scores[len(pairs) :]


# ---------------------------------------------------------------- evaluation -----------------


def evaluate(
    engine: object,
    heldout: Sequence[TokenizedPair],
    stage: RewardModelStage,
    pad_token_id: int,
    device: torch.device,
) -> dict:
    """Pairwise accuracy on the held-out pairs (see `pairwise_accuracy`).

    Ranks score every `world`-th chunk and the results are gathered. Every rank runs the same
    number of forwards (a spare rank repeats a chunk and drops it) so ZeRO-3's parameter
    gathering stays in step.
    """
    rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
    order = sorted(range(len(heldout)), key=lambda i: heldout[i].length)
    size = stage.eval_micro_batch_size
    chunks = [order[i : i + size] for i in range(0, len(order), size)]
    mine = chunks[rank::world]
    rounds = math.ceil(len(chunks) / world)
    scored: list[tuple[int, float, float]] = []
    engine.eval()  # type: ignore[attr-defined]
    with torch.no_grad():
        for k in range(rounds):
            chunk = mine[k] if k < len(mine) else chunks[0]
            chosen, rejected = pair_scores(
                engine, [heldout[i] for i in chunk], pad_token_id, device
            )
            if k < len(mine):
                scored += zip(chunk, chosen.tolist(), rejected.tolist(), strict=True)
    engine.train()  # type: ignore[attr-defined]
    if world > 1:
        gathered: list = [None] * world
        torch.distributed.all_gather_object(gathered, scored)
        scored = [item for part in gathered for item in part]
    scored.sort()
    return pairwise_accuracy(
        [
            (heldout[i].pair.source, heldout[i].pair.category, chosen, rejected)
            for i, chosen, rejected in scored
        ]
    )


def pairwise_accuracy(records: Sequence[tuple[str, str | None, float, float]]) -> dict:
    """RewardBench-style accuracy of (source, category, r_chosen, r_rejected) records.

    A pair counts as right when r_chosen > r_rejected (a tie is wrong). `category_mean` is the
    unweighted mean over categories, so a large category cannot hide a weak one.

    >>> r = pairwise_accuracy([("a", "x", 1.0, 0.0), ("a", "y", 0.0, 1.0), ("b", "y", 2.0, 1.0)])
    >>> r["accuracy"], r["by_source"]["a"], r["by_category"]["y"]["accuracy"], r["category_mean"]
    (0.6667, {'pairs': 2, 'accuracy': 0.5}, 0.5, 0.75)
    """

    def summary(rows: Sequence[tuple[str, str | None, float, float]]) -> dict:
        return {
            "pairs": len(rows),
            "accuracy": round(sum(c > r for _, _, c, r in rows) / len(rows), 4),
        }

    by_source: dict[str, list] = {}
    by_category: dict[str, list] = {}
    for row in records:
        by_source.setdefault(row[0], []).append(row)
        by_category.setdefault(row[1] or "(none)", []).append(row)
    categories = {k: summary(v) for k, v in sorted(by_category.items())}
    return {
        **summary(records),
        "margin_mean": round(sum(c - r for _, _, c, r in records) / len(records), 4),
        "category_mean": round(
            sum(c["accuracy"] for c in categories.values()) / len(categories), 4
        ),
        "by_source": {k: summary(v) for k, v in sorted(by_source.items())},
        "by_category": categories,
    }


def log_fields(result: dict) -> dict:
    """An evaluation as `eval_*` fields of a log record."""
    return {f"eval_{k}": v for k, v in result.items()}


def read_eval(final_dir: Path) -> dict:
    """The `eval.json` a reward-model stage wrote next to its final model."""
    return json.loads((final_dir / EVAL_FILE).read_text())
