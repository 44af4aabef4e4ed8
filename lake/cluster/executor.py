"""`RayExecutor`: the step runner's second executor, the same steps on a Ray cluster.

It implements `lake.steps.Executor` (`run`, one step over rows the caller holds) and
`TableExecutor` (`run_all`, a whole step list over a lake version, read and written by the
workers); what runs where is in the package docstring (`lake.cluster`). Besides running
steps it holds what plans build on: tables put into and gathered from the object store
(`put_table`, `gather`, `put_result`, `collect`), remote calls of plain functions (`remote`,
`call`, `put`, `get`), objects built once and read by every task (`memo`, `shared`,
`worker_object`), an operator's parameters as it sees them (`operator_params`), the
accounting on hash partitions of the keys (`tally`, `check_step`), and a record per stage of
its wall time and the driver's peak RSS (`stage`, `stages`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import polars as pl
import pyarrow as pa

from lake.catalog import Lake, VersionInfo
from lake.cluster.blocks import (
    BlockMeta,
    BlockResult,
    Blocks,
    ClusterError,
    as_frame,
    block_outputs,
    conform,
    merge_stats,
    union_schema,
)
from lake.cluster.data_files import footer, read_block, rows_per_data_file, write_file
from lake.cluster.memory import PeakRss
from lake.cluster.partitions import as_returns, cut_frame, key_hash
from lake.steps import (
    KeyTally,
    LocalExecutor,
    RunIds,
    Step,
    StepError,
    StepResult,
    StepsWritten,
    check_counts,
    check_tally,
    count_reasons,
    drop_rows,
    drops_rows,
    key_column,
    step_funnel,
    tally_keys,
)
from lake.storage import DataFiles, DataStore
from schemas.dataset_manifest import FunnelStep

DEFAULT_BLOCK_ROWS = 50_000
FORWARDED_ENV = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "PGUSER",
    "PGPASSWORD",
    "PGHOST",
    "PGPORT",
    "PGDATABASE",
    "CASCADE_LAKE",
)
WORKER_ENV = {"POLARS_MAX_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
"""One task per CPU: Polars' own pool would fight the other tasks for the same cores."""

TablePlan = Callable[["RayExecutor", Step, "Blocks"], "BlockResult"]


@dataclass
class StageRecord:
    """One stage of a distributed step: its wall time and the driver's peak RSS during it."""

    step: str
    stage: str
    seconds: float
    driver_peak_rss: int


@dataclass
class RayExecutor:
    """Runs recipe steps on a Ray cluster (`address`: `host:port`, `auto`, or None to start
    a local one in this process); see `lake.cluster` for what runs where."""

    address: str | None = None
    plans: Mapping[Callable[..., StepResult], TablePlan] = field(default_factory=dict)
    block_rows: int = DEFAULT_BLOCK_ROWS
    partitions: int | None = None  # shuffle partitions (default: the cluster's CPUs)
    forward_env: Sequence[str] = FORWARDED_ENV
    num_cpus: int | None = None  # only when starting a local cluster
    measure_memory: bool = False
    stages: list[StageRecord] = field(default_factory=list)
    component_rounds: list[int] = field(default_factory=list)  # per connected_components call
    _connected: bool = field(default=False, repr=False)
    _started_ray: bool = field(default=False, repr=False)
    _cache: dict[Any, Any] = field(default_factory=dict, repr=False)

    # -- the cluster ----------------------------------------------------------------------

    def connect(self) -> None:
        """Join the cluster (once); workers get the forwarded environment."""
        if self._connected:
            return
        import ray

        env = {k: os.environ[k] for k in self.forward_env if os.environ.get(k)}
        for key, value in WORKER_ENV.items():
            env.setdefault(key, os.environ.get(key, value))
        if not ray.is_initialized():
            _check_reachable(self.address)
            options: dict[str, Any] = {
                "runtime_env": {"env_vars": env},
                "logging_level": "ERROR",
                "log_to_driver": False,
            }
            if self.address is None:
                options.update(num_cpus=self.num_cpus, include_dashboard=False)
            try:
                ray.init(address=self.address, **options)
            except (ConnectionError, RuntimeError, ValueError) as exc:
                where = self.address or "a local Ray instance"
                raise ClusterError(f"cannot connect to Ray at {where}: {exc}") from None
            self._started_ray = True
        import ray.data

        context = ray.data.DataContext.get_current()
        context.enable_progress_bars = False
        context.print_on_execution_start = False
        self._connected = True

    def close(self) -> None:
        """Leave the cluster (a local cluster started here stops)."""
        if self._started_ray:
            import ray

            ray.shutdown()
        self._connected = self._started_ray = False
        self._cache.clear()

    def __enter__(self) -> RayExecutor:
        self.connect()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def cluster_cpus(self) -> int:
        import ray

        self.connect()
        return max(1, int(ray.cluster_resources().get("CPU", 1)))

    @property
    def num_partitions(self) -> int:
        return self.partitions or self.cluster_cpus

    # -- running steps --------------------------------------------------------------------

    def run(self, step: Step, frame: pl.DataFrame) -> StepResult:
        """One step over rows the caller holds (the `Executor` protocol): the rows go to the
        object store in blocks, the step runs as in `run_blocks`, the result comes back."""
        step = self._planned(step)
        plan = self.plans.get(step.run)
        if plan is None and (step.scope != "rows" or _holds_lake(step.params) or not frame.height):
            return LocalExecutor().run(step, frame)
        self.connect()
        result = self.run_blocks(step, self.put_table(frame))
        with self.stage(step.name, "gather"):
            return StepResult(
                kept=self.gather(result.kept),
                dropped=self.gather(result.dropped),
                stats=result.stats,
            )

    def run_blocks(self, step: Step, table: Blocks) -> BlockResult:
        """One step over a table in the object store: its cluster plan, a batch map for a
        row-local step, else the step on the driver over the gathered rows."""
        step = self._planned(step)
        plan = self.plans.get(step.run)
        if plan is not None:
            self.connect()
            return plan(self, step, table)
        if step.scope == "rows" and not _holds_lake(step.params) and table.height:
            return self.map_blocks(step, table)
        return self.on_driver(step, table)

    def _planned(self, step: Step) -> Step:
        run = step.run
        if isinstance(run, functools.partial) and not run.args and run.func in self.plans:
            # an operator with some keywords bound: its plan, with those keywords as params
            step = dataclasses.replace(step, run=run.func, params={**run.keywords, **step.params})
        return step

    def map_blocks(self, step: Step, table: Blocks) -> BlockResult:
        """A row-local step as a batch map: one task per block, results in block order."""
        self.connect()
        with self.stage(step.name, "map"):
            params = self.put(step.params)
            outs = [self.call(_run_on_block, 3, step.run, params, ref) for ref in table.refs]
            return self.collect(outs)

    def on_driver(self, step: Step, table: Blocks) -> BlockResult:
        """A step that needs the whole table and has no plan, or holds the lake: the rows
        come to the driver, the step runs there, its result goes back to the object store."""
        with self.stage(step.name, "on the driver"):
            result = LocalExecutor().run(step, self.gather(table))
            return self.put_result(result)

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
    ) -> StepsWritten:
        """A whole step list over a lake version, for `run_steps` (`TableExecutor`): the
        workers read the version's Parquet files, every step runs on blocks
        (`run_blocks`), the accounting is checked on hash partitions of the keys, and the
        workers write the kept rows and every step's drops as data files cut as the lake's
        own writer cuts them. The driver holds counts, stats and object references (see
        "Driver memory" in `lake.cluster`'s docstring)."""
        self.connect()
        with self.stage("input", "read on the workers"):
            table = self.read_version(lake, source)
        key = key_column(table.columns)
        with self.stage("input", "keys unique"):
            tally = self.tally(table, key)
            check_tally(None, tally, where=source.ref, key=key)
        funnel: list[FunnelStep] = []
        drops: list[tuple[Blocks, list[str], str]] = []
        for step in steps:
            if step.skipped:  # nothing to run on the workers: every row passes
                entry = step_funnel(step, table.height, table.height, {}, 0.0, {})
                funnel.append(entry)
                if on_step:
                    on_step(entry)
                continue
            started = time.perf_counter()
            result = self.run_blocks(step, table)
            with self.stage(step.name, "accounting"):
                self.check_step(step, table, result, key)
            drops.append((result.dropped, table.columns, step.name))
            entry = step_funnel(
                step,
                table.height,
                result.kept.height,
                result.by_reason,
                time.perf_counter() - started,
                result.stats,
            )
            funnel.append(entry)
            if on_step:
                on_step(entry)
            table = result.kept
        store = lake.store
        rows_per_file = rows_per_data_file()
        with self.stage("output", "write on the workers"):
            segments = [(ref, rows, None) for ref, rows in zip(table.refs, table.rows, strict=True)]
            kept = self.write(store, out, kind, segments, table.schema, rows_per_file, writer)
            try:
                pieces = []
                for dropped, columns, name in drops:
                    how = ("drops", columns, name, dropped.schema, run)
                    pieces += [(r, n, how) for r, n in zip(dropped.refs, dropped.rows, strict=True)]
                empty = drop_rows(pl.DataFrame({key: []}), input_columns=[key], step="")
                schema = drops_rows(empty, run).schema
                written = self.write(store, "drops", "drops", pieces, schema, rows_per_file, writer)
            except BaseException:
                for f in kept.files:
                    store.remove(f)
                raise
        return StepsWritten(kept=kept, drops=written, funnel=funnel)

    # -- tables in the object store ---------------------------------------------------------

    def put_table(self, frame: pl.DataFrame) -> Blocks:
        """Rows held here, in blocks of `block_rows` rows (Ray stores a slice of an Arrow
        table without the rest of its buffers)."""
        self.connect()
        table = frame.to_arrow()
        refs, rows = [], []
        for start in range(0, frame.height, self.block_rows):
            count = min(self.block_rows, frame.height - start)
            refs.append(self.put(table.slice(start, count)))
            rows.append(count)
        return Blocks(refs, rows, frame.schema)

    def put_result(self, result: StepResult) -> BlockResult:
        return BlockResult(
            kept=self.put_table(result.kept),
            dropped=self.put_table(result.dropped),
            stats=dict(result.stats),
            by_reason=count_reasons(result.dropped),
        )

    def gather(self, table: Blocks) -> pl.DataFrame:
        """A table's rows on the driver (for steps that run there)."""
        frames = [as_frame(b) for b in self.get(list(table.refs))]
        return pl.concat(frames, how="vertical") if frames else table.empty()

    def read_version(
        self, lake: Lake, info: VersionInfo, columns: list[str] | None = None
    ) -> Blocks:
        """A lake version as blocks of `block_rows` rows (never across files), each read by
        a task from the version's Parquet files; the driver reads only their footers.

        A version whose files differ in schema (an append-mode table whose columns changed)
        or that has deletions made outside cascade is read by the lake on the driver."""
        from lake.catalog import LakeError

        store = lake.store
        try:
            files = [store.relative(f) for f in lake.files(info.ref)]
        except LakeError:
            files = []
        footers = [footer(store, f) for f in files]
        schemas = [s for _, s in footers]
        if not files or any(not s.equals(schemas[0]) for s in schemas[1:]):
            frame = pl.from_arrow(lake.read(info.ref, columns=columns))
            assert isinstance(frame, pl.DataFrame)
            return self.put_table(frame)
        schema = (
            schemas[0] if columns is None else pa.schema([schemas[0].field(c) for c in columns])
        )
        refs, rows = [], []
        for rel, (count, _) in zip(files, footers, strict=True):
            for offset in range(0, count, self.block_rows):
                size = min(self.block_rows, count - offset)
                refs.append(self.remote(read_block).remote(store, rel, offset, size, columns))
                rows.append(size)
        polars_schema = pl.from_arrow(schema.empty_table()).schema  # type: ignore[union-attr]
        return Blocks(refs, rows, polars_schema)

    def collect(
        self, outs: Sequence[Sequence[Any]], stats: dict[str, Any] | None = None
    ) -> BlockResult:
        """Tasks' (kept, dropped, `BlockMeta`) refs, one triple per block in row order, as a
        `BlockResult` (stats merged with `merge_stats` unless given)."""
        metas: list[BlockMeta] = self.get([o[2] for o in outs])
        kept = self.as_blocks(
            [o[0] for o in outs], [m.kept for m in metas], [m.kept_schema for m in metas]
        )
        dropped = self.as_blocks(
            [o[1] for o in outs], [m.dropped for m in metas], [m.dropped_schema for m in metas]
        )
        by_reason: dict[str, int] = {}
        for m in metas:
            for reason, count in m.by_reason.items():
                by_reason[reason] = by_reason.get(reason, 0) + count
        if stats is None:
            stats = merge_stats([m.stats for m in metas])
        return BlockResult(kept, dropped, stats, dict(sorted(by_reason.items())))

    def as_blocks(self, refs: list[Any], rows: list[int], schemas: list[pl.Schema]) -> Blocks:
        """Blocks from tasks' outputs: zero-row ones left out, all of one schema (the one
        `pl.concat(how="diagonal_relaxed")` gives, as the local executor's frame has)."""
        full = [i for i, n in enumerate(rows) if n]
        if not full:
            return Blocks([], [], schemas[0] if schemas else pl.Schema())
        schema = union_schema([schemas[i] for i in full])
        out = [
            refs[i] if schemas[i] == schema else self.remote(_conform_block).remote(refs[i], schema)
            for i in full
        ]
        return Blocks(out, [rows[i] for i in full], schema)

    def write(
        self,
        store: DataStore,
        name: str,
        kind: str,
        segments: Sequence[tuple[Any, int, Any]],
        schema: pl.Schema,
        rows_per_file: int,
        writer: str | None = None,
    ) -> DataFiles:
        """Rows held as segments (block ref, rows, how to turn them into the table's rows)
        written by tasks as Parquet files of `name` under the lake's data path, file `k`
        holding rows `k * rows_per_file ..` as the lake's own writer cuts them (so a file's
        bytes, and the version's content hash, are the local executor's). On failure the
        files written are removed."""
        total = sum(n for _, n, _ in segments)
        plan: list[list[tuple[int, int, int]]] = []  # per file: (segment, offset, rows)
        seg, offset = 0, 0
        for first in range(0, total, rows_per_file):
            want, pieces = min(rows_per_file, total - first), []
            while want:
                take = min(want, segments[seg][1] - offset)
                if take:
                    pieces.append((seg, offset, take))
                want -= take
                offset += take
                if offset == segments[seg][1]:
                    seg, offset = seg + 1, 0
            plan.append(pieces)
        tasks = []
        for pieces in plan:
            used = sorted({s for s, _, _ in pieces})
            local = {s: i for i, s in enumerate(used)}
            tasks.append(
                self.remote(write_file).remote(
                    store,
                    name,
                    kind,
                    rows_per_file,
                    writer,
                    [(local[s], o, n, segments[s][2]) for s, o, n in pieces],
                    *[segments[s][0] for s in used],
                )
            )
        parts, failure = [], None
        for task in tasks:
            try:
                parts.append(self.get(task))
            except Exception as exc:  # noqa: BLE001 - the first failure is raised below
                failure = failure or exc
        if failure is not None:
            for part in parts:
                for f in part.files:
                    store.remove(f)
            raise failure
        if parts:
            return DataFiles.merge(parts)
        return DataFiles((), (), 0, pl.DataFrame(schema=schema).to_arrow().schema)

    # -- the accounting, on hash partitions of the keys ------------------------------------

    def key_parts(self, table: Blocks, key: str, parents: bool = False) -> list[list[Any]]:
        """Per block, its keys (and for a fan-out output its `prompt_uid`s) cut into the
        shuffle partitions by hash (computed once per table)."""
        p = self.num_partitions
        cache = (key, parents, p)
        if cache not in table._key_parts:
            table._key_parts[cache] = [
                self.call(_key_parts, p, ref, key, parents, p) for ref in table.refs
            ]
        return table._key_parts[cache]

    def tally(
        self,
        inputs: Blocks | None,
        key: str,
        kept: Blocks | None = None,
        dropped: Blocks | None = None,
        fan_out: bool = False,
    ) -> KeyTally:
        """`lake.steps.tally_keys` summed over the hash partitions of the keys: inputs (for
        the input's uniqueness and a fan-out step's parents), kept and dropped rows."""
        p = self.num_partitions
        sources = [
            self.key_parts(inputs, key) if inputs is not None else [],
            self.key_parts(kept, key, parents=fan_out) if kept is not None else [],
            self.key_parts(dropped, key) if dropped is not None else [],
        ]
        counts = [len(s) for s in sources]
        tallies = self.get(
            [
                self.remote(_tally_partition).remote(
                    counts,
                    [inputs is not None, kept is not None, dropped is not None, fan_out],
                    *[parts[q] for source in sources for parts in source],
                )
                for q in range(p)
            ]
        )
        return sum(tallies, KeyTally())

    def check_step(self, step: Step, table: Blocks, result: BlockResult, key: str) -> None:
        """`run_steps`' accounting of one step, on the cluster: counts from the blocks, the
        key checks as reductions over hash partitions (`check_tally` raises `StepError`)."""
        check_counts(
            step, table.height, result.kept.height, result.dropped.height, result.kept.columns, key
        )
        if result.dropped.height and key not in result.dropped.columns:
            raise StepError(f"step {step.name}: dropped rows have no {key!r} column")
        tally = self.tally(
            table if step.fan_out else None,
            key,
            kept=result.kept,
            dropped=result.dropped,
            fan_out=step.fan_out,
        )
        check_tally(step, tally, rows_in=table.height, key=key)

    # -- building blocks for plans ----------------------------------------------------------

    def remote(self, fn: Callable[..., Any], **options: Any) -> Any:
        """`ray.remote(fn)` with options, cached per function and options."""
        import ray

        key = (fn, tuple(sorted(options.items())))
        if key not in self._cache:
            self._cache[key] = ray.remote(fn).options(**options) if options else ray.remote(fn)
        return self._cache[key]

    def call(self, fn: Callable[..., Any], returns: int, *args: Any) -> list[Any]:
        """Run `fn(*args)` as a task with `returns` return values; always a list of refs
        (ref arguments are resolved before `fn` runs)."""
        if returns == 1:
            return [self.remote(fn).remote(*args)]
        return list(self.remote(fn, num_returns=returns).remote(*args))

    def put(self, value: Any) -> Any:
        import ray

        return ray.put(value)

    def get(self, refs: Any) -> Any:
        import ray

        return ray.get(refs)

    def memo(self, key: Any, build: Callable[[], Any]) -> Any:
        """A value built once per key on the driver, for as long as the executor runs."""
        if ("memo", key) not in self._cache:
            self._cache[("memo", key)] = build()
        return self._cache[("memo", key)]

    def shared(self, key: Any, build: Callable[[], Any]) -> Any:
        """An object built once per key on the driver and kept in the object store (e.g. a
        benchmark n-gram index every scan task reads)."""
        return self.memo(("shared", key), lambda: self.put(build()))

    @contextlib.contextmanager
    def stage(self, step: str, stage: str) -> Iterator[None]:
        """Record a stage's wall time (and the driver's peak RSS if `measure_memory`)."""
        started = time.perf_counter()
        peak = PeakRss() if self.measure_memory else None
        try:
            yield
        finally:
            self.stages.append(
                StageRecord(step, stage, time.perf_counter() - started, peak.stop() if peak else 0)
            )


def _run_on_block(run: Callable[..., StepResult], params: dict, block: Any) -> tuple:
    return block_outputs(run(as_frame(block), **params))


def _conform_block(block: Any, schema: pl.Schema) -> Any:
    return conform(as_frame(block), schema).to_arrow()


def _key_parts(block: Any, key: str, parents: bool, parts: int) -> Any:
    """A block's keys (String) cut by hash; with `parents`, also its `prompt_uid`s."""
    frame = as_frame(block)
    keys = frame.get_column(key).cast(pl.String)
    cut = cut_frame(keys.to_frame("k"), key_hash(keys, parts), parts)
    if not parents:
        return as_returns([c.get_column("k") for c in cut])
    named = frame.get_column("prompt_uid").cast(pl.String).unique(maintain_order=True)
    cut_parents = cut_frame(named.to_frame("p"), key_hash(named, parts), parts)
    return as_returns(
        [(c.get_column("k"), q.get_column("p")) for c, q in zip(cut, cut_parents, strict=True)]
    )


def _tally_partition(counts: list[int], present: list[bool], *parts: Any) -> KeyTally:
    """One hash partition's `KeyTally` (parts: the inputs', kept and dropped blocks')."""
    n_in, n_kept, _ = counts
    has_in, has_kept, has_dropped, fan_out = present
    inputs, kept, dropped = parts[:n_in], parts[n_in : n_in + n_kept], parts[n_in + n_kept :]

    def stacked(series: Sequence[pl.Series]) -> pl.Series:
        return pl.concat(list(series)) if series else pl.Series([], dtype=pl.String)

    return tally_keys(
        inputs=stacked(inputs) if has_in else None,
        kept=stacked([k[0] for k in kept] if fan_out else kept) if has_kept else None,
        dropped=stacked(dropped) if has_dropped else None,
        parents=stacked([k[1] for k in kept]) if fan_out else None,
    )


_WORKER_OBJECTS: dict[str, Any] = {}


def worker_object(holder: list[Any]) -> Any:
    """An object shared through the object store (`RayExecutor.shared`), fetched once per
    worker process. The ref travels inside a list so that Ray passes the ref itself, not
    its value, and the worker keeps the value for later tasks."""
    import ray

    ref = holder[0]
    key = ref.hex()
    if key not in _WORKER_OBJECTS:
        _WORKER_OBJECTS.clear()  # one shared object at a time is enough
        _WORKER_OBJECTS[key] = ray.get(ref)
    return _WORKER_OBJECTS[key]


def operator_params(run: Callable[..., Any], params: Mapping[str, Any]) -> dict[str, Any]:
    """An operator's keyword defaults with a step's parameters over them (what the operator
    would see), for plans that need a parameter the step left at its default."""
    import inspect

    defaults = {
        name: p.default
        for name, p in inspect.signature(run).parameters.items()
        if p.default is not inspect.Parameter.empty
    }
    return {**defaults, **params}


def _check_reachable(address: str | None) -> None:
    """Fail in seconds, not minutes, when nothing listens at a cluster's `host:port`
    (`ray.init` retries an unreachable head for a long time)."""
    import socket

    if address is None or address == "auto" or "://" in address:
        return
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host or "127.0.0.1", int(port)), timeout=5):
            return
    except ValueError:
        raise ClusterError(f"--ray-address {address!r}: expected host:port") from None
    except OSError as exc:
        raise ClusterError(
            f"cannot connect to Ray at {address}: {exc.strerror or exc} (is `ray start --head` "
            "running there?)"
        ) from None


def _holds_lake(params: Mapping[str, Any]) -> bool:
    """A step that reads or writes the lake itself runs on the driver (its catalog may be a
    local file, and its commits must come from one process)."""
    return any(isinstance(v, Lake) for v in params.values())
