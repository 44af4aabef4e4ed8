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

Driver memory: beyond the input frame (which the `Executor` protocol hands over) and the
result frames, the driver holds only object references (O(blocks x partitions)), per-stage
counts, and whatever a plan gathers to assemble its result (for dedup: a label per row
in a cluster and a float per dropped row; never signatures, band keys or edge lists).
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

With today's `Executor` protocol `run_steps` reads the whole input into the driver and
commits the kept rows from there, which bounds a step by the driver's memory (the bench's 1M
prompts took 1.9-3.5 GiB of driver RSS per step, so 1B rows would need terabytes): past
~50M rows per step, the executor should read
the input version's Parquet files on the workers (`Lake.files`) and return the kept rows and
drops as `lake.storage.DataFiles` written by the workers, which `commit_many` registers in one
transaction (tests/test_lake_remote.py registers worker-written files this way).

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

from lake.catalog import Lake
from lake.steps import LocalExecutor, Step, StepResult

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
TablePlan = Callable[["RayExecutor", Step, pl.DataFrame], StepResult]


class ClusterError(RuntimeError):
    """The cluster cannot be reached or a distributed stage failed; the message says which."""


@dataclass(frozen=True)
class Block:
    """Rows `start .. start + rows - 1` of a frame, stored in the object store."""

    start: int
    rows: int
    ref: Any


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
        run = step.run
        if isinstance(run, functools.partial) and not run.args and run.func in self.plans:
            # an operator with some keywords bound: its plan, with those keywords as params
            step = dataclasses.replace(step, run=run.func, params={**run.keywords, **step.params})
        plan = self.plans.get(step.run)
        if plan is not None:
            self.connect()
            return plan(self, step, frame)
        if step.scope == "rows" and not _holds_lake(step.params) and frame.height:
            self.connect()
            return self.map_rows(step, frame)
        return LocalExecutor().run(step, frame)

    def map_rows(self, step: Step, frame: pl.DataFrame) -> StepResult:
        """A row-local step as a batch map: one task per block, results in block order."""
        import ray

        with self.stage(step.name, "map"):
            blocks = self.put_blocks(frame)
            params = ray.put(step.params)
            results = ray.get(
                [self.remote(_run_on_block).remote(step.run, params, b.ref) for b in blocks]
            )
        with self.stage(step.name, "gather"):
            kept = _concat_frames([r.kept for r in results])
            dropped = _concat_frames([r.dropped for r in results])
            stats = merge_stats([r.stats for r in results])
        return StepResult(kept=kept, dropped=dropped, stats=stats)

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

    def put_blocks(self, frame: pl.DataFrame, columns: Sequence[str] | None = None) -> list[Block]:
        """The frame (or some of its columns) in blocks of `block_rows` rows, as Arrow tables
        (Ray stores a slice of an Arrow table without the rest of its buffers; a task turns
        its block back into a frame with `as_frame`, without a copy)."""
        import ray

        table = (frame.select(columns) if columns is not None else frame).to_arrow()
        blocks = []
        for start in range(0, frame.height, self.block_rows):
            rows = min(self.block_rows, frame.height - start)
            blocks.append(Block(start, rows, ray.put(table.slice(start, rows))))
        return blocks or [Block(0, 0, ray.put(table.slice(0, 0)))]

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
    """A block (an Arrow table from `put_blocks`) as a Polars frame."""
    if isinstance(block, pl.DataFrame):
        return block
    return pl.from_arrow(block)  # type: ignore[return-value]


def _run_on_block(run: Callable[..., StepResult], params: dict, block: Any) -> StepResult:
    return run(as_frame(block), **params)


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


def _concat_frames(frames: Sequence[pl.DataFrame]) -> pl.DataFrame:
    """Blocks' frames in block order; blocks that dropped nothing may lack detail columns."""
    with_rows = [f for f in frames if f.height]
    if not with_rows:
        return frames[0]
    schema = with_rows[0].schema
    if all(f.schema == schema for f in with_rows):
        return pl.concat(with_rows, how="vertical")
    return pl.concat(with_rows, how="diagonal_relaxed")


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
