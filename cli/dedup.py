"""`cascade dedup`: exact + near-duplicate removal over a jsonl file or a lake table."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import typer

from cli import app
from cli.console import CascadeError, console, state
from cli.files import read_jsonl, read_lake_table, write_rows
from curation.dedup import KEEP_APART_CHOICES, exact_dedup, near_dedup
from lake.steps import StepResult, drop_rows


def _keep_apart(text: str) -> tuple[str, ...]:
    if text.strip().lower() == "none":
        return ()
    parts = tuple(p.strip() for p in text.split(",") if p.strip())
    bad = [p for p in parts if p not in KEEP_APART_CHOICES]
    if bad:
        raise CascadeError(
            f"--keep-apart accepts {', '.join(KEEP_APART_CHOICES)} or none, got {', '.join(bad)}"
        )
    return parts


@app.command("dedup")
def dedup_command(
    out: str = typer.Option(
        ..., "--out", help="Kept rows: .jsonl/.parquet file or, with --table, a lake table name."
    ),
    input_: str = typer.Option(None, "--input", help="Input .jsonl file."),
    table: str = typer.Option(None, "--table", help="Lake table to read (name or name@N)."),
    dropped_path: str = typer.Option(None, "--dropped", help="Write dropped rows (.jsonl) here."),
    threshold: float = typer.Option(0.6, "--threshold", help="Jaccard threshold for near dups."),
    num_perm: int = typer.Option(112, "--num-perm", help="MinHash permutations."),
    ngram: int = typer.Option(5, "--ngram", help="Shingle size (characters, or words)."),
    shingle: str = typer.Option("char", "--shingle", help="char | word"),
    verify: str = typer.Option("estimate", "--verify", help="estimate | exact | none"),
    keep_apart: str = typer.Option(
        "answer,numbers", "--keep-apart", help="What must match to merge: answer,numbers | none"
    ),
    text_field: str = typer.Option("problem", "--text-field"),
    id_field: str = typer.Option("id", "--id-field"),
    no_near: bool = typer.Option(False, "--exact-only", help="Skip near-duplicate removal."),
) -> None:
    """Drop exact then near duplicates; dropped rows carry cluster_id and duplicate_of."""
    if (input_ is None) == (table is None):
        raise CascadeError("give exactly one of --input FILE or --table NAME")
    if shingle not in ("char", "word") or verify not in ("estimate", "exact", "none"):
        raise CascadeError("--shingle takes char|word and --verify takes estimate|exact|none")
    apart = _keep_apart(keep_apart)
    parents: list[str] = []
    if table is not None:
        df, info = read_lake_table(table)
        parents = [info.ref]
    else:
        df = read_jsonl(Path(input_), text_field, id_field)
    source = input_ or table
    params = {
        "threshold": threshold,
        "num_perm": num_perm,
        "ngram": ngram,
        "shingle": shingle,
        "verify": verify,
        "keep_apart": list(apart),
    }
    try:
        exact = exact_dedup(df, text_column=text_field, id_column=id_field)
        results: list[tuple[str, StepResult]] = [("exact_dedup", exact)]
        if not no_near:
            near = near_dedup(
                exact.kept,
                text_column=text_field,
                id_column=id_field,
                keep_apart=apart,
                **{k: v for k, v in params.items() if k != "keep_apart"},
            )
            results.append(("near_dedup", near))
    except ValueError as exc:
        raise CascadeError(f"{source}: {exc}") from None
    kept = results[-1][1].kept
    frames = [r.dropped for _, r in results if r.dropped.height]
    dropped = (
        pl.concat(frames, how="diagonal_relaxed")
        if frames
        else df.clear().with_columns(pl.lit(None, pl.String).alias("reason"))
    )

    out_path = Path(out)
    if table is not None and out_path.suffix not in (".jsonl", ".ndjson", ".parquet"):
        from lake.catalog import Lake

        lake = Lake(state.lake_path)
        kind = "prompts" if {"id", "source", "problem"} <= set(kept.columns) else "generic"
        producer = "cascade dedup"
        written = lake.commit(
            out, kept, kind=kind, parents=parents, producer=producer, params=params
        )
        drops = [
            drop_rows(
                r.dropped,
                input_columns=df.columns,
                table=info.name,
                version=info.version,
                step=name,
                id_column=id_field,
            )
            for name, r in results
            if r.dropped.height
        ]
        if drops:
            lake.commit(
                "drops",
                pl.concat(drops),
                kind="drops",
                mode="append",
                parents=[written.ref],
                producer=producer,
                params={"table": out},
            )
        where = written.ref
    else:
        write_rows(kept, out_path)
        where = str(out_path)
    if dropped_path:
        write_rows(dropped, Path(dropped_path))
    counts = ", ".join(f"{name} {r.dropped.height:,}" for name, r in results)
    console.print(
        f"dedup {source}: {df.height:,} rows in, {kept.height:,} kept ({counts}) -> {where}"
    )
