"""Evaluation throughput: `cascade eval` (`curation.evaluate.run.evaluate`) against a plain
generate-then-score loop, side by side in one run.

Both sides sample the toy world's model k times per item of a held-out toy benchmark (a
jsonl file of sums) on CPU and score every answer with the math verifier:

- cascade: `evaluate` (the `hf` backend batches items and seeds each sample; samples are
  committed to the lake's generations table in chunks; verification runs over the whole
  benchmark; every scored sample is written to the `evaluations` table), then the same call
  again, which finds everything cached;
- baseline: for each item, for each sample, `model.generate` on that one chat, then
  `curation.verify.math_reward` on that one response (an evaluation script written without
  cascade; it keeps nothing).

    python bench/evaluate.py --items 64 --k 8 [--models DIR]

Without `--models`, the toy world's models are trained first (a few minutes) into
bench/tmp-difficulty/models (shared with bench/difficulty.py) and reused by later runs.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=64)
    parser.add_argument("--k", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--models", type=Path, default=ROOT / "bench" / "tmp-difficulty" / "models")
    parser.add_argument("--model", default="strong", help="weak | strong")
    args = parser.parse_args()

    import torch

    from bench.difficulty import plain_loop
    from builders.worlds.toy_world import toy_problems, train_toy_models
    from curation.evaluate.run import evaluate
    from lake.catalog import Lake

    torch.set_num_threads(2)
    model_dir = args.models / args.model / "sft" / "final"
    if not (model_dir / "config.json").is_file():
        print(f"training the toy models into {args.models} ...", flush=True)
        train_toy_models(args.models)
    rows = toy_problems(args.items, seed=23, digits=(1, 2))
    settings = {
        "k": args.k,
        "mode_switch": "flag",
        "temperature": 1.0,
        "top_p": 1.0,
        "max_new_tokens": 96,
    }
    options = {"batch_size": args.batch_size, "num_threads": 2}

    with tempfile.TemporaryDirectory() as tmp:
        bench = Path(tmp) / "toy_sums.jsonl"
        bench.write_text("".join(json.dumps(r) + "\n" for r in rows))
        lake = Lake(Path(tmp) / "lake")
        started = time.perf_counter()
        report = evaluate(
            lake, str(model_dir), [str(bench)], overrides=settings, backend_options=options
        )
        ours = time.perf_counter() - started
        started = time.perf_counter()
        again = evaluate(
            lake, str(model_dir), [str(bench)], overrides=settings, backend_options=options
        )
        cached = time.perf_counter() - started
    (result,) = report.results
    assert again.results[0].score == result.score and again.results[0].generated == 0

    correct, baseline = plain_loop(model_dir, rows, args.k)
    samples = args.items * args.k
    print(
        f"{samples} samples ({args.items} items x k={args.k}, toy {args.model} model, CPU): "
        f"cascade eval {samples / ours:.1f} samples/s (avg@{args.k} {result.score.avg:.3f} "
        f"± {result.score.stderr:.3f}) vs plain loop {samples / baseline:.1f} samples/s "
        f"(avg {correct / samples:.3f}); ratio {baseline / ours:.2f}x; "
        f"re-run with everything cached {cached:.2f} s"
    )


if __name__ == "__main__":
    main()
