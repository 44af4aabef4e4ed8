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

from schemas.dataset_manifest import FunnelStep

if TYPE_CHECKING:  # the runner needs the lake; operators importing StepResult do not
    from lake.catalog import Lake, VersionInfo

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

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("a step needs a name")
        if self.scope not in SCOPES:
            raise ValueError(f"step {self.name}: scope must be one of {SCOPES}, got {self.scope!r}")


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
    the measurement columns steps add, so thresholds can be re-tuned with SQL later.
    """
    from lake.catalog import TableWrite

    executor = executor or LocalExecutor()
    build_id = build_id or uuid.uuid4().hex
    version = lake.next_version(out)
    info: VersionInfo | None = None
    if isinstance(source, Rows):
        parents, input_table, input_version = list(source.parents), None, None
        kind = kind or "prompts"
        data: pl.DataFrame | Iterable[pa.RecordBatch] = source.data
        if steps:
            data = _materialize(data)
    else:
        info = lake.resolve(source)
        parents, input_table, input_version = [info.ref], info.name, info.version
        kind = kind or info.kind
        data = pl.from_arrow(lake.read(info.ref))  # type: ignore[assignment]

    funnel: list[FunnelStep] = []
    drops: list[pl.DataFrame] = []
    if steps:
        frame = data if isinstance(data, pl.DataFrame) else _materialize(data)
        key = key_column(frame.columns)
        _check_unique(frame, key, str(source) if isinstance(source, str) else "the input")
        for step in steps:
            started = time.perf_counter()
            result = executor.run(step, frame)
            _check_accounting(step, frame, result, key)
            drops.append(drop_rows(result.dropped, input_columns=frame.columns, step=step.name))
            entry = FunnelStep(
                step=step.name,
                rows_in=frame.height,
                rows_out=result.kept.height,
                dropped=_by_reason(result.dropped),
                seconds=round(time.perf_counter() - started, 3),
                stats=json.loads(json.dumps(result.stats, default=str)),
            )
            funnel.append(entry)
            if on_step:
                on_step(entry)
            frame = result.kept
        data = frame

    read_errors: list[pl.DataFrame] = []

    def all_drops() -> pl.DataFrame:
        # Called by the commit after the output was written: a streamed source has by then
        # met every line it could not read.
        frames = [d for d in drops if d.height]
        if isinstance(source, Rows):
            errors = source.dropped()
            if errors.height:
                key = key_column(errors.columns)
                read_errors.append(errors)
                frames.insert(0, drop_rows(errors, input_columns=[key], step=source.step, key=key))
        stacked = pl.concat(frames) if frames else pl.DataFrame(schema=_STEP_DROPS)
        return stacked.select(
            pl.lit(build_id).alias("build_id"),
            pl.lit(out).alias("output_table"),
            pl.lit(version, pl.Int64).alias("output_version"),
            pl.lit(input_table, pl.String).alias("input_table"),
            pl.lit(input_version, pl.Int64).alias("input_version"),
            "uid",
            "step",
            "reason",
            "detail",
        )

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
    )
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
        output=output, drops=rest[0] if rest else None, funnel=funnel, build_id=build_id, input=info
    )


def _materialize(data: pl.DataFrame | Iterable[pa.RecordBatch]) -> pl.DataFrame:
    if isinstance(data, pl.DataFrame):
        return data
    batches = list(data)
    if not batches:
        from lake.catalog import LakeError

        raise LakeError("no rows were read")
    return pl.from_arrow(pa.Table.from_batches(batches))  # type: ignore[return-value]


def _check_unique(frame: pl.DataFrame, key: str, where: str) -> None:
    duplicated = frame.get_column(key).is_duplicated()
    if duplicated.any():
        value = frame.get_column(key)[int(duplicated.arg_max() or 0)]
        raise StepError(
            f"rows of {where} are not uniquely keyed by {key!r} ({value!r} repeats); "
            "drops could not say which row they mean"
        )


def _check_accounting(step: Step, frame: pl.DataFrame, result: StepResult, key: str) -> None:
    kept, dropped = result.kept.height, result.dropped.height
    if step.fan_out:
        if "prompt_uid" not in result.kept.columns or key not in result.kept.columns:
            raise StepError(f"step {step.name}: fan-out rows need '{key}' and 'prompt_uid'")
        _check_unique(result.kept, key, f"step {step.name}'s output")
        parents = pl.concat(
            [
                result.kept.select(pl.col("prompt_uid").cast(pl.String).alias(key)).unique(),
                result.dropped.select(pl.col(key).cast(pl.String)),
            ]
        )
        known = parents[key].is_in(frame.get_column(key).cast(pl.String).implode()).all()
        if not known or parents.height != frame.height or parents[key].n_unique() != frame.height:
            raise StepError(
                f"step {step.name}: every input row must have output rows or be dropped, once"
            )
        return
    if frame.height != kept + dropped:
        raise StepError(
            f"step {step.name}: {frame.height} rows in but {kept} kept + {dropped} dropped"
        )
    parts = [result.kept.select(pl.col(key).cast(pl.String))]
    if dropped:
        parts.append(result.dropped.select(pl.col(key).cast(pl.String)))
    if pl.concat(parts).get_column(key).n_unique() != frame.height:
        raise StepError(f"step {step.name}: kept and dropped rows do not cover the input once")


def _by_reason(dropped: pl.DataFrame) -> dict[str, int]:
    if not dropped.height:
        return {}
    return dict(dropped.group_by("reason").len().sort("reason").iter_rows())
