"""`cascade verify`: run a verifier over a file or a lake table."""

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
    import polars as pl

    from lake.steps import StepResult


def verify_rows(
    df: pl.DataFrame,
    kind: str,
    *,
    keep: str = "all",
    prompts: pl.DataFrame | None = None,
    **fields: object,
) -> StepResult:
    """Verification as a step: references joined from `prompts` when given (generations);
    keep all rows with their verdict columns, or only those that passed."""
    import polars as pl

    from curation.generate.references import join_references
    from curation.verify.table import verify_frame, verify_step
    from lake.steps import StepResult

    if prompts is not None:
        df = join_references(df, prompts)
    if keep == "passed":
        return verify_step(df, kind, **fields)  # type: ignore[arg-type]
    scored = verify_frame(df, kind, **fields)  # type: ignore[arg-type]
    return StepResult(kept=scored, dropped=scored.clear().with_columns(reason=pl.lit("")))


def _verify_options() -> dict[str, dict[str, object]]:
    """The verifier kinds, from the reward registry (which loads every verifier)."""
    from curation.verify.rewards import verifier_kinds, verifier_named

    return {
        "kind": {"help": " | ".join(verifier_kinds())},
        "reference_field": {
            "help": "Default: "
            + ", ".join(f"{verifier_named(k).columns[0]} ({k})" for k in verifier_kinds())
            + "."
        },
    }


@app.command("verify", cls=lazy_options(_verify_options))
def verify_command(
    kind: str = typer.Option(..., "--kind"),  # help: _verify_options
    out: str = typer.Option(
        ..., "--out", help="Output .jsonl/.parquet file, or a lake table name with --table."
    ),
    input_: str = typer.Option(None, "--input", help="Input .jsonl/.json/.parquet file."),
    table: str = typer.Option(None, "--table", help="Lake table to read (name or name@N)."),
    prompts: str = typer.Option(
        None,
        "--prompts",
        help="For generations: the prompts table whose references they are scored against "
        "(joined on prompt_id).",
    ),
    keep: str = typer.Option(
        "all", "--keep", help="all: keep every row with its verdict; passed: drop the rest."
    ),
    response_field: str = typer.Option("response", "--response-field"),
    reference_field: str = typer.Option(None, "--reference-field"),  # help: _verify_options
    executor: str = EXECUTOR_OPTION,
    ray_address: str = RAY_ADDRESS_OPTION,
) -> None:
    """Verify responses; keeps every input column and adds passed, score and detail."""
    import polars as pl

    from curation.verify.rewards import verifier_kinds
    from lake.catalog import LakeError
    from lake.steps import Step, run_steps

    if kind not in verifier_kinds():
        kinds = ", ".join(verifier_kinds())
        raise CascadeError(f"unknown --kind {kind!r}; choose one of {kinds}")
    if (input_ is None) == (table is None):
        raise CascadeError("give exactly one of --input FILE or --table NAME")
    if keep not in ("all", "passed"):
        raise CascadeError(f"--keep takes all or passed, got {keep!r}")
    json_columns: frozenset[str] = frozenset()
    kind_of_table = None
    if table is not None:
        df, info = read_lake_table(table)
        kind_of_table = info.kind
    else:
        rows = read_rows(Path(input_), required=(response_field,))
        df, json_columns = rows.frame, rows.json_columns
    source = input_ or table
    generations = kind_of_table == "generations" or {"prompt_id", "final_answer"} <= set(df.columns)
    if generations and prompts is None:
        raise CascadeError(
            f"{source} holds generations, which carry no reference; give --prompts TABLE to "
            "score them against their prompts' references"
        )
    options: dict[str, object] = {
        "kind": kind,
        "keep": keep,
        "response_field": response_field,
        "reference_field": reference_field,
    }
    if prompts is not None:
        try:
            options["prompts"] = pl.from_arrow(open_lake().read(prompts))
        except LakeError as exc:
            raise CascadeError(f"--prompts {prompts}: {exc}") from None
    step = Step("verify", verify_rows, options, scope="rows")
    try:
        with executor_session(executor, ray_address) as runner:
            if table is not None and not is_file_target(out):
                run = run_steps(
                    open_lake(write=True),
                    table,
                    [step],
                    out=out,
                    producer=f"cascade verify --kind {kind}",
                    params={k: v for k, v in options.items() if k != "prompts"}
                    | {"prompts": prompts},
                    executor=runner,
                )
                passed_column = pl.from_arrow(open_lake().read(run.output.ref, ["passed"]))
                where = run.output.ref
                dropped = run.funnel[-1].stats if keep == "passed" else {}
            else:
                verdicts = runner.run(step, df)
                write_rows(verdicts.kept, Path(out), json_columns)
                passed_column = pl.concat(
                    [verdicts.kept.select("passed"), verdicts.dropped.select("passed")]
                )
                where, dropped = out, {}
    except ValueError as exc:
        raise CascadeError(f"{source}: {exc}") from None
    assert isinstance(passed_column, pl.DataFrame)
    if dropped:  # only the passing rows are in the table; the step counted the rest
        total = int(dropped["rows_in"])  # type: ignore[arg-type]
        passed, undecided = int(dropped["passed"]), int(dropped["undecided"])  # type: ignore[arg-type]
    else:
        total = passed_column.height
        passed = int(passed_column.get_column("passed").sum() or 0)
        undecided = passed_column.get_column("passed").null_count()
    console.print(
        plain(
            f"verified {total:,} rows ({kind}): {passed:,} passed, "
            f"{total - passed - undecided:,} failed, {undecided:,} undecided -> {where}"
        )
    )
