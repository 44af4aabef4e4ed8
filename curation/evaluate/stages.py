"""The paper's per-stage table for a training run: every benchmark after every stage, with
each stage's change from the previous one and regressions marked, kept as
`<output_dir>/evaluation.json` beside the stages' models."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from curation.evaluate.run import EvalReport, evaluate, settings_for
from lake.catalog import Lake
from schemas.training_manifest import BenchmarkSuite

EVALUATION_FILE = "evaluation.json"


def stage_rows(stage: str, report: EvalReport) -> list[dict[str, Any]]:
    """One `evaluation.json` record per benchmark of one stage's report."""
    return [
        {
            "stage": stage,
            "model": report.model_identity,
            "benchmark": r.score.benchmark,
            "score": r.score.avg,
            "stderr": r.score.stderr,
            "k": r.score.k,
            "items": r.score.items,
            "benchmark_hash": r.content_hash,
            "decontamination": r.decontamination,
        }
        for r in report.results
    ]


def with_changes(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each row with `change` from the previous stage's score on the same benchmark (None for
    the first) and `regression`: a fall larger than twice the combined standard error."""
    last: dict[str, dict[str, Any]] = {}
    out = []
    for row in rows:
        before = last.get(row["benchmark"])
        change = None if before is None else row["score"] - before["score"]
        noise = 0.0 if before is None else math.hypot(row["stderr"], before["stderr"])
        out.append(
            {**row, "change": change, "regression": change is not None and change < -2 * noise}
        )
        last[row["benchmark"]] = row
    return out


def stage_table(rows: list[dict[str, Any]]) -> list[dict[str, str]]:
    """The table the paper prints: a row per stage, a column per benchmark, each cell the
    score in percent with its change (`▼` where it is a regression)."""
    table: dict[str, dict[str, str]] = {}
    for row in with_changes(rows):
        cell = f"{100 * row['score']:.1f}"
        if row["change"] is not None:
            cell += f" ({100 * row['change']:+.1f}{' ▼' if row['regression'] else ''})"
        table.setdefault(row["stage"], {"stage": row["stage"]})[row["benchmark"]] = cell
    return list(table.values())


def stage_evaluator(
    lake: Lake,
    suite: BenchmarkSuite,
    manifest_dir: Path,
    output_dir: Path,
    stages: Sequence[str],
    say: Callable[[str], None] = print,
) -> Callable[[str, Path], None]:
    """`after_stage` for `training.runner.run_cascade`: score a stage's final model on the
    suite and rewrite `output_dir/evaluation.json` with every stage scored so far, in the
    manifest's order of `stages` (a stage scored in an earlier run is replaced)."""
    path = output_dir / EVALUATION_FILE
    for name in suite.benchmarks:  # a typo fails now, not after the first stage has trained
        if name.startswith("lake:"):
            continue  # read when the first stage is scored
        if not name.endswith(".jsonl"):
            settings_for(suite.preset, name, dict(suite.settings))
        elif not (manifest_dir / name).is_file():
            raise FileNotFoundError(f"evaluation benchmark file {manifest_dir / name} is missing")
    benchmarks = [str(manifest_dir / b) if b.endswith(".jsonl") else b for b in suite.benchmarks]
    local = suite.benchmark_dir
    benchmark_dir = str(manifest_dir / local) if local and not Path(local).is_absolute() else local

    def after_stage(stage: str, final_dir: Path) -> None:
        report = evaluate(
            lake,
            str(final_dir),
            benchmarks,
            preset=suite.preset,
            overrides=dict(suite.settings),
            backend=suite.backend,
            benchmark_dir=benchmark_dir,
            limit=suite.limit,
        )
        rows = json.loads(path.read_text())["rows"] if path.is_file() else []
        rows = [r for r in rows if r["stage"] != stage] + stage_rows(stage, report)
        rows.sort(key=lambda r: stages.index(r["stage"]) if r["stage"] in stages else len(stages))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"rows": with_changes(rows)}, indent=1) + "\n")
        for row in stage_rows(stage, report):
            say(
                f"stage {stage}: {row['benchmark']} {100 * row['score']:.1f} "
                f"± {100 * row['stderr']:.1f} (avg@{row['k']}, {row['items']} items)"
            )

    return after_stage
