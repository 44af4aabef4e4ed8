"""`cascade decontaminate`: drop rows that share word n-grams with benchmark test items."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from cli.app import app
from cli.console import CascadeError, console, open_lake, plain
from cli.executors import EXECUTOR_OPTION, RAY_ADDRESS_OPTION, executor_session
from cli.files import is_file_target, read_lake_table, read_rows, write_rows
from cli.lazy_options import lazy_options

if TYPE_CHECKING:
    from lake.steps import StepResult


def _decontaminate_options() -> dict[str, dict[str, object]]:
    from curation.decontaminate import DEFAULT_N

    return {"n": {"default": DEFAULT_N}}


@app.command("decontaminate", cls=lazy_options(_decontaminate_options))
def decontaminate_command(
    benchmarks: str = typer.Option(
        ...,
        "--benchmarks",
        help="A directory of benchmark jsonl files, a .jsonl file, or registered names "
        "(comma-separated, e.g. aime24,aime25,math500).",
    ),
    out: str = typer.Option(
        ..., "--out", help="Kept rows: .jsonl/.parquet file or, with --table, a lake table name."
    ),
    input_: str = typer.Option(None, "--input", help="Input .jsonl file."),
    table: str = typer.Option(None, "--table", help="Lake table to read (name or name@N)."),
    dropped_path: str = typer.Option(None, "--dropped", help="Write dropped rows here (.jsonl)."),
    n: int = typer.Option(None, "--n", help="Words per n-gram."),  # default: _decontaminate_options
    rule: str = typer.Option(
        "boilerplate-aware", "--rule", help="literal (any shared n-gram) | boilerplate-aware"
    ),
    min_hits: int = typer.Option(None, "--min-hits", help="Override the rule's n-gram count."),
    min_coverage: float = typer.Option(
        None, "--min-coverage", help="Override the rule's item-coverage threshold."
    ),
    min_df: int = typer.Option(None, "--min-df", help="Texts an n-gram needs to be stock."),
    stock_corpus: str = typer.Option(
        None,
        "--stock-corpus",
        help="jsonl of reference problems; n-grams in >= --min-df of them are stock phrases.",
    ),
    benchmark_dir: str = typer.Option(
        None,
        "--benchmark-dir",
        help="Where registered names are looked up first (default $CASCADE_BENCHMARK_DIR); "
        "names not found there are loaded from the HF Hub.",
    ),
    text_field: str = typer.Option("problem", "--text-field"),
    workers: int = typer.Option(None, "--workers", help="Threads (default: CPU count, max 4)."),
    executor: str = EXECUTOR_OPTION,
    ray_address: str = RAY_ADDRESS_OPTION,
) -> None:
    """Drop rows overlapping benchmark items; dropped rows say which item and n-gram."""
    from curation.decontaminate import RULES, build_stock_ngrams, decontaminate, rule_named
    from curation.decontaminate.benchmarks import load_benchmarks
    from curation.decontaminate.scan import decontamination_scope
    from lake.steps import Step, run_steps

    if (input_ is None) == (table is None):
        raise CascadeError("give exactly one of --input FILE or --table NAME")
    if rule not in RULES:
        raise CascadeError(f"--rule takes {' | '.join(RULES)}, got {rule!r}")
    try:
        chosen = rule_named(rule, min_hits=min_hits, min_coverage=min_coverage, min_df=min_df)
    except ValueError as exc:
        raise CascadeError(str(exc)) from None
    if benchmark_dir is not None and not Path(benchmark_dir).is_dir():
        raise CascadeError(f"--benchmark-dir {benchmark_dir}: no such directory")
    json_columns: frozenset[str] = frozenset()
    if table is not None:
        df, _ = read_lake_table(table)
    else:
        rows = read_rows(Path(input_), text_fields=(text_field,))
        df, json_columns = rows.frame, rows.json_columns
    try:
        loaded = load_benchmarks(benchmarks, local_dir=benchmark_dir)
    except (ValueError, FileNotFoundError) as exc:
        raise CascadeError(f"--benchmarks {benchmarks}: {exc}") from None
    stock = None
    if stock_corpus is not None:
        corpus = read_rows(Path(stock_corpus), text_fields=(text_field,)).frame
        stock = build_stock_ngrams(corpus[text_field], n=n, min_df=chosen.min_df)
    source = input_ or table
    options = {
        "benchmarks": loaded,
        "n": n,
        "rule": chosen,
        "text_column": text_field,
        "stock": stock,
        "workers": workers,
    }
    step = Step("decontaminate", decontaminate, options, scope=decontamination_scope(chosen))
    try:
        with executor_session(executor, ray_address) as runner:
            if table is not None and not is_file_target(out):
                run = run_steps(
                    open_lake(write=True),
                    table,
                    [step],
                    out=out,
                    producer="cascade decontaminate",
                    params={"n": n, "rule": chosen.name, "benchmarks": [b.name for b in loaded]},
                    executor=runner,
                )
                entry = run.funnel[-1]
                kept_rows, dropped_rows = entry.rows_out, entry.rows_in - entry.rows_out
                by_benchmark = entry.stats.get("dropped_by_benchmark", {})
                where = run.output.ref
            else:
                result: StepResult = runner.run(step, df)
                write_rows(result.kept, Path(out), json_columns)
                if dropped_path:
                    write_rows(result.dropped, Path(dropped_path), json_columns)
                kept_rows, dropped_rows = result.kept.height, result.dropped.height
                by_benchmark = result.stats["dropped_by_benchmark"]
                where = out
    except ValueError as exc:
        raise CascadeError(f"{source}: {exc}") from None
    counts = ", ".join(f"{k} {v:,}" for k, v in by_benchmark.items())
    console.print(
        plain(
            f"decontaminate {source} ({chosen.name}, n={n}): {df.height:,} rows in, "
            f"{kept_rows:,} kept, {dropped_rows:,} dropped"
            + (f" ({counts})" if counts else "")
            + f" -> {where}"
        )
    )
