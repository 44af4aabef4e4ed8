"""`cascade eval`: score a model on benchmarks, every sample into the lake's `evaluations`."""

from __future__ import annotations

import json
from typing import Any

import typer
from rich.table import Table

from cli.app import app
from cli.console import CascadeError, console, open_lake, plain, print_records, print_table


def parse_settings(pairs: list[str]) -> dict[str, Any]:
    """`--set k=4 --set aime24.k=16 --set temperature=1.0` -> typed settings; values are
    read as JSON (numbers, null) and otherwise kept as text."""
    settings: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key.strip():
            raise CascadeError(f"--set takes key=value, got {pair!r}")
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            value = raw
        settings[key.strip()] = value
    return settings


@app.command("eval")
def eval_command(
    model: str = typer.Option(
        ..., "--model", help="A local checkpoint, a hub id, or a served model's name (openai)."
    ),
    benchmarks: str = typer.Option(
        ...,
        "--benchmarks",
        help="Comma-separated: names (aime24,math500,ifeval,humaneval), jsonl files of one's "
        "own, or lake tables (lake:math_rl_v2_heldout).",
    ),
    preset: str = typer.Option("cascade1", "--preset", help="cascade1 | cascade2."),
    set_: list[str] = typer.Option(
        None, "--set", help="Override a setting: k=4, max_new_tokens=2048, aime24.k=16."
    ),
    backend: str = typer.Option("hf", "--backend", help="hf | vllm | openai"),
    base_url: str = typer.Option(
        "http://127.0.0.1:8000/v1", "--base-url", help="openai: server URL ending in /v1."
    ),
    api_key_env: str = typer.Option(
        "OPENAI_API_KEY", "--api-key-env", help="openai: environment variable with the key."
    ),
    concurrency: int = typer.Option(16, "--concurrency", help="openai: requests in flight."),
    benchmark_dir: str = typer.Option(
        None,
        "--benchmark-dir",
        help="Local benchmark jsonl (default $CASCADE_BENCHMARK_DIR, else the HF Hub).",
    ),
    limit: int = typer.Option(None, "--limit", help="Only each benchmark's first N items."),
    format_: str = typer.Option("table", "--format", help="table|csv|json|jsonl"),
) -> None:
    """Score MODEL on BENCHMARKS with a preset's settings; cached and resumable."""
    from cli.progress import show_progress
    from curation.evaluate.run import PRESET_NOTES, evaluate
    from curation.generate import BackendError
    from lake.catalog import LakeError

    options: dict[str, Any] = {}
    if backend == "openai":
        options = {"base_url": base_url, "api_key_env": api_key_env, "concurrency": concurrency}
    names = [b.strip() for b in benchmarks.split(",") if b.strip()]
    if not names:
        raise CascadeError("--benchmarks names no benchmark")
    try:
        with show_progress():
            report = evaluate(
                open_lake(write=True),
                model,
                names,
                preset=preset,
                overrides=parse_settings(set_ or []),
                backend=backend,
                backend_options=options,
                benchmark_dir=benchmark_dir,
                limit=limit,
            )
    except (BackendError, FileNotFoundError, LakeError, ValueError) as exc:
        raise CascadeError(" ".join(str(exc).split())) from None
    records = [
        {
            **r.score.as_dict(),
            "mode": r.settings["mode"],
            "generated": r.generated,
            "cached": r.cached,
            "benchmark_hash": r.content_hash[:12],
            "decontamination": r.decontamination,
        }
        for r in report.results
    ]
    if format_ != "table":
        print_records(records, format_)
        return
    table = Table(
        "benchmark",
        "items",
        "mode",
        "avg@k",
        "± stderr",
        "pass@k",
        "k",
        "hash",
        "training data",
        title=f"{report.model_identity} ({report.preset})",
    )
    for r in records:
        table.add_row(
            plain(str(r["benchmark"])),
            f"{r['items']:,}",
            plain(str(r["mode"])),
            f"{100 * float(r['avg_at_k']):.1f}",
            f"{100 * float(r['stderr']):.1f}",
            f"{100 * float(r['pass_at_k']):.1f}",
            str(r["k"]),
            plain(str(r["benchmark_hash"])),
            plain(
                str(r["decontamination"]), "red" if "RISK" in str(r["decontamination"]) else None
            ),
        )
    print_table(table)
    console.print(plain(PRESET_NOTES[preset], "dim"), soft_wrap=True)
