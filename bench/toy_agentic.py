"""The toy agentic world, with its control: does GRPO in the python environment teach a tiny
model to use its tool better than the same run with shuffled rewards?

One SFT stage on teacher trajectories (3-digit products: call `python` with `print(A * B)`,
answer `\\boxed{...}` from its output; `builders/worlds/toy_agentic.py`), then two GRPO runs
from that checkpoint in the python environment: the real one and `--control shuffled-rewards`.
Held-out products are scored greedily at each evaluation; the table shows the held-out pass
rate, tool calls per episode and tool errors of both runs, step by step.

    python bench/toy_agentic.py --out /tmp/toy-agentic          # about 25 minutes on 2 cores
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from builders.worlds.toy_agentic import toy_agentic_manifest  # noqa: E402
from training.runner import run_cascade  # noqa: E402
from training.step_log import read_log  # noqa: E402

SETTINGS = {
    "sft_steps": 1000,
    "hidden_size": 96,
    "layers": 4,
    "sft_learning_rate": 2e-3,
    "grpo_learning_rate": 2e-4,
}
"""The configuration of the figures in bench/README.md (SFT to a held-out pass rate of 0.17)."""


def evaluations(stage_dir: Path) -> list[dict]:
    return [r for r in read_log(stage_dir) if "eval_pass_rate" in r]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=Path("/tmp/toy-agentic"))
    parser.add_argument("--grpo-steps", type=int, default=16)
    parser.add_argument("--fresh", action="store_true", help="remove --out first")
    args = parser.parse_args()
    if args.fresh and args.out.exists():
        shutil.rmtree(args.out)
    manifest = toy_agentic_manifest(args.out, grpo_steps=args.grpo_steps, **SETTINGS)
    began = time.monotonic()
    run_cascade(manifest, resume=True, say=print)
    real_s = time.monotonic() - began
    run_cascade(
        manifest,
        stage="grpo_python",
        resume=True,
        say=print,
        control="shuffled-rewards",
    )
    runs = {
        "grpo": evaluations(args.out / "run" / "grpo_python"),
        "shuffled": evaluations(args.out / "run" / "grpo_python.shuffled-rewards"),
    }
    print(
        f"\nheld-out (greedy, {runs['grpo'][0]['eval_samples']} products)  SFT + GRPO: {real_s / 60:.1f} min"
    )
    print(
        f"{'step':>4}  {'grpo pass':>9} {'calls':>5} {'errors':>6}   {'shuffled pass':>13} {'calls':>5} {'errors':>6}"
    )
    for real, control in zip(runs["grpo"], runs["shuffled"], strict=False):
        print(
            f"{real['step']:>4}  {real['eval_pass_rate']:>9.3f} {real['eval_tool_calls_mean']:>5.2f} "
            f"{real['eval_tool_errors']:>6}   {control['eval_pass_rate']:>13.3f} "
            f"{control['eval_tool_calls_mean']:>5.2f} {control['eval_tool_errors']:>6}"
        )
    print(json.dumps({k: [r["eval_pass_rate"] for r in v] for k, v in runs.items()}))


if __name__ == "__main__":
    main()
