"""The one contract between operators and the lake, and the one runner that commits steps.

An operator is a plain function `(pl.DataFrame, ...params) -> StepResult`. `dropped` holds
the dropped input rows with all their columns plus `reason` (a short code such as
`contaminated` or `near_duplicate`) and any detail columns the step wants recorded
(`benchmark`, `duplicate_of`, ...). `run_steps` runs a list of steps over a lake table (or
over rows just read from sources), checks for every step that rows in = kept + dropped, and
commits the kept rows, every dropped row with its step, reason and JSON detail, and the
funnel in one lake transaction. Nothing else writes drops.

A step says whether it is row-local (`scope="rows"`: it may run on any batch of rows, so a
cluster executor can map it over partitions) or needs the whole table (`scope="table"`, with
`partition` naming how a cluster executor may split it, e.g. by LSH band for near-dedup). The
local executor runs every step on the whole table in this process.

An executor may also run a whole step list itself (`TableExecutor.run_all`, the Ray
executor's): it reads the input version, runs the steps and writes the kept rows and the
drops as data files where the table is stored, returning counts and files; `run_steps` then
registers those files in the same single transaction. The accounting checks are the same
functions on both paths (`tally_keys`, `check_tally`), summed over hash partitions of the
keys there; drops rows are made by the same `drop_rows` and `drops_rows`.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

import polars as pl
import pyarrow as pa

from lake.progress import phase
from schemas.dataset_manifest import FunnelStep

if TYPE_CHECKING:  # the runner needs the lake; operators importing StepResult do not
    from lake.catalog import Lake, VersionInfo
    from lake.storage import DataFiles

SCOPES = ("rows", "table")
KEY_COLUMNS = ("uid", "id")


class StepError(ValueError):
    """A step broke the contract (rows lost or invented) or failed; the message says which."""


@dataclass
class StepResult:
    """Rows an operator keeps, rows it drops (with `reason` + detail columns), and stats."""

    kept: pl.DataFrame
    dropped: pl.DataFrame
    stats: dict[str, object] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.dropped.height and "reason" not in self.dropped.columns:
            raise ValueError("StepResult.dropped must have a 'reason' column")


@dataclass(frozen=True)
class Step:
    """One recipe step: a name, an operator `(df, **params) -> StepResult`, its parameters.

    `scope` is `rows` for row-local operators (filters, decontamination scans, verification,
    generation) and `table` for those that need every row at once (dedup, difficulty joins);
    `partition` tells a cluster executor how a table-scope step may be split. A `fan_out`
    step turns each input row into several (k responses per prompt): its kept rows name their
    input row in `prompt_uid`, and an input row with no output row must be in `dropped`.
    """

    name: str
    run: Callable[..., StepResult]
    params: dict[str, Any] = field(default_factory=dict)
    scope: Literal["rows", "table"] = "table"
    partition: str | None = None
    fan_out: bool = False
    skipped: str | None = None
    """Why the recipe skips this step (e.g. its model is `none`): it keeps every row and
    shows in the funnel as skipped, so a reader sees what did not run."""

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("a step needs a name")
        if self.scope not in SCOPES:
            raise ValueError(f"step {self.name}: scope must be one of {SCOPES}, got {self.scope!r}")


def _keep_all(df: pl.DataFrame) -> StepResult:
    """A skipped step's operator: every row kept, none dropped (executors do not ship it
    to workers)."""
    return StepResult(df, df.clear())


def skipped_step(name: str, why: str) -> Step:
    """The step `name` of a recipe, not run because `why`."""
    return Step(name, _keep_all, scope="rows", skipped=why)


@dataclass
class Rows:
    """Rows a run starts from that are not in the lake yet (what ingest read).

    `dropped()` returns the rows that could not be read (key column, `reason` and detail
    columns); it is called after `data` has been consumed, since a streamed reader finds its
    malformed lines as it goes.
    """

    data: pl.DataFrame | Iterable[pa.RecordBatch]
    dropped: Callable[[], pl.DataFrame]
    step: str = "ingest"
    parents: list[str] = field(default_factory=list)


class Executor(Protocol):
    """Runs one step over a table; the local executor and a cluster executor share it."""

    def run(self, step: Step, frame: pl.DataFrame) -> StepResult: ...


class LocalExecutor:
    """Every step on the whole table, in this process (the default)."""

    def run(self, step: Step, frame: pl.DataFrame) -> StepResult:
        return step.run(frame, **step.params)


@dataclass(frozen=True)
class RunIds:
    """What every drops row of one `run_steps` call says about the run."""

    build_id: str
    output_table: str
    output_version: int
    input_table: str | None
    input_version: int | None


@dataclass
class StepsWritten:
    """What an executor that ran a whole step list hands back to `run_steps`: the kept rows
    and the drops as data files written under the lake's data path (not registered yet, in
    the order and cut into files as the lake's own writer would have written them), and the
    funnel."""

    kept: DataFiles
    drops: DataFiles
    funnel: list[FunnelStep]


class TableExecutor(Executor, Protocol):
    """An executor that can also run a whole step list over a lake version without the
    driver holding the table: `run_steps` uses `run_all` when the executor has it.

    `run_all` must call `on_step` after each step, raise `StepError` when a step breaks the
    accounting (`tally_keys` / `check_tally`, as the local path does), and leave no files
    behind when it fails; `run_steps` registers what it returns in one transaction. Its
    data files are named with the `writer` token (`write_data_files(writer=...)`): the lease
    `run_steps` holds until the commit, which tells them from a killed run's (`lake.leases`).
    """

    def run_all(
        self,
        lake: Lake,
        source: VersionInfo,
        steps: Sequence[Step],
        *,
        out: str,
        kind: str,
        run: RunIds,
        on_step: Callable[[FunnelStep], None] | None = None,
        writer: str | None = None,
    ) -> StepsWritten: ...


@dataclass
class StepRun:
    """What `run_steps` committed: the output version, its drops version, and the funnel."""

    output: VersionInfo
    drops: VersionInfo | None
    funnel: list[FunnelStep]
    build_id: str
    input: VersionInfo | None


def key_column(columns: Sequence[str]) -> str:
    """The column that identifies rows: `uid` (prompts) or else `id` (generations, files)."""
    for name in KEY_COLUMNS:
        if name in columns:
            return name
    raise StepError(f"rows need a 'uid' or 'id' column to be tracked; columns are {list(columns)}")


def drop_rows(
    dropped: pl.DataFrame, *, input_columns: Sequence[str], step: str, key: str | None = None
) -> pl.DataFrame:
    """A step's dropped frame as `drops` rows: key, step, reason and a JSON detail.

    Every column of `dropped` that was not an input column (other than `reason`) is packed
    into the JSON `detail`, so a reader sees exactly what the step measured. The run's
    columns (build id, input and output versions) are added by `run_steps`.
    """
    key = key or key_column(input_columns)
    if dropped.height == 0:
        return pl.DataFrame(schema=_STEP_DROPS)
    detail_cols = [c for c in dropped.columns if c not in input_columns and c != "reason"]
    if detail_cols:
        detail = [
            json.dumps(d, default=str, ensure_ascii=False)
            for d in dropped.select(detail_cols).to_dicts()
        ]
    else:
        detail = [None] * dropped.height
    return pl.DataFrame(
        {
            "uid": dropped.get_column(key).cast(pl.String),
            "step": [step] * dropped.height,
            "reason": dropped.get_column("reason").cast(pl.String),
            "detail": detail,
        },
        schema=_STEP_DROPS,
    )


_STEP_DROPS = {"uid": pl.String, "step": pl.String, "reason": pl.String, "detail": pl.String}


def drops_rows(step_drops: pl.DataFrame, run: RunIds) -> pl.DataFrame:
    """`drop_rows` frames as rows of the `drops` table: the run's columns, then uid, step,
    reason and detail."""
    return step_drops.select(
        pl.lit(run.build_id).alias("build_id"),
        pl.lit(run.output_table).alias("output_table"),
        pl.lit(run.output_version, pl.Int64).alias("output_version"),
        pl.lit(run.input_table, pl.String).alias("input_table"),
        pl.lit(run.input_version, pl.Int64).alias("input_version"),
        "uid",
        "step",
        "reason",
        "detail",
    )


def step_funnel(
    step: Step,
    rows_in: int,
    rows_out: int,
    dropped: dict[str, int],
    seconds: float,
    stats: dict[str, object],
) -> FunnelStep:
    """One funnel entry (the drop counts sorted by reason, the stats as JSON values)."""
    return FunnelStep(
        step=step.name,
        rows_in=rows_in,
        rows_out=rows_out,
        dropped=dict(sorted(dropped.items())),
        seconds=round(seconds, 3),
        stats=json.loads(json.dumps(stats, default=str)),
        skipped=step.skipped,
    )


def run_steps(
    lake: Lake,
    source: str | Rows,
    steps: Sequence[Step],
    *,
    out: str,
    kind: str | None = None,
    producer: str,
    params: dict[str, Any] | None = None,
    executor: Executor | None = None,
    on_step: Callable[[FunnelStep], None] | None = None,
    build_id: str | None = None,
) -> StepRun:
    """Run `steps` over `source` (a lake ref, or Rows read from files) and commit the result.

    The kept rows become a new version of `out` (of `kind`, default: the input's kind), and
    the drops of every step land in `drops` with that version, in one transaction. Rows keep
    the measurement columns steps add, so thresholds can be re-tuned with SQL later. An
    executor with `run_all` (a `TableExecutor`) runs the steps over a lake ref itself and
    returns data files: the input is then never read here.
    """
    from lake.catalog import TableWrite

    # Files are written under one lease until the commit: see lake.leases.
    with lake.write_lease() as lease:
        executor = executor or LocalExecutor()
        build_id = build_id or uuid.uuid4().hex
        version = lake.next_version(out)
        info: VersionInfo | None = None
        funnel: list[FunnelStep] = []
        drops: list[pl.DataFrame] = []
        written: StepsWritten | None = None
        if isinstance(source, Rows):
            parents, input_table, input_version = list(source.parents), None, None
            kind = kind or "prompts"
            data: pl.DataFrame | Iterable[pa.RecordBatch] | DataFiles = source.data
            if steps:
                data = _materialize(source.data)
        else:
            info = lake.resolve(source)
            parents, input_table, input_version = [info.ref], info.name, info.version
            kind = kind or info.kind
            run_all = getattr(executor, "run_all", None)
            if steps and callable(run_all):
                ids = RunIds(build_id, out, version, input_table, input_version)
                lease.cover(out)
                lease.cover("drops")  # the workers write files of both
                written = run_all(
                    lake,
                    info,
                    steps,
                    out=out,
                    kind=kind,
                    run=ids,
                    on_step=on_step,
                    writer=lease.token,
                )
                assert written is not None
                data, funnel = written.kept, written.funnel
            else:
                data = pl.from_arrow(lake.read(info.ref))  # type: ignore[assignment]

        if steps and written is None:
            frame = data if isinstance(data, pl.DataFrame) else _materialize(data)  # type: ignore[arg-type]
            key = key_column(frame.columns)
            check_tally(
                None,
                tally_keys(inputs=frame.get_column(key)),
                where=str(source) if isinstance(source, str) else "the input",
                key=key,
            )
            for step in steps:
                started = time.perf_counter()
                # a skipped step keeps every row here, never sent to an executor's workers
                with phase(f"step {step.name}", note=f"{frame.height:,} rows in"):
                    result = step.run(frame) if step.skipped else executor.run(step, frame)
                _check_accounting(step, frame, result, key)
                drops.append(drop_rows(result.dropped, input_columns=frame.columns, step=step.name))
                entry = step_funnel(
                    step,
                    frame.height,
                    result.kept.height,
                    count_reasons(result.dropped),
                    time.perf_counter() - started,
                    result.stats,
                )
                funnel.append(entry)
                if on_step:
                    on_step(entry)
                frame = result.kept
            data = frame

        read_errors: list[pl.DataFrame] = []
        ids = RunIds(build_id, out, version, input_table, input_version)

        def all_drops() -> pl.DataFrame | DataFiles:
            # Called by the commit after the output was written: a streamed source has by then
            # met every line it could not read.
            if written is not None:
                return written.drops
            frames = [d for d in drops if d.height]
            if isinstance(source, Rows):
                errors = source.dropped()
                if errors.height:
                    key = key_column(errors.columns)
                    read_errors.append(errors)
                    frames.insert(
                        0, drop_rows(errors, input_columns=[key], step=source.step, key=key)
                    )
            stacked = pl.concat(frames) if frames else pl.DataFrame(schema=_STEP_DROPS)
            return drops_rows(stacked, ids)

        try:
            output, *rest = lake.commit_many(
                [
                    TableWrite(
                        out,
                        data,
                        kind=kind,
                        parents=parents,
                        producer=producer,
                        params=dict(params or {}),
                        expect_version=version,
                    ),
                    TableWrite(
                        "drops",
                        all_drops,
                        kind="drops",
                        mode="append",
                        parents=[f"{out}@{version}"],
                        producer=producer,
                        skip_if_empty=True,
                    ),
                ],
                build_id=build_id,
                lease=lease,
            )
        except BaseException:
            if written is not None:  # files the commit did not get to (it removes its own)
                for f in (*written.kept.files, *written.drops.files):
                    lake.store.remove(f)
            raise
        if isinstance(source, Rows):
            unread = sum(e.height for e in read_errors)
            rows_read = (funnel[0].rows_in if funnel else output.rows_added) + unread
            funnel.insert(
                0,
                FunnelStep(
                    step=source.step,
                    rows_in=rows_read,
                    rows_out=rows_read - unread,
                    dropped={"malformed": unread} if unread else {},
                ),
            )
        return StepRun(
            output=output,
            drops=rest[0] if rest else None,
            funnel=funnel,
            build_id=build_id,
            input=info,
        )


def _materialize(data: pl.DataFrame | Iterable[pa.RecordBatch]) -> pl.DataFrame:
    if isinstance(data, pl.DataFrame):
        return data
    batches = list(data)
    if not batches:
        from lake.catalog import LakeError

        raise LakeError("no rows were read")
    return pl.from_arrow(pa.Table.from_batches(batches))  # type: ignore[return-value]


# -- the accounting checks ---------------------------------------------------------------------


@dataclass
class KeyTally:
    """The counts behind a step's accounting, over the keys of one hash partition (every
    occurrence of a value in the same partition) or over all of them: partitions' tallies
    add up to the whole table's, so a cluster executor checks with the same `check_tally`.

    `inputs`: the step's input keys; `out`: keys of kept + dropped rows; fan-out steps also
    count `kept` keys and `parents` (the distinct `prompt_uid`s of kept rows plus the
    dropped keys) and how many parents are not input keys. `repeated_*` is one repeating
    value, for the message.
    """

    inputs: int = 0
    distinct_inputs: int = 0
    repeated_input: str | None = None
    distinct_out: int = 0
    kept: int = 0
    distinct_kept: int = 0
    repeated_kept: str | None = None
    parents: int = 0
    distinct_parents: int = 0
    unknown_parents: int = 0

    def __add__(self, other: KeyTally) -> KeyTally:
        return KeyTally(
            inputs=self.inputs + other.inputs,
            distinct_inputs=self.distinct_inputs + other.distinct_inputs,
            repeated_input=self.repeated_input or other.repeated_input,
            distinct_out=self.distinct_out + other.distinct_out,
            kept=self.kept + other.kept,
            distinct_kept=self.distinct_kept + other.distinct_kept,
            repeated_kept=self.repeated_kept or other.repeated_kept,
            parents=self.parents + other.parents,
            distinct_parents=self.distinct_parents + other.distinct_parents,
            unknown_parents=self.unknown_parents + other.unknown_parents,
        )


def tally_keys(
    *,
    inputs: pl.Series | None = None,
    kept: pl.Series | None = None,
    dropped: pl.Series | None = None,
    parents: pl.Series | None = None,
) -> KeyTally:
    """A `KeyTally` of some keys (String-cast): the input's, the kept and dropped rows', and
    for a fan-out step the kept rows' `prompt_uid`s (`parents`)."""
    tally = KeyTally()
    if inputs is not None:
        inputs = inputs.cast(pl.String)
        tally.inputs, tally.distinct_inputs = inputs.len(), inputs.n_unique()
        tally.repeated_input = _repeated(inputs)
    out = [s.cast(pl.String) for s in (kept, dropped) if s is not None]
    if parents is None:
        if out:
            tally.distinct_out = pl.concat(out).n_unique()
        return tally
    kept_keys = out[0] if kept is not None else pl.Series([], dtype=pl.String)
    tally.kept, tally.distinct_kept = kept_keys.len(), kept_keys.n_unique()
    tally.repeated_kept = _repeated(kept_keys)
    named = [parents.cast(pl.String).unique()]
    if dropped is not None:
        named.append(dropped.cast(pl.String))
    found = pl.concat(named)
    tally.parents, tally.distinct_parents = found.len(), found.n_unique()
    known = inputs if inputs is not None else pl.Series([], dtype=pl.String)
    tally.unknown_parents = int((~found.is_in(known.implode())).sum())
    return tally


def check_tally(
    step: Step | None, tally: KeyTally, *, rows_in: int = 0, where: str = "", key: str = "uid"
) -> None:
    """Raise `StepError` if the keys break the contract: an input not uniquely keyed
    (`step` None), or a step whose kept and dropped rows do not cover its input once (a
    fan-out step: whose parents are not each input row once, or whose output keys repeat)."""
    if step is None:
        if tally.distinct_inputs != tally.inputs:
            raise StepError(
                f"rows of {where} are not uniquely keyed by {key!r} "
                f"({tally.repeated_input!r} repeats); drops could not say which row they mean"
            )
        return
    if step.fan_out:
        if tally.distinct_kept != tally.kept:
            raise StepError(
                f"rows of step {step.name}'s output are not uniquely keyed by {key!r} "
                f"({tally.repeated_kept!r} repeats); drops could not say which row they mean"
            )
        if tally.unknown_parents or tally.parents != rows_in or tally.distinct_parents != rows_in:
            raise StepError(
                f"step {step.name}: every input row must have output rows or be dropped, once"
            )
        return
    if tally.distinct_out != rows_in:
        raise StepError(f"step {step.name}: kept and dropped rows do not cover the input once")


def check_counts(
    step: Step, rows_in: int, kept: int, dropped: int, kept_columns: Sequence[str], key: str
) -> None:
    """The checks on counts and columns alone (before any key is looked at)."""
    if step.fan_out:
        if "prompt_uid" not in kept_columns or key not in kept_columns:
            raise StepError(f"step {step.name}: fan-out rows need '{key}' and 'prompt_uid'")
        return
    if rows_in != kept + dropped:
        raise StepError(f"step {step.name}: {rows_in} rows in but {kept} kept + {dropped} dropped")


def _repeated(keys: pl.Series) -> str | None:
    duplicated = keys.is_duplicated()
    return keys[int(duplicated.arg_max() or 0)] if duplicated.any() else None


def _check_accounting(step: Step, frame: pl.DataFrame, result: StepResult, key: str) -> None:
    check_counts(
        step, frame.height, result.kept.height, result.dropped.height, result.kept.columns, key
    )
    dropped = result.dropped.get_column(key) if result.dropped.height else None
    tally = tally_keys(
        inputs=frame.get_column(key) if step.fan_out else None,
        kept=result.kept.get_column(key),
        dropped=dropped,
        parents=result.kept.get_column("prompt_uid") if step.fan_out else None,
    )
    check_tally(step, tally, rows_in=frame.height, key=key)


def count_reasons(dropped: pl.DataFrame) -> dict[str, int]:
    """Dropped rows per reason, sorted by reason."""
    if not dropped.height:
        return {}
    return dict(dropped.group_by("reason").len().sort("reason").iter_rows())
