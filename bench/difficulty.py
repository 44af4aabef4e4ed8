"""Difficulty measurement throughput: `measure_pass_rates` against a plain per-sample loop.

Both sides sample the same toy-world model k times per prompt on CPU and score every answer
with the math verifier, one after the other in the same run:

- cascade: `curation.difficulty.measure_pass_rates` (the `hf` backend batches prompts and
  seeds each row; generations are committed to the lake in chunks; verification runs over the
  whole batch);
- baseline: for each prompt, for each sample, `model.generate` on that one chat, then
  `curation.verify.math_reward` on that one response (what a script written without cascade
  does).

    python bench/difficulty.py --prompts 64 --k 8 [--models DIR]

Without `--models`, the toy world's weak and strong models are trained first (a few minutes)
into bench/tmp-difficulty/models and reused by later runs.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def plain_loop(model_dir: Path, rows: list[dict], k: int) -> tuple[float, float]:
    """The baseline a script written without cascade runs: for each toy problem, for each
    sample, `model.generate` on that one chat at temperature 1.0 and 96 tokens, then
    `math_reward` on that one response. Returns (correct samples, seconds)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from curation.verify import math_reward

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    # Stop where the backend stops: at the end of the assistant turn.
    stops = [tokenizer.convert_tokens_to_ids("<|im_end|>"), tokenizer.eos_token_id]
    started = time.perf_counter()
    correct = 0.0
    for row in rows:
        chat = [{"role": "user", "content": f"{row['problem']} /think"}]
        text = tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
        encoded = tokenizer(text, return_tensors="pt", add_special_tokens=False)
        for sample in range(k):
            torch.manual_seed(sample)
            with torch.inference_mode():
                out = model.generate(
                    **encoded,
                    do_sample=True,
                    temperature=1.0,
                    top_p=1.0,
                    max_new_tokens=96,
                    pad_token_id=tokenizer.pad_token_id,
                    eos_token_id=[s for s in stops if s is not None],
                )
            reply = tokenizer.decode(
                out[0, encoded["input_ids"].shape[1] :], skip_special_tokens=False
            )
            correct += math_reward([row["problem"]], [reply], answer=[row["answer"]])[0] or 0
    return correct, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--k", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--models", type=Path, default=ROOT / "bench" / "tmp-difficulty" / "models")
    parser.add_argument("--model", default="strong", help="weak | strong")
    args = parser.parse_args()

    import polars as pl
    import torch

    from builders.worlds.toy_world import toy_problems, train_toy_models
    from curation.difficulty import measure_pass_rates
    from curation.generate.samples import Sampler
    from curation.prompt_ids import prompt_ids
    from lake.catalog import Lake

    torch.set_num_threads(2)
    model_dir = args.models / args.model / "sft" / "final"
    if not (model_dir / "config.json").is_file():
        print(f"training the toy models into {args.models} ...", flush=True)
        train_toy_models(args.models)
    rows = toy_problems(args.prompts, seed=11, digits=(1, 2))
    frame = pl.DataFrame(rows).with_columns(
        id=prompt_ids(pl.Series([r["problem"] for r in rows])), metadata=pl.lit("{}")
    )
    settings = {
        "model": str(model_dir),
        "backend": "hf",
        "backend_options": {"batch_size": args.batch_size, "num_threads": 2},
        "mode": "think",
        "mode_switch": "flag",
        "k": args.k,
        "temperature": 1.0,
        "top_p": 1.0,
        "max_new_tokens": 96,
    }

    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        result = measure_pass_rates(
            frame, lake=Lake(Path(tmp) / "lake"), label="m", sampler=Sampler.from_params(settings)
        )
        ours = time.perf_counter() - started
    ours_rate = result.kept["m_pass_rate"].mean()

    correct, baseline = plain_loop(model_dir, rows, args.k)
    samples = args.prompts * args.k
    print(
        f"{samples} samples ({args.prompts} prompts x k={args.k}, toy {args.model} model, CPU): "
        f"measure_pass_rates {samples / ours:.1f} samples/s (pass rate {ours_rate:.3f}) vs plain "
        f"loop {samples / baseline:.1f} samples/s (pass rate {correct / samples:.3f}); "
        f"ratio {baseline / ours:.2f}x"
    )


if __name__ == "__main__":
    main()
