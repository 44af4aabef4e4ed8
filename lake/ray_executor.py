"""The step runner's second executor: the same steps on a Ray cluster.

`RayExecutor` implements `lake.steps.Executor`: `run_steps` hands it one step and the rows
the step starts from, and gets back the same `StepResult` the local executor would return
(the same kept and dropped rows in the same order, the same columns), so `run_steps` commits
the same output version, drops and content hash. How a step runs:

- a step with a cluster plan (`plans`, keyed by the operator function: near and exact dedup,
  decontamination, the sampling steps; `curation.cluster_plans.CLUSTER_PLANS`, each plan
  next to its operator in a `curation/*/on_cluster.py`) runs that plan;
- a row-local step (`scope="rows"`) runs as a batch map: the rows go to the object store in
  blocks of `block_rows`, one task per block runs the operator, and the blocks' kept and
  dropped rows are concatenated in block order (the local order);
- a step whose parameters hold the `Lake` (generation caches, difficulty measurements) or a
  table step without a plan runs on the driver, as the local executor would run it.

Plans are built from the pieces here: blocks of rows in the object store (`put_blocks`),
remote calls of plain functions (`remote`, `call`), columns exchanged between tasks as dicts
of NumPy arrays cut by a partitioning (`split_columns`, `split_by_block`, `concat_columns`,
`as_returns`), objects built once and read by every task (`shared`, `worker_object`),
connected components by iterative min-label propagation (`connected_components`) and value
lookups by key (`lookup`). This module imports no operator (the lake floor does not import
curation); Ray itself is imported only when a cluster is used.

Shuffles are Ray tasks that pass Arrow/NumPy partitions through the object store: on the
2-core development machine Ray Data's hash shuffle (`groupby`, `join`) took 8-11 s per 1M
rows (it starts aggregator actors per shuffle), a task exchange of the same rows 0.1-0.2 s.
Generation uses Ray Data's actor pool (`map_batches` over a callable class with
`concurrency`): one engine per worker, loaded once, completions streamed back to the driver as
they finish (`generation_backend`).

Driver memory: over a lake version (`run_all`) the driver holds no table; handed a frame
(`run`, one step), it holds that frame and the result frames. Beyond those it holds only
object references (O(blocks x partitions)), per-stage counts, and whatever a plan gathers
to assemble its result (for dedup: a label per row in a cluster and a float per dropped
row; never signatures, band keys or edge lists).
`stages` records each stage's wall time and the driver's peak RSS (bench/ray_executor.py).

Workers need the cascade package installed (same version as the driver). Credentials for a
shared lake (`AWS_*`, `PG*`) are forwarded from the driver's environment to the workers
(`forward_env`).

Scale-out
---------

Two commands run a recipe on a cluster (every node has cascade installed and can reach the
lake: `lake.json` with a PostgreSQL catalog and an s3:// data path, keys in the environment)::

    ray start --head --port 6379        # then `ray start --address HEAD:6379` on each node
    cascade build dataset math_rl_v2 --source ... --executor ray --ray-address HEAD:6379

Settings a user changes: `block_rows` (rows per map task, default 50K; 0.5-1M at 1B rows so
that blocks x partitions stays under ~1M objects), `partitions` (shuffle partitions, default
the cluster's CPUs), the object store and its spill directory (`ray start
--object-store-memory`, `--temp-dir` on a local NVMe disk), and for generation the engines'
`gpus_per_worker` (the teacher's tensor-parallel size) and `batch_size` (requests per call,
64-256 keeps vLLM's continuous batching full). `cli.executors.executor_from_options` reads
them from `CASCADE_RAY_BLOCK_ROWS`, `CASCADE_RAY_PARTITIONS` until the commands grow flags.

A 1B-row near dedup on N nodes (C CPUs in all; figures for 112 permutations, 16 bands x 7
rows, ~250-byte prompts):

- map (one task per block of 1M rows, C at a time): normalize, signatures (1M x 112 x 2 B =
  224 MB per block, 224 GB in all, kept in the object stores and spilled to disk where they
  do not fit: 224/N GB per node), band keys. Each row emits 16 `same` keys and 16 `link`
  keys of 18 B (key, row, band): 576 B per row, 576 GB shuffled in all, ~576/N GB in and out
  of each node, one partition (576/C GB, ~0.5 GB at C = 1024) per reduce task;
- reduce per (band, key) partition: star edges per bucket (each row to the bucket's first
  row), as the local operator forms them. Pairs go to the block of their first row:
  ~1 candidate pair per row on heavily duplicated data (1.24M for 1M rows in
  bench/dedup.py's corpus), 8 B each;
- verification: the first end's block attaches its signature (224 B) and sends the pair to
  the second end's block, which compares: ~230 GB moved for 1B pairs; verified edges keep
  ~25 B each;
- components: min-label propagation over the verified edges, partitioned by vertex; each
  round moves only the labels that fell (16 B per edge end), rounds ~ the graph's diameter
  (12 on bench/ray_executor.py's 1M-row corpus; pointer jumping would cut that to ~log);
- attachment of answerless rows and the representatives: lookups and a shuffle on the
  cluster label over the rows in clusters only;
- each worker holds one block (the text column of 1M rows, ~250 MB, plus its signatures)
  or one partition at a time; the driver holds object references (blocks x partitions)
  and per-partition counts, then the cluster labels and similarities of the dropped rows
  (12 B per clustered row) to assemble the result.

`run_steps` over a lake version hands the whole step list to `run_all`: the workers read the
version's Parquet files, run every step, check the accounting on hash partitions of the
keys, and write the kept rows and the drops as data files cut as the lake's own writer cuts
them; the driver then registers those files in one transaction (`commit_many`). The table
never passes through the driver, except for a step that runs there (one holding the lake:
generation, difficulty measurements and joins, `disjoint_from`), which gathers the rows it
starts from. Rows read from source files (`Rows`) are still read on the driver first.
Measured on 1M rows (bench/ray_executor.py --whole): the driver's RSS did not grow during
the run (the local executor's grew by 1.9 GiB), and the hashes were equal.

A 10M-response generation job on N nodes with G GPUs each (say 1.25M prompts x k=8): one
Ray Data actor per engine (N x G / tensor-parallel size engines), each loading the teacher
once and serving batches of requests; the driver plans the jobs, skips those whose
fingerprint already has a row in the generations table, streams completions back as they
finish and commits them every `chunk_size` samples (e.g. 20K: 500 commits, each one Parquet
file on S3 and one short catalog transaction). Nothing is shuffled; what moves is the
completions: ~30 KB per 8K-token response, ~300 GB to the driver and on to S3 over the
whole job (minutes at 1 GB/s, against days of decoding). Each worker holds its model, its KV
cache and the batch in flight; the driver holds the job plan (measured: 410 B per planned sample of MATH prompts with
k=8, so ~5 GB for 10M; split the prompts into runs to stay under it) and one uncommitted
chunk. A
killed driver loses at most that chunk; re-running the same command generates only what
is missing.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa

from lake.catalog import Lake, VersionInfo
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
from lake.storage import DataFiles, DataStore, write_data_files
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

Columns = dict[str, np.ndarray]
TablePlan = Callable[["RayExecutor", Step, "Blocks"], "BlockResult"]


class ClusterError(RuntimeError):
    """The cluster cannot be reached or a distributed stage failed; the message says which."""


@dataclass
class Blocks:
    """A table held in the object store: Arrow tables in row order (`refs`), the rows of
    each, and the table's schema. Row `i` of the table is row `i - starts[b]` of the block
    `b` that holds it; zero-row blocks are left out."""

    refs: list[Any]
    rows: list[int]
    schema: pl.Schema
    _key_parts: dict[tuple[str, bool, int], list[list[Any]]] = field(
        default_factory=dict, repr=False
    )

    @property
    def height(self) -> int:
        return int(sum(self.rows))

    @property
    def columns(self) -> list[str]:
        return list(self.schema)

    @property
    def starts(self) -> np.ndarray:
        """Every block's first row, then the row count."""
        return np.concatenate([[0], np.cumsum(self.rows, dtype=np.int64)]).astype(np.int64)

    def empty(self) -> pl.DataFrame:
        return pl.DataFrame(schema=self.schema)

    def __add__(self, other: Blocks) -> Blocks:
        """The rows of both, these first (the schemas must be the same)."""
        if other.schema != self.schema:
            raise ClusterError(f"cannot stack blocks of {self.schema} and {other.schema}")
        return Blocks([*self.refs, *other.refs], [*self.rows, *other.rows], self.schema)


@dataclass
class BlockResult:
    """A step's result on the cluster: the kept and dropped rows as blocks, drop counts by
    reason, and the step's stats (what `StepResult` holds, without the rows on the driver)."""

    kept: Blocks
    dropped: Blocks
    stats: dict[str, Any]
    by_reason: dict[str, int]


@dataclass
class BlockMeta:
    """What a task that produced one block's kept and dropped rows tells the driver."""

    kept: int
    dropped: int
    kept_schema: pl.Schema
    dropped_schema: pl.Schema
    by_reason: dict[str, int]
    stats: dict[str, Any]


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
    a local one in this process); see the module docstring for what runs where."""

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
        "Driver memory" in the module docstring)."""
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
        rows_per_file = _rows_per_file()
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
        footers = [_footer(store, f) for f in files]
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
                refs.append(self.remote(_read_block).remote(store, rel, offset, size, columns))
                rows.append(size)
        polars_schema = pl.from_arrow(schema.empty_table()).schema  # type: ignore[union-attr]
        return Blocks(refs, rows, polars_schema)

    def collect(
        self, outs: Sequence[Sequence[Any]], stats: dict[str, Any] | None = None
    ) -> BlockResult:
        """Tasks' (kept, dropped, `BlockMeta`) refs, one triple per block in row order, as a
        `BlockResult` (stats merged with `merge_stats` unless given)."""
        metas: list[BlockMeta] = self.get([o[2] for o in outs])
        kept = self._blocks(
            [o[0] for o in outs], [m.kept for m in metas], [m.kept_schema for m in metas]
        )
        dropped = self._blocks(
            [o[1] for o in outs], [m.dropped for m in metas], [m.dropped_schema for m in metas]
        )
        by_reason: dict[str, int] = {}
        for m in metas:
            for reason, count in m.by_reason.items():
                by_reason[reason] = by_reason.get(reason, 0) + count
        if stats is None:
            stats = merge_stats([m.stats for m in metas])
        return BlockResult(kept, dropped, stats, dict(sorted(by_reason.items())))

    def _blocks(self, refs: list[Any], rows: list[int], schemas: list[pl.Schema]) -> Blocks:
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
                self.remote(_write_file).remote(
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

    def map_frames(self, table: Blocks, fn: Callable[..., pl.DataFrame], *args: Any) -> Blocks:
        """`fn(frame, start, *args)` on every block (a new table of the frames it returns,
        in block order; `start` is the block's first row in the table)."""
        starts = table.starts
        outs = [
            self.call(_map_frame, 2, fn, ref, int(starts[b]), *args)
            for b, ref in enumerate(table.refs)
        ]
        metas = self.get([o[1] for o in outs])
        return self._blocks([o[0] for o in outs], [m[0] for m in metas], [m[1] for m in metas])

    def exchange(
        self,
        sources: Sequence[Sequence[Any]],
        by: Sequence[Sequence[str]],
        reduce: Callable[..., Any],
        *args: Any,
        returns: int = 1,
    ) -> list[list[Any]]:
        """A shuffle of frames: every source (refs of frames) is cut on its `by` columns'
        hash into the shuffle partitions, and `reduce(*frames, *args)` runs once per
        partition with each source's rows of it (rows of one key meet in one partition).
        Returns, per partition, `returns` refs of what `reduce` returned (frames travel as
        Arrow tables; `as_frame` reads them back)."""
        p = self.num_partitions
        cut = [
            [self.call(_hash_cut, p, ref, list(cols), p) for ref in refs]
            for refs, cols in zip(sources, by, strict=True)
        ]
        counts = [len(c) for c in cut]
        return [
            self.call(
                _reduce_partition,
                returns,
                reduce,
                counts,
                returns,
                args,
                *[c[q] for src in cut for c in src],
            )
            for q in range(p)
        ]

    def first_rows(self, table: Blocks, column: str) -> Blocks:
        """The rows whose `column` value is its first occurrence in the table, in order
        (`unique(column, keep="first", maintain_order=True)`): a shuffle on the value."""
        if not table.height:
            return table
        starts = table.starts
        indexed = self.map_frames(table, _with_row_and, [column])
        firsts = self.exchange([indexed.refs], [[column]], _first_row_of)
        nb = len(table.refs)
        routed = [self.call(_cut_rows_by_block, nb, f[0], starts) for f in firsts]
        outs = [
            self.call(_take_rows, 2, ref, int(starts[b]), *[r[b] for r in routed])
            for b, ref in enumerate(table.refs)
        ]
        metas = self.get([o[1] for o in outs])
        return self._blocks([o[0] for o in outs], [m[0] for m in metas], [m[1] for m in metas])

    @contextlib.contextmanager
    def stage(self, step: str, stage: str) -> Iterator[None]:
        """Record a stage's wall time (and the driver's peak RSS if `measure_memory`)."""
        started = time.perf_counter()
        peak = _PeakRss() if self.measure_memory else None
        try:
            yield
        finally:
            self.stages.append(
                StageRecord(step, stage, time.perf_counter() - started, peak.stop() if peak else 0)
            )

    def connected_components(self, edges: Sequence[Any], partitions: int) -> list[Any]:
        """Connected components of an edge list, by iterative min-label propagation.

        `edges`: refs of column dicts with `a` and `b` (int64 vertex ids), partitioned in any
        way. Returns one ref per vertex partition (`vertex % partitions`) of a column dict
        `vertex` (sorted) / `label`: every vertex that has an edge, labelled with the smallest
        vertex of its component (the labels `curation.dedup` computes locally). Each round,
        vertices whose label fell send it to their neighbours; rounds stop when no label
        changes (about the graph's diameter). The driver holds only refs and one count per
        partition per round.
        """
        import ray

        p = max(1, partitions)
        routed = [self.call(_route_edges, p, part, p) for part in edges]
        states = []
        messages: list[list[Any]] = []
        for q in range(p):
            out = self.call(_init_labels, 2 + p, p, *[r[q] for r in routed])
            states.append(out[0])
            messages.append(out[2:])
        rounds = 0
        while True:
            rounds += 1
            results = [
                self.call(_propagate_labels, 2 + p, states[q], p, *[m[q] for m in messages])
                for q in range(p)
            ]
            changed = sum(ray.get([r[1] for r in results]))
            states = [r[0] for r in results]
            messages = [r[2:] for r in results]
            if changed == 0:
                break
        self.component_rounds.append(rounds)
        return [self.remote(_labels_of_state).remote(s) for s in states]

    def lookup(
        self,
        queries: Sequence[Any],
        key: str,
        table: Sequence[Any],
        table_key: str,
        values: Mapping[str, tuple[str, Any]],
    ) -> list[Any]:
        """Add columns to `queries` (refs of column dicts) by looking `key` up in `table`
        (refs of column dicts partitioned by `table_key % len(table)`, sorted by it).

        `values` maps each new column to (table column, default for keys not found). Returns
        one ref per table partition of the queries routed there, with the new columns.
        """
        p = len(table)
        routed = [self.call(_route_by_modulo, p, q, key, p) for q in queries]
        return [
            self.remote(_lookup_partition).remote(
                table[t], key, table_key, dict(values), *[r[t] for r in routed]
            )
            for t in range(p)
        ]

    # -- generation -------------------------------------------------------------------------

    def generation_backend(
        self,
        engine_factory: Callable[[str], Any],
        *,
        name: str,
        workers: int | None = None,
        batch_size: int = 16,
        gpus_per_worker: float = 0.0,
        cpus_per_worker: float = 1.0,
    ) -> Callable[[str], Any]:
        """A backend factory (`model -> backend`) whose backends generate on the cluster.

        Each of `workers` Ray Data actors builds one engine with `engine_factory(model)` (a
        picklable callable, e.g. `functools.partial(make_backend, "vllm", **options)`) and
        serves batches of requests; completions stream back to the driver as they finish, so
        the caller (`generate_to_lake`) commits them in chunks and its fingerprint cache and
        kill-resume work as they do locally.
        """
        self.connect()
        count = workers or max(1, int(self.cluster_cpus // max(cpus_per_worker, 1e-9)))
        if gpus_per_worker:
            import ray

            gpus = int(ray.cluster_resources().get("GPU", 0) // gpus_per_worker)
            count = min(count, gpus) if workers is None else count

        def factory(model: str) -> ClusterBackend:
            return ClusterBackend(
                name=name,
                model=model,
                engine_factory=engine_factory,
                workers=count,
                batch_size=batch_size,
                gpus_per_worker=gpus_per_worker,
                cpus_per_worker=cpus_per_worker,
            )

        return factory


@dataclass
class ClusterBackend:
    """A generation backend whose engines run on Ray workers (see `generation_backend`)."""

    name: str
    model: str
    engine_factory: Callable[[str], Any]
    workers: int
    batch_size: int
    gpus_per_worker: float = 0.0
    cpus_per_worker: float = 1.0

    def generate(self, requests: Sequence[Any]) -> Iterator[Any]:
        """Completions in the order they finish (requests are sharded over the workers)."""
        import pickle

        import ray.data

        if not requests:
            return
        items = [{"request": pickle.dumps(r)} for r in requests]
        batch = max(1, min(self.batch_size, -(-len(items) // self.workers)))
        dataset = ray.data.from_items(items, override_num_blocks=max(1, -(-len(items) // batch)))
        completions = dataset.map_batches(
            _EngineWorker,
            fn_constructor_kwargs={"engine_factory": self.engine_factory, "model": self.model},
            batch_size=batch,
            concurrency=min(self.workers, max(1, -(-len(items) // batch))),
            num_cpus=self.cpus_per_worker,
            num_gpus=self.gpus_per_worker or None,
            batch_format="pyarrow",
        )
        for row in completions.iter_rows():
            yield pickle.loads(row["completion"])

    def close(self) -> None:
        """The engines live in the actors of one `generate` call; nothing is held here."""


class _EngineWorker:
    """A Ray Data actor holding one engine for its life (a model loads once per worker)."""

    def __init__(self, engine_factory: Callable[[str], Any], model: str) -> None:
        self.engine = engine_factory(model)

    def __call__(self, batch: Any) -> Any:
        import pickle

        import pyarrow as pa

        requests = [pickle.loads(r) for r in batch.column("request").to_pylist()]
        done = [pickle.dumps(c) for c in self.engine.generate(requests)]
        return pa.table({"completion": pa.array(done, type=pa.binary())})

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.engine.close()


# -- what tasks run ----------------------------------------------------------------------------


def as_frame(block: Any) -> pl.DataFrame:
    """A block (an Arrow table from `put_table`, `read_version` or a task) as a Polars frame."""
    if isinstance(block, pl.DataFrame):
        return block
    return pl.from_arrow(block)  # type: ignore[return-value]


def portable(value: Any) -> Any:
    """What a task returns, with Polars frames as Arrow tables (Ray stores Arrow buffers as
    they are; pickling a Polars frame copies it)."""
    if isinstance(value, pl.DataFrame):
        return value.to_arrow()
    if isinstance(value, tuple):
        return tuple(portable(v) for v in value)
    return value


def block_outputs(result: StepResult, stats: dict[str, Any] | None = None) -> tuple:
    """One block's kept rows, dropped rows and `BlockMeta`, as a task's three returns."""
    meta = BlockMeta(
        kept=result.kept.height,
        dropped=result.dropped.height,
        kept_schema=result.kept.schema,
        dropped_schema=result.dropped.schema,
        by_reason=count_reasons(result.dropped),
        stats=dict(result.stats if stats is None else stats),
    )
    return result.kept.to_arrow(), result.dropped.to_arrow(), meta


def union_schema(schemas: Sequence[pl.Schema]) -> pl.Schema:
    """The schema `pl.concat(how="diagonal_relaxed")` gives frames of these schemas."""
    if all(s == schemas[0] for s in schemas[1:]):
        return schemas[0]
    return pl.concat([pl.DataFrame(schema=s) for s in schemas], how="diagonal_relaxed").schema


def conform(frame: pl.DataFrame, schema: pl.Schema) -> pl.DataFrame:
    """A frame in `schema` (missing columns null, types widened), as a diagonal concat
    of frames of both schemas would have it."""
    if frame.schema == schema:
        return frame
    return pl.concat([pl.DataFrame(schema=schema), frame], how="diagonal_relaxed").select(
        list(schema)
    )


def _run_on_block(run: Callable[..., StepResult], params: dict, block: Any) -> tuple:
    return block_outputs(run(as_frame(block), **params))


def _conform_block(block: Any, schema: pl.Schema) -> Any:
    return conform(as_frame(block), schema).to_arrow()


def _map_frame(fn: Callable[..., pl.DataFrame], block: Any, start: int, *args: Any) -> tuple:
    frame = fn(as_frame(block), start, *args)
    return frame.to_arrow(), (frame.height, frame.schema)


def _footer(store: DataStore, relative: str) -> tuple[int, pa.Schema]:
    import pyarrow.parquet as pq

    with pq.ParquetFile(store.fs_path(relative), filesystem=store.filesystem) as f:
        return f.metadata.num_rows, f.schema_arrow.remove_metadata()


def _read_block(
    store: DataStore, relative: str, offset: int, rows: int, columns: list[str] | None
) -> Any:
    """Rows `offset .. offset + rows - 1` of a data file (only the row groups holding them
    are decoded)."""
    import pyarrow.parquet as pq

    with pq.ParquetFile(store.fs_path(relative), filesystem=store.filesystem) as f:
        meta = f.metadata
        groups, first, seen = [], None, 0
        for g in range(meta.num_row_groups):
            size = meta.row_group(g).num_rows
            if seen + size > offset and seen < offset + rows:
                groups.append(g)
                first = seen if first is None else first
            seen += size
        table = f.read_row_groups(groups, columns=columns)
    assert first is not None
    return table.slice(offset - first, rows).replace_schema_metadata(None)


def _write_file(
    store: DataStore,
    name: str,
    kind: str,
    rows_per_file: int,
    writer: str | None,
    pieces: list[tuple[int, int, int, Any]],
    *blocks: Any,
) -> DataFiles:
    """One data file of `name` from slices of blocks (`pieces`: block, offset, rows, and
    how the rows become the table's: None for kept rows as they are, or a step's drops)."""
    frames = []
    for b, offset, rows, how in pieces:
        frame = as_frame(blocks[b]).slice(offset, rows)
        if how is not None:
            _, input_columns, step, schema, run = how
            step_drops = drop_rows(conform(frame, schema), input_columns=input_columns, step=step)
            frame = drops_rows(step_drops, run)
        frames.append(frame)
    table = pl.concat(frames, how="vertical")
    return write_data_files(
        store, name, table, kind=kind, rows_per_file=rows_per_file, writer=writer
    )


def _key_hash(keys: pl.Series, parts: int) -> np.ndarray:
    return (keys.hash(seed=0) % parts).to_numpy().astype(np.int64)


def cut_frame(frame: pl.DataFrame, part: np.ndarray, count: int) -> list[pl.DataFrame]:
    """A frame cut into `count` pieces by partition id (order kept within each)."""
    if count <= 1:
        return [frame]
    order = np.argsort(part, kind="stable")
    bounds = np.searchsorted(part[order], np.arange(count + 1))
    ordered = frame[order] if frame.height else frame
    return [ordered.slice(int(bounds[k]), int(bounds[k + 1] - bounds[k])) for k in range(count)]


def _key_parts(block: Any, key: str, parents: bool, parts: int) -> Any:
    """A block's keys (String) cut by hash; with `parents`, also its `prompt_uid`s."""
    frame = as_frame(block)
    keys = frame.get_column(key).cast(pl.String)
    cut = cut_frame(keys.to_frame("k"), _key_hash(keys, parts), parts)
    if not parents:
        return as_returns([c.get_column("k") for c in cut])
    named = frame.get_column("prompt_uid").cast(pl.String).unique(maintain_order=True)
    cut_parents = cut_frame(named.to_frame("p"), _key_hash(named, parts), parts)
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


def _hash_cut(block: Any, columns: list[str], parts: int) -> Any:
    frame = as_frame(block)
    if parts <= 1:
        return frame.to_arrow()
    part = (frame.select(columns).hash_rows(seed=0) % parts).to_numpy().astype(np.int64)
    return as_returns([c.to_arrow() for c in cut_frame(frame, part, parts)])


def _reduce_partition(
    reduce: Callable[..., Any], counts: list[int], returns: int, args: tuple, *parts: Any
) -> Any:
    frames, at = [], 0
    for count in counts:
        got = [as_frame(p) for p in parts[at : at + count]]
        at += count
        full = [f for f in got if f.height]
        if not got:
            frames.append(pl.DataFrame())
        elif len(full) > 1:
            frames.append(pl.concat(full, how="vertical_relaxed"))
        else:
            frames.append(full[0] if full else got[0])
    out = portable(reduce(*frames, *args))
    return out if returns == 1 else tuple(out)


def _with_row_and(frame: pl.DataFrame, start: int, columns: list[str]) -> pl.DataFrame:
    return frame.select(columns).with_columns(
        pl.int_range(start, start + frame.height, dtype=pl.Int64).alias("_row")
    )


def _first_row_of(frame: pl.DataFrame) -> pl.DataFrame:
    if not frame.height:
        return pl.DataFrame({"_row": pl.Series([], dtype=pl.Int64)})
    value = [c for c in frame.columns if c != "_row"]
    return frame.group_by(value).agg(pl.col("_row").min()).select("_row")


def _cut_rows_by_block(frame: Any, starts: np.ndarray) -> Any:
    """Row numbers (a frame's `_row`) cut by the block that holds each, as NumPy arrays."""
    rows = as_frame(frame).get_column("_row").to_numpy()
    count = starts.size - 1
    which = np.searchsorted(starts, rows, side="right") - 1
    return as_returns([p["row"] for p in split_columns({"row": rows}, which, count)])


def _take_rows(block: Any, start: int, *rows: np.ndarray) -> tuple:
    wanted = np.sort(np.concatenate(rows)) - start if rows else np.empty(0, np.int64)
    frame = as_frame(block)[wanted]
    return frame.to_arrow(), (frame.height, frame.schema)


def split_columns(columns: Columns, part: np.ndarray, count: int) -> list[Columns]:
    """Cut equal-length columns into `count` pieces by partition id (order kept within each)."""
    if count <= 1:
        return [columns]
    small = part.astype(np.uint16) if count <= 1 << 16 else part
    order = np.argsort(small, kind="stable")  # a radix sort for 16-bit ids
    bounds = np.searchsorted(small[order], np.arange(count + 1))
    return [
        {name: values[order[bounds[k] : bounds[k + 1]]] for name, values in columns.items()}
        for k in range(count)
    ]


def concat_columns(parts: Sequence[Columns]) -> Columns:
    """Column dicts of one schema, stacked."""
    parts = list(parts)
    if not parts:
        return {}
    return {name: np.concatenate([p[name] for p in parts]) for name in parts[0]}


def split_by_block(columns: Columns, rows: np.ndarray, starts: np.ndarray) -> list[Columns]:
    """Cut columns by the block that holds each of `rows` (`starts`: every block's first row,
    then the row count), e.g. to send pairs to the block where a row's signature lives."""
    which = np.searchsorted(starts, rows, side="right") - 1
    return split_columns(columns, which, starts.size - 1)


def as_returns(parts: Sequence[Any]) -> Any:
    """Pieces as a task's return value: a tuple for `num_returns=len(parts)` > 1, else the
    one piece (Ray wants a plain value for a single return)."""
    return tuple(parts) if len(parts) > 1 else parts[0]


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


def _route_by_modulo(columns: Columns, key: str, count: int) -> Any:
    return as_returns(split_columns(columns, (columns[key] % count).astype(np.int64), count))


def _route_edges(columns: Columns, count: int) -> Any:
    """Both directions of each edge, cut by the source vertex's partition."""
    src = np.concatenate([columns["a"], columns["b"]]).astype(np.int64)
    dst = np.concatenate([columns["b"], columns["a"]]).astype(np.int64)
    return as_returns(split_columns({"src": src, "dst": dst}, src % count, count))


def _init_labels(count: int, *incoming: Columns) -> tuple:
    """A vertex partition's state (its edges sorted by source, its vertices' labels) and the
    first messages: every vertex's own id to each neighbour."""
    edges = concat_columns(incoming) or {"src": np.empty(0, np.int64), "dst": np.empty(0, np.int64)}
    order = np.lexsort((edges["dst"], edges["src"]))
    src, dst = edges["src"][order], edges["dst"][order]
    vertices = np.unique(src)
    state = {"src": src, "dst": dst, "vertex": vertices, "label": vertices.copy()}
    messages = split_columns({"vertex": dst, "label": src.copy()}, dst % count, count)
    return (state, len(vertices), *messages)


def _propagate_labels(state: Columns, count: int, *incoming: Columns) -> tuple:
    """One round: take the smallest label offered to each vertex; vertices whose label fell
    offer it to their neighbours."""
    got = concat_columns(incoming)
    vertex, label = state["vertex"], state["label"].copy()
    changed = np.zeros(vertex.size, dtype=np.bool_)
    if got and got["vertex"].size:
        at = np.searchsorted(vertex, got["vertex"])
        best = np.full(vertex.size, np.iinfo(np.int64).max, dtype=np.int64)
        np.minimum.at(best, at, got["label"])
        changed = best < label
        label[changed] = best[changed]
    state = {**state, "label": label}
    moved = vertex[changed]
    src, dst = state["src"], state["dst"]
    lo = np.searchsorted(src, moved, side="left")
    hi = np.searchsorted(src, moved, side="right")
    take = _expand(lo, hi - lo)
    new_labels = np.repeat(label[changed], hi - lo)
    messages = split_columns({"vertex": dst[take], "label": new_labels}, dst[take] % count, count)
    return (state, int(changed.sum()), *messages)


def _labels_of_state(state: Columns) -> Columns:
    return {"vertex": state["vertex"], "label": state["label"]}


def _lookup_partition(
    table: Columns, key: str, table_key: str, values: dict[str, tuple[str, Any]], *queries: Columns
) -> Columns:
    found = concat_columns(queries)
    if not found:
        return found
    at, hit = sorted_positions(table[table_key], found[key])
    for name, (column, default) in values.items():
        source = table[column]
        out = np.full(found[key].size, default, dtype=source.dtype)
        out[hit] = source[at[hit]]
        found[name] = out
    return found


def sorted_positions(keys: np.ndarray, wanted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each wanted value, its index in the sorted `keys` and whether it is there."""
    if keys.size == 0:
        return np.zeros(wanted.size, dtype=np.int64), np.zeros(wanted.size, dtype=np.bool_)
    at = np.minimum(np.searchsorted(keys, wanted), keys.size - 1)
    return at, keys[at] == wanted


def _expand(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """starts[i] .. starts[i] + counts[i] - 1, concatenated."""
    total = int(counts.sum())
    if total == 0:
        return np.empty(0, dtype=np.int64)
    ends = np.cumsum(counts)
    return np.repeat(starts - ends + counts, counts) + np.arange(total, dtype=np.int64)


# -- results -----------------------------------------------------------------------------------


def merge_stats(parts: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Blocks' stats as one: numbers add up, dicts merge key by key, equal values stay, and
    values that differ between blocks become the list of them."""
    merged: dict[str, Any] = {}
    for key in dict.fromkeys(k for part in parts for k in part):  # first-seen order
        values = [p[key] for p in parts if key in p]
        if all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
            merged[key] = sum(values)
        elif all(isinstance(v, Mapping) for v in values):
            merged[key] = merge_stats(values)
        elif all(v == values[0] for v in values):
            merged[key] = values[0]
        else:
            merged[key] = values
    return merged


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


class _PeakRss:
    """The peak resident memory of this process while it runs, sampled every 20 ms."""

    def __init__(self) -> None:
        import psutil

        self.process = psutil.Process()
        self.peak = self.process.memory_info().rss
        self.running = True
        self.thread = threading.Thread(target=self._sample, daemon=True)
        self.thread.start()

    def _sample(self) -> None:
        while self.running:
            self.peak = max(self.peak, self.process.memory_info().rss)
            time.sleep(0.02)

    def stop(self) -> int:
        self.running = False
        self.thread.join()
        return max(self.peak, self.process.memory_info().rss)


def _rows_per_file() -> int:
    """The rows per data file the lake's own commits write (read when a run writes)."""
    from lake import catalog

    return catalog.ROWS_PER_FILE
