"""SFT throughput: the cascade trainer's packed path vs a plain padded transformers loop.

Both methods train the same random-init model shape on the same samples, side by side in one
process, and report useful (non-pad) tokens/s and MFU counted on useful tokens only:

    FLOPs = 6 x matmul_params x useful_tokens + sum over samples of 6 x layers x hidden x len^2

(the second term is causal attention, fwd + bwd, over each sample's own length: packed samples
do not attend to each other, so that is the work actually needed).

- cascade: samples packed to --seq-len rows (best-fit), position ids restart per sample,
  DeepSpeed ZeRO-2, bf16, flash-attention-2 when installed (else SDPA), token-level loss.
- padded: the plain loop people write first: batches of --padded-batch samples in data order,
  padded to the longest in the batch, --padded-accum of them per optimizer step,
  attention_mask, fp32 weights + bf16 autocast, AdamW (fused on GPU), SDPA, the model's loss.

Lengths are drawn from a long-tailed log-normal (mean ~--mean-len, clipped to --seq-len).

GPU run (H200, Qwen2-1.5B shape, 8K rows; a few minutes):
    python bench/sft.py
CPU smoke run (tiny model, proves the script works; its numbers mean nothing for a GPU):
    python bench/sft.py --smoke
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from schemas.chat_template import TokenizedChat  # noqa: E402
from training.distributed import init_distributed  # noqa: E402
from training.models import pick_attn_implementation  # noqa: E402
from training.packing import collate, pack_best_fit  # noqa: E402
from training.sft import token_losses  # noqa: E402

QWEN2_1_5B = {  # Qwen/Qwen2-1.5B config.json
    "hidden_size": 1536,
    "intermediate_size": 8960,
    "num_hidden_layers": 28,
    "num_attention_heads": 12,
    "num_key_value_heads": 2,
    "vocab_size": 151936,
    "max_position_embeddings": 32768,
    "rope_theta": 1000000.0,
    "tie_word_embeddings": True,
}
TINY = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 500,
    "max_position_embeddings": 4096,
    "tie_word_embeddings": False,
}


def sample_lengths(n: int, mean: float, max_len: int, seed: int) -> list[int]:
    """Log-normal lengths (sigma 1.0: a long tail) with the given mean, clipped to [32, max]."""
    rng = np.random.default_rng(seed)
    sigma = 1.0
    mu = math.log(mean) - sigma**2 / 2
    raw = rng.lognormal(mu, sigma, size=n)
    return [int(x) for x in np.clip(raw, 32, max_len)]


def make_samples(lengths: list[int], vocab: int, seed: int) -> list[TokenizedChat]:
    """Random token chats: the first 10% of each sample is prompt (no loss), the rest reply."""
    rng = np.random.default_rng(seed)
    samples = []
    for n in lengths:
        ids = rng.integers(10, vocab, size=n).tolist()
        prompt = max(1, n // 10)
        samples.append(TokenizedChat(ids, [False] * prompt + [True] * (n - prompt)))
    return samples


def build(shape: dict, attn: str, seed: int) -> torch.nn.Module:
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.for_model("qwen2", **shape)
    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(config, attn_implementation=attn)


def matmul_params(model: torch.nn.Module) -> int:
    """Parameters used in matmuls: every Linear (incl. lm_head, even when tied), no embeddings."""
    return sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))


def useful_flops(shape: dict, n_matmul: int, lengths: list[int]) -> float:
    attn = sum(6 * shape["num_hidden_layers"] * shape["hidden_size"] * n * n for n in lengths)
    return 6.0 * n_matmul * sum(lengths) + attn


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def run_cascade(args, shape, samples, lengths, device) -> dict:
    """Packed rows through DeepSpeed ZeRO-2 (bf16 on GPU), as training/sft.py does."""
    import deepspeed

    attn = pick_attn_implementation("auto", device.type == "cuda")
    model = build(shape, attn, args.seed)
    if args.grad_ckpt:
        model.gradient_checkpointing_enable({"use_reentrant": False})
    model.config.use_cache = False
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5, betas=(0.9, 0.95))
    config = {
        "train_micro_batch_size_per_gpu": 1,
        "gradient_accumulation_steps": args.accum,
        "gradient_clipping": 1.0,
        "bf16": {"enabled": device.type == "cuda"},
        "zero_optimization": {"stage": 2, "overlap_comm": device.type == "cuda"},
        "steps_per_print": 10**9,
    }
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
    n_matmul = matmul_params(engine.module)
    rows = pack_best_fit(lengths, args.seq_len)
    pad = 0
    phases = {"forward+loss": 0.0, "backward": 0.0, "optimizer": 0.0}
    done_rows, useful, flops, elapsed = 0, 0, 0.0, 0.0
    steps = args.warmup + args.steps
    for step in range(steps):
        timed = step >= args.warmup
        batch_rows = [rows[(step * args.accum + k) % len(rows)] for k in range(args.accum)]
        sync(device)
        t0 = time.perf_counter()
        for row in batch_rows:
            batch = collate([row], samples, pad).to(device)
            n_targets = sum(len(samples[i].input_ids) for i in row)  # normalizer; any > 0 works
            ta = time.perf_counter()
            loss = token_losses(engine, batch).sum() / n_targets
            sync(device)
            tb = time.perf_counter()
            engine.backward(loss)
            sync(device)
            tc = time.perf_counter()
            engine.step()
            sync(device)
            td = time.perf_counter()
            if timed:
                phases["forward+loss"] += tb - ta
                phases["backward"] += tc - tb
                phases["optimizer"] += td - tc
        sync(device)
        if timed:
            elapsed += time.perf_counter() - t0
            row_lengths = [lengths[i] for row in batch_rows for i in row]
            useful += sum(row_lengths)
            flops += useful_flops(shape, n_matmul, row_lengths)
            done_rows += len(batch_rows)
    engine.destroy()
    del engine, model, optimizer
    return {
        "method": "cascade (packed, ZeRO-2)",
        "attn": attn,
        "elapsed_s": elapsed,
        "useful_tokens": useful,
        "slots": done_rows * args.seq_len,
        "flops": flops,
        "phases_s": phases,
        "matmul_params": n_matmul,
    }


def padded_batch(
    samples: list[TokenizedChat], lengths: list[int], idx: list[int]
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """input_ids, attention_mask, labels of samples `idx`, right-padded to the longest."""
    width = max(lengths)
    ids = torch.zeros(len(idx), width, dtype=torch.long)
    mask = torch.zeros(len(idx), width, dtype=torch.long)
    labels = torch.full((len(idx), width), -100, dtype=torch.long)
    for r, i in enumerate(idx):
        s = samples[i]
        n = len(s.input_ids)
        ids[r, :n] = torch.tensor(s.input_ids)
        mask[r, :n] = 1
        labels[r, :n] = torch.tensor(
            [t if m else -100 for t, m in zip(s.input_ids, s.target_mask, strict=True)]
        )
    return ids, mask, labels


def run_padded(args, shape, samples, lengths, device) -> dict:
    """A plain transformers loop: per-batch padding, attention_mask, autocast bf16, AdamW."""
    model = build(shape, "sdpa", args.seed).to(device)
    if args.grad_ckpt:
        model.gradient_checkpointing_enable({"use_reentrant": False})
    model.config.use_cache = False
    model.train()
    fused = device.type == "cuda"
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5, betas=(0.9, 0.95), fused=fused)
    n_matmul = matmul_params(model)
    b, accum = args.padded_batch, args.padded_accum
    useful, slots, flops, elapsed = 0, 0, 0.0, 0.0
    for step in range(args.warmup + args.steps):
        timed = step >= args.warmup
        micro = []
        for k in range(accum):
            first = (step * accum + k) * b
            idx = [(first + r) % len(samples) for r in range(b)]
            micro.append((idx, padded_batch(samples, [lengths[i] for i in idx], idx)))
        sync(device)
        t0 = time.perf_counter()
        for _, (ids, mask, labels) in micro:
            ids, mask, labels = ids.to(device), mask.to(device), labels.to(device)
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
                loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss / accum
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        sync(device)
        if timed:
            elapsed += time.perf_counter() - t0
            for idx, (ids, _, _) in micro:
                batch_lengths = [lengths[i] for i in idx]
                useful += sum(batch_lengths)
                slots += ids.numel()
                flops += useful_flops(shape, n_matmul, batch_lengths)
    del model, optimizer
    return {
        "method": f"padded loop (batch {b} x accum {accum})",
        "attn": "sdpa",
        "elapsed_s": elapsed,
        "useful_tokens": useful,
        "slots": slots,
        "flops": flops,
        "matmul_params": n_matmul,
    }


def report(results: list[dict], peak_tflops: float | None, world: int) -> str:
    lines = [
        "| method | attention | useful tok/s | pad share | useful-token MFU | s timed |",
        "|---|---|---|---|---|---|",
    ]
    for r in results:
        tps = r["useful_tokens"] / r["elapsed_s"]
        r["useful_tokens_per_s"] = tps
        r["pad_share"] = 1 - r["useful_tokens"] / r["slots"]
        r["mfu"] = (
            r["flops"] / r["elapsed_s"] / (peak_tflops * 1e12 * world) if peak_tflops else None
        )
        mfu = f"{100 * r['mfu']:.1f}%" if r["mfu"] is not None else "n/a (no peak given)"
        lines.append(
            f"| {r['method']} | {r['attn']} | {tps:,.0f} | {100 * r['pad_share']:.1f}% "
            f"| {mfu} | {r['elapsed_s']:.1f} |"
        )
    if len(results) == 2:
        ratio = results[0]["useful_tokens_per_s"] / results[1]["useful_tokens_per_s"]
        lines.append(f"\ncascade / padded useful tokens/s: {ratio:.2f}x")
    phases = results[0].get("phases_s")
    if phases:
        total = sum(phases.values())
        lines.append(
            "cascade time split: "
            + ", ".join(f"{k} {100 * v / total:.0f}%" for k, v in phases.items())
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--smoke", action="store_true", help="tiny model on CPU (script check)")
    parser.add_argument("--seq-len", type=int, default=8192)
    parser.add_argument("--mean-len", type=float, default=1500)
    parser.add_argument("--samples", type=int, default=4000)
    parser.add_argument("--steps", type=int, default=12, help="timed optimizer steps per method")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--accum", type=int, default=4, help="packed rows per optimizer step")
    parser.add_argument("--padded-batch", type=int, default=2, help="samples per padded batch")
    parser.add_argument(
        "--padded-accum",
        type=int,
        default=8,
        help="padded micro batches per optimizer step (8 x 2 x ~1.5K ~ one packed step's tokens)",
    )
    parser.add_argument("--grad-ckpt", action="store_true")
    parser.add_argument(
        "--peak-tflops", type=float, default=989.0, help="dense bf16 peak per GPU (H200 SXM: 989)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="bench/out/sft.json")
    args = parser.parse_args()

    if args.smoke:
        torch.set_num_threads(1)
        args.seq_len, args.mean_len, args.samples = 512, 100, 200
        args.steps, args.warmup, args.accum = 3, 1, 2
        args.padded_batch, args.padded_accum = 2, 4
        args.peak_tflops = None
        shape = TINY
    else:
        shape = QWEN2_1_5B
    rank, world, device = init_distributed()
    lengths = sample_lengths(args.samples, args.mean_len, args.seq_len, args.seed)
    samples = make_samples(lengths, shape["vocab_size"], args.seed)
    print(
        f"device {device}, world {world}; {len(lengths)} samples, mean length "
        f"{np.mean(lengths):.0f}, p50 {np.median(lengths):.0f}, p99 "
        f"{np.percentile(lengths, 99):.0f}, max {max(lengths)}; rows of {args.seq_len}"
    )
    results = [run_cascade(args, shape, samples, lengths, device)]
    if device.type == "cuda":
        torch.cuda.empty_cache()
    results.append(run_padded(args, shape, samples, lengths, device))
    table = report(results, args.peak_tflops, world)
    if rank == 0:
        print(table)
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(
            json.dumps(
                {
                    "args": vars(args),
                    "shape": shape,
                    "results": results,
                    "device": str(device),
                    "torch": torch.__version__,
                    "gpu": torch.cuda.get_device_name() if device.type == "cuda" else None,
                },
                indent=2,
            )
        )


if __name__ == "__main__":
    main()
