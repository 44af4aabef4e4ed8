"""The step runner's second executor: the same steps on a Ray cluster.

`RayExecutor` (`lake.cluster.executor`, the entry point: `from lake.cluster import
RayExecutor`) implements `lake.steps.Executor`: `run_steps` hands it one step and the rows
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

The package, by what each module holds:

- `executor`: `RayExecutor` (connecting, running steps, tables in the object store, remote
  calls of plain functions: `remote`, `call`; objects built once and read by every task:
  `shared`, `worker_object`; the accounting on hash partitions of the keys);
- `blocks`: `Blocks` and `BlockResult`, a table and a step's result in the object store,
  and the conversions tasks use (`as_frame`, `block_outputs`, `conform`, `merge_stats`);
- `partitions`: columns exchanged between tasks as dicts of NumPy arrays cut by a
  partitioning (`split_columns`, `split_by_block`, `concat_columns`, `as_returns`);
- `shuffle`: shuffles of frames (`exchange`, `first_rows`) and value lookups by key
  (`lookup`);
- `components`: connected components by iterative min-label propagation
  (`connected_components`);
- `data_files`: blocks read from and written to the lake's Parquet files by tasks;
- `generation`: engines on Ray workers (`generation_backend`, `ClusterBackend`);
- `memory`: the driver's peak RSS during a stage (`PeakRss`).

Plans import the pieces they use. The package imports no operator (the lake floor does not
import curation); Ray itself is imported only when a cluster is used.

Shuffles are Ray tasks that pass Arrow/NumPy partitions through the object store: on the
2-core development machine Ray Data's hash shuffle (`groupby`, `join`) took 8-11 s per 1M
rows (it starts aggregator actors per shuffle), a task exchange of the same rows 0.1-0.2 s.
Generation uses Ray Data's actor pool (`map_batches` over a callable class with
`concurrency`): one engine per worker, loaded once, completions streamed back to the driver as
they finish (`lake.cluster.generation`).

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

from lake.cluster.blocks import ClusterError
from lake.cluster.executor import RayExecutor, TablePlan

__all__ = ["ClusterError", "RayExecutor", "TablePlan"]
