"""The toy cascade's learning table: every RL stage against its shuffled-reward control.

Runs (or resumes) `cascade train --manifest M` and `cascade train --manifest M --control
shuffled-rewards` (the same stages from the same starting checkpoints, each batch's rewards
permuted across the batch before the advantages), then prints one row per RL stage: steps,
the training reward's mean over the first and last third of the steps (over every group a
step drew, those batch filtering left untrained too), the held-out score
(the stage's own reward on its held-out set) before and after, the same for the control, and
how many steps had a group with signal and a non-zero gradient.

    make toy-cascade                       # builds toy-lake, pins the manifest, trains
    python bench/toy_cascade.py            # + the controls, and the table (bench/README.md)
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from builders.worlds.toy_judge import serve_toy_judge
from training.runner import load_manifest, run_cascade
from training.step_log import read_log


def thirds(values: list[float]) -> tuple[float, float]:
    """Mean of the first and of the last third (at least one value each)."""
    k = max(1, len(values) // 3)
    return sum(values[:k]) / k, sum(values[-k:]) / k


def stage_row(stage_dir: Path) -> dict:
    """What the table shows of one RL stage's log."""
    log = read_log(stage_dir)
    steps = [r for r in log if r["step"] > 0 and "reward_mean" in r]
    # every group drawn, also those batch filtering left untrained (reward_mean is the
    # trained groups': under batch filtering, mixed groups only)
    rewards = [r.get("drawn_reward_mean", r["reward_mean"]) for r in steps]
    rewards = [r for r in rewards if r is not None]
    evals = [r for r in log if "eval_reward_mean" in r]
    first, last = thirds(rewards) if rewards else (float("nan"), float("nan"))
    return {
        "steps": len(steps),
        "reward_first": first,
        "reward_last": last,
        "heldout_before": evals[0]["eval_reward_mean"] if evals else None,
        "heldout_after": evals[-1]["eval_reward_mean"] if evals else None,
        "signal_steps": sum(r["signal_groups"] > 0 for r in steps),
        "gradient_steps": sum((r.get("grad_norm") or 0) > 0 for r in steps),
    }


def table(run_dir: Path, stages: list[str], control: str = "shuffled-rewards") -> str:
    """The markdown table of `stages` (each `<run_dir>/<stage>` and its control)."""

    def num(x: float | None) -> str:
        return "-" if x is None else f"{x:.3f}"

    lines = [
        "| stage | steps | reward first third -> last third | held-out before -> after | "
        "control: reward first -> last | control: held-out after | steps with signal / "
        "gradient |",
        "|---|---|---|---|---|---|---|",
    ]
    for name in stages:
        real = stage_row(run_dir / name)
        shuffled = stage_row(run_dir / f"{name}.{control}")
        lines.append(
            f"| {name} | {real['steps']} | {num(real['reward_first'])} -> "
            f"{num(real['reward_last'])} | {num(real['heldout_before'])} -> "
            f"{num(real['heldout_after'])} | {num(shuffled['reward_first'])} -> "
            f"{num(shuffled['reward_last'])} | {num(shuffled['heldout_after'])} | "
            f"{real['signal_steps']} / {real['gradient_steps']} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--manifest", default="toy-lake/toy_cascade.json", help="pinned copy")
    parser.add_argument("--lake", default="toy-lake")
    args = parser.parse_args()
    manifest = Path(args.manifest).resolve()
    spec = load_manifest(manifest)
    run_dir = (manifest.parent / spec.output_dir).resolve()
    rl = [s.name for s in spec.stages if s.type == "grpo"]
    timings = {}
    for control in (None, "shuffled-rewards"):
        start = time.perf_counter()
        with serve_toy_judge():  # SWE RL's judge (`builders.worlds.toy_judge`)
            run_cascade(manifest, resume=True, lake_path=args.lake, control=control)
        timings[control or "cascade"] = round(time.perf_counter() - start)
    print(table(run_dir, rl))
    print(f"\nwall seconds (this run, finished stages skipped): {json.dumps(timings)}")


if __name__ == "__main__":
    main()
