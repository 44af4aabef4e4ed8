"""`cascade dedup`: exact + near-duplicate removal over a jsonl file or a lake table."""

from __future__ import annotations

from pathlib import Path

import typer

from cli.app import app
from cli.console import CascadeError, console, open_lake, plain
from cli.executors import EXECUTOR_OPTION, RAY_ADDRESS_OPTION, executor_session
from cli.files import is_file_target, read_lake_table, read_rows, write_rows


def _keep_apart(text: str) -> tuple[str, ...]:
    from curation.dedup import KEEP_APART_CHOICES

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
    executor: str = EXECUTOR_OPTION,
    ray_address: str = RAY_ADDRESS_OPTION,
) -> None:
    """Drop exact then near duplicates; dropped rows carry cluster_id and duplicate_of."""
    import polars as pl

    from curation.dedup import exact_dedup, near_dedup
    from lake.steps import Step, key_column, run_steps

    if (input_ is None) == (table is None):
        raise CascadeError("give exactly one of --input FILE or --table NAME")
    if shingle not in ("char", "word") or verify not in ("estimate", "exact", "none"):
        raise CascadeError("--shingle takes char|word and --verify takes estimate|exact|none")
    apart = _keep_apart(keep_apart)
    json_columns: frozenset[str] = frozenset()
    if table is not None:
        df, info = read_lake_table(table)
        if id_field not in df.columns or (id_field == "id" and "uid" in df.columns):
            id_field = key_column(df.columns)
    else:
        rows = read_rows(Path(input_), text_fields=(text_field,))
        df, json_columns = rows.frame, rows.json_columns
        if id_field not in df.columns:  # each row's id is its line number
            df = df.with_columns(pl.Series(id_field, [str(n) for n in rows.lines]))
        missing = df.get_column(id_field).is_null()
        if missing.any():
            line = rows.lines[int(missing.arg_max() or 0)]
            raise CascadeError(f"{input_}:{line}: field {id_field!r} is null")
    source = input_ or table
    near = {
        "threshold": threshold,
        "num_perm": num_perm,
        "ngram": ngram,
        "shingle": shingle,
        "verify": verify,
        "keep_apart": apart,
        "text_column": text_field,
        "id_column": id_field,
    }
    steps = [
        Step(
            "exact_dedup",
            exact_dedup,
            {"text_column": text_field, "id_column": id_field},
            partition="normalized_text",
        )
    ]
    if not no_near:
        steps.append(Step("near_dedup", near_dedup, near, partition="lsh_bands"))
    try:
        with executor_session(executor, ray_address) as runner:
            if table is not None and not is_file_target(out):
                run = run_steps(
                    open_lake(write=True),
                    table,
                    steps,
                    out=out,
                    producer="cascade dedup",
                    params={k: v for k, v in near.items() if k != "keep_apart"}
                    | {"keep_apart": list(apart), "exact_only": no_near},
                    executor=runner,
                )
                kept_rows = run.output.rows
                counts = ", ".join(f"{f.step} {f.rows_in - f.rows_out:,}" for f in run.funnel)
                where = run.output.ref
            else:
                frame, dropped = df, []
                counted = []
                for step in steps:
                    result = runner.run(step, frame)
                    dropped.append(result.dropped)
                    counted.append(f"{step.name} {result.dropped.height:,}")
                    frame = result.kept
                write_rows(frame, Path(out), json_columns)
                if dropped_path:
                    frames = [d for d in dropped if d.height]
                    write_rows(
                        pl.concat(frames, how="diagonal_relaxed")
                        if frames
                        else df.clear().with_columns(pl.lit(None, pl.String).alias("reason")),
                        Path(dropped_path),
                        json_columns,
                    )
                kept_rows, counts, where = frame.height, ", ".join(counted), out
    except ValueError as exc:
        raise CascadeError(f"{source}: {exc}") from None
    console.print(
        plain(f"dedup {source}: {df.height:,} rows in, {kept_rows:,} kept ({counts}) -> {where}")
    )
