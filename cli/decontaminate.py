"""`cascade decontaminate`: drop rows that share word n-grams with benchmark test items."""

from __future__ import annotations

from pathlib import Path

import typer

from cli import app
from cli.console import CascadeError, console, state
from cli.files import read_jsonl, read_lake_table, write_rows
from curation.benchmarks import load_benchmarks
from curation.decontaminate import (
    DEFAULT_N,
    RULES,
    build_stock_ngrams,
    decontaminate,
    rule_named,
)
from lake.steps import drop_rows


@app.command("decontaminate")
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
    n: int = typer.Option(DEFAULT_N, "--n", help="Words per n-gram."),
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
) -> None:
    """Drop rows overlapping benchmark items; dropped rows say which item and n-gram."""
    if (input_ is None) == (table is None):
        raise CascadeError("give exactly one of --input FILE or --table NAME")
    if rule not in RULES:
        raise CascadeError(f"--rule takes {' | '.join(RULES)}, got {rule!r}")
    try:
        chosen = rule_named(rule, min_hits=min_hits, min_coverage=min_coverage, min_df=min_df)
    except ValueError as exc:
        raise CascadeError(str(exc)) from None
    info = None
    if table is not None:
        df, info = read_lake_table(table)
    else:
        df = read_jsonl(Path(input_), text_field)
    try:
        loaded = load_benchmarks(benchmarks, local_dir=benchmark_dir)
    except (ValueError, FileNotFoundError) as exc:
        raise CascadeError(f"--benchmarks {benchmarks}: {exc}") from None
    stock = None
    if stock_corpus is not None:
        corpus = read_jsonl(Path(stock_corpus), text_field)
        stock = build_stock_ngrams(corpus[text_field], n=n, min_df=chosen.min_df)
    source = input_ or table
    try:
        result = decontaminate(
            df, loaded, n=n, rule=chosen, text_column=text_field, stock=stock, workers=workers
        )
    except ValueError as exc:
        raise CascadeError(f"{source}: {exc}") from None

    out_path = Path(out)
    if info is not None and out_path.suffix not in (".jsonl", ".ndjson", ".parquet"):
        from lake.catalog import Lake

        lake = Lake(state.lake_path)
        kind = "prompts" if {"id", "source", "problem"} <= set(result.kept.columns) else "generic"
        params = {"n": n, "rule": result.stats["rule"], "benchmarks": result.stats["benchmarks"]}
        written = lake.commit(
            out,
            result.kept,
            kind=kind,
            parents=[info.ref],
            producer="cascade decontaminate",
            params=params,
        )
        if result.dropped.height:
            lake.commit(
                "drops",
                drop_rows(
                    result.dropped,
                    input_columns=df.columns,
                    table=info.name,
                    version=info.version,
                    step="decontaminate",
                ),
                kind="drops",
                mode="append",
                parents=[written.ref],
                producer="cascade decontaminate",
                params={"table": out},
            )
        where = written.ref
    else:
        write_rows(result.kept, out_path)
        where = str(out_path)
    if dropped_path:
        write_rows(result.dropped, Path(dropped_path))
    by_benchmark = ", ".join(f"{k} {v:,}" for k, v in result.stats["dropped_by_benchmark"].items())
    console.print(
        f"decontaminate {source} ({chosen.name}, n={n}): {df.height:,} rows in, "
        f"{result.kept.height:,} kept, {result.dropped.height:,} dropped"
        + (f" ({by_benchmark})" if by_benchmark else "")
        + f" -> {where}",
        highlight=False,
    )
