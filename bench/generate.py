"""Generation throughput of the `hf` backend, side by side with plain transformers sampling.

Builds a random-init teacher in-process (`tiny`: 2 layers x 64 hidden, for CPU; `0.5b`:
28 layers x 1280 hidden, ~0.49B parameters, meant for one GPU), takes real prompts from the
shared MATH train set, and measures completion tokens per second for, on the same model,
prompts and batches:

- baseline: `model.generate(do_sample=True)` (one global random stream, so a sample depends
  on its batch and cannot be cached per seed);
- ours: `HfBackend.generate` (per-row seeded sampling), at `--batch-size` and at batch 1;
- ours end to end: `generate_to_lake` (planning, splitting, commits of 32 samples).

Every sample runs to `--max-new-tokens` unless the random model happens to emit the end
token; only tokens actually generated are counted.

    python bench/generate.py                                # tiny model, CPU, 1 thread
    python bench/generate.py --size 0.5b --device cuda      # the GPU figure (H200)
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TypeVar

import torch

from curation.generate import (
    Completion,
    GenerationRequest,
    SamplingParams,
    Teacher,
    generate_to_lake,
)
from curation.generate.backend import render_chat
from curation.generate.hf import HfBackend, completion_length
from curation.generate.tiny_teacher import build_tiny_teacher
from lake.catalog import Lake

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"
T = TypeVar("T")
SIZES = {
    "tiny": dict(hidden_size=64, num_layers=2, num_heads=4),
    "0.5b": dict(
        hidden_size=1280,
        num_layers=28,
        num_heads=20,
        num_kv_heads=4,
        intermediate_size=3456,
        vocab_size=8192,
    ),
}


def load_problems(n: int) -> tuple[list[str], list[str]]:
    with open(SHARED / "sources" / "math_train.jsonl") as fh:
        rows = [json.loads(line)["problem"] for line in fh]
    return rows[:n], rows[:2000]


def transformers_baseline(backend: HfBackend, requests: list[GenerationRequest]) -> int:
    """Plain batched `generate(do_sample=True)` in the backend's batches; tokens generated."""
    from transformers import GenerationConfig

    sampling = requests[0].sampling
    config = GenerationConfig(
        max_new_tokens=sampling.max_new_tokens,
        do_sample=True,
        temperature=sampling.temperature,
        top_p=sampling.top_p,
        top_k=0,
        pad_token_id=backend.tokenizer.pad_token_id,
        eos_token_id=sorted(backend.eos_ids),
    )
    prompts = sorted((render_chat(backend.tokenizer, r) for r in requests), key=len)
    tokens = 0
    for start in range(0, len(prompts), backend.batch_size):
        batch = backend.tokenizer(
            prompts[start : start + backend.batch_size],
            return_tensors="pt",
            padding=True,
            add_special_tokens=False,
        ).to(backend.device)
        with torch.inference_mode():
            out = backend.lm.generate(**batch, generation_config=config)
        for row in out[:, batch["input_ids"].shape[1] :].tolist():
            tokens += completion_length(row, backend.eos_ids)[0]
    return tokens


def timed(fn: Callable[[], T]) -> tuple[float, T]:
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    started = time.perf_counter()
    result = fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.perf_counter() - started, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="tiny")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "out" / "generate.json")
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    problems, corpus = load_problems(args.prompts)
    work = Path(tempfile.mkdtemp(prefix="bench-generate-"))
    started = time.perf_counter()
    model = str(build_tiny_teacher(work / "teacher", corpus, seed=0, **SIZES[args.size]))
    build_s = time.perf_counter() - started
    backend = HfBackend(model, batch_size=args.batch_size, device=args.device)
    params = sum(p.numel() for p in backend.lm.parameters())
    sampling = SamplingParams(max_new_tokens=args.max_new_tokens, temperature=1.0, top_p=0.95)
    requests = [
        GenerationRequest(str(i), model, ({"role": "user", "content": p},), sampling, i)
        for i, p in enumerate(problems)
    ]
    # Warm up (first-call allocations, CUDA kernels) on two prompts, not measured.
    list(backend.generate(requests[:2]))
    transformers_baseline(backend, requests[:2])

    results: dict[str, dict[str, float]] = {}

    def record(name: str, seconds: float, tokens: int) -> None:
        results[name] = {"seconds": seconds, "tokens": tokens, "tokens_per_s": tokens / seconds}

    seconds, tokens = timed(lambda: transformers_baseline(backend, requests))
    record(f"transformers generate(do_sample), batch {args.batch_size}", seconds, tokens)
    seconds, done = timed(lambda: list(backend.generate(requests)))
    record(f"hf backend, seeded rows, batch {args.batch_size}", seconds,
           sum(c.completion_tokens for c in done))  # fmt: skip
    single = requests[: max(2, len(requests) // 4)]
    backend.batch_size = 1
    seconds, done = timed(lambda: list(backend.generate(single)))
    record("hf backend, seeded rows, batch 1", seconds, sum(c.completion_tokens for c in done))
    backend.batch_size = args.batch_size

    lake = Lake(work / "lake")
    prompts = [(str(i), r.messages) for i, r in enumerate(requests)]
    seconds, report = timed(
        lambda: generate_to_lake(
            lake, prompts, output="gens", teacher=Teacher(model), backend="hf",
            backend_factory=lambda _model: _Shared(backend), modes=["think"], k=1,
            sampling=sampling, chunk_size=32,
        )
    )  # fmt: skip
    record(f"generate_to_lake (hf, batch {args.batch_size}, commits of 32)", seconds,
           report.completion_tokens)  # fmt: skip

    baseline = next(iter(results.values()))["tokens_per_s"]
    print(
        f"model: {args.size} ({params / 1e6:.1f}M params, built in {build_s:.1f}s), "
        f"device {backend.device}, threads {torch.get_num_threads()}, {len(requests)} prompts, "
        f"max_new_tokens {args.max_new_tokens}"
    )
    print(f"{'run':58} {'tokens':>7} {'seconds':>8} {'tok/s':>9} {'vs base':>8}")
    for name, r in results.items():
        ratio = r["tokens_per_s"] / baseline
        print(f"{name:58} {r['tokens']:7d} {r['seconds']:8.2f} {r['tokens_per_s']:9.1f} "
              f"{ratio:7.2f}x")  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "params": params,
                    "device": str(backend.device), "results": results}, indent=2)
    )  # fmt: skip
    shutil.rmtree(work, ignore_errors=True)


class _Shared:
    """The already loaded backend, lent to generate_to_lake without being closed."""

    def __init__(self, backend: HfBackend) -> None:
        self.backend = backend
        self.name = backend.name
        self.model = backend.model

    def generate(self, requests: Sequence[GenerationRequest]) -> Iterator[Completion]:
        return self.backend.generate(requests)

    def close(self) -> None:
        pass


if __name__ == "__main__":
    main()
