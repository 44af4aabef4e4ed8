"""The Ray executor gives the local executor's results, on a real multi-process Ray cluster.

A cluster is started with `ray start --head` on 127.0.0.1 (tests/test_ray_servers.py) and
the same steps run twice, through `run_steps`, with the local executor and with the Ray one:
the kept rows, every drop (uid, step, reason, detail), the funnel and the output content hash
must be the same. On the demo corpus (the whole math_rl_v2 build) and on a 200K-row corpus
made from the shared sources with planted duplicates, answerless copies, template siblings
and benchmark copies; then with Ray workers killed in the middle of a step; then generation
(one engine per worker) killed and resumed from the lake's cache; then code verification in
the sandboxes of the workers.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import polars as pl
import psutil
import pytest
from test_ray_servers import (  # type: ignore[import-not-found]
    RayCluster,
    needs_ray,
    ray_cluster,
    ship_test_module,
)

from builders import math_rl_v2
from builders.runner import build_dataset
from cli.executors import executor_from_options
from curation.cluster_plans import CLUSTER_PLANS
from curation.decontaminate import BenchmarkIndex, decontaminate
from curation.decontaminate.benchmarks import load_benchmarks
from curation.decontaminate.scan import decontamination_scope
from curation.dedup import exact_dedup, near_dedup
from lake.catalog import Lake
from lake.cluster import RayExecutor
from lake.steps import LocalExecutor, Step, StepResult, run_steps

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"
pytestmark = [needs_ray, pytest.mark.slow]


SECRET = "cascade-ray-worker-secret-0451"


@pytest.fixture(scope="module")
def cluster():
    with ray_cluster(num_cpus=2, env={"CASCADE_SANDBOX_TEST_SECRET": SECRET}) as running:
        yield running


@pytest.fixture
def ray_executor(cluster: RayCluster):
    executor = RayExecutor(address=cluster.address, plans=CLUSTER_PLANS, block_rows=20_000)
    executor.connect()
    ship_test_module(__name__)
    yield executor
    executor.close()


# -- a corpus --------------------------------------------------------------------------------

PREFIXES = ["Problem:", "Solve the following.", "Question:", "(AMC 2019 Problem 5.)"]


def _jsonl(path: Path) -> list[dict]:
    with open(path) as fh:
        return [json.loads(line) for line in fh if line.strip()]


def synthetic_prompts(rows: int, seed: int = 0) -> pl.DataFrame:
    """`rows` prompts (the prompts table's columns) drawn from the shared math sources: each
    row a copy of an original, re-spaced, re-cased, prefixed, with a word dropped, a number
    changed (a template sibling), its answer removed, or a benchmark problem quoted in it."""
    rng = random.Random(seed)
    originals: list[tuple[str, str | None]] = [
        (r["problem"], str(r["answer"])) for r in _jsonl(SHARED / "sources" / "math_train.jsonl")
    ]
    originals += [
        (r["question"], r["answer"].rsplit("####", 1)[-1].strip())
        for r in _jsonl(SHARED / "sources" / "gsm8k_train.jsonl")
    ]
    bench = [r["problem"] for r in _jsonl(SHARED / "benchmarks" / "aime24.jsonl")]
    problems, answers = [], []
    for _ in range(rows):
        text, answer = rng.choice(originals)
        kind = rng.random()
        if kind < 0.15:
            text = re.sub(r"\s+", "  ", text).upper() if rng.random() < 0.5 else text + " "
        elif kind < 0.35:
            words = text.split(" ")
            if len(words) > 8:
                del words[rng.randrange(len(words))]
            text = rng.choice(PREFIXES) + " " + " ".join(words)
        elif kind < 0.45:
            text = re.sub(r"\d+", lambda m: str(int(m.group()) + rng.randint(1, 9)), text, count=1)
        elif kind < 0.55:
            answer = None
        elif kind < 0.56:
            text = "Consider this: " + rng.choice(bench)
        problems.append(text)
        answers.append(answer)
    return pl.DataFrame(
        {
            "uid": [f"syn:{i}" for i in range(rows)],
            "id": [f"{i:08x}" for i in range(rows)],
            "source": ["synthetic"] * rows,
            "source_id": [str(i) for i in range(rows)],
            "domain": ["math"] * rows,
            "problem": problems,
            "answer": answers,
            "metadata": ["{}"] * rows,
        }
    )


# -- comparing two runs ----------------------------------------------------------------------


def _drops(lake: Lake, out: str) -> pl.DataFrame:
    return pl.from_arrow(
        lake.sql(
            f"SELECT uid, step, reason, detail FROM drops WHERE output_table = '{out}' "
            "ORDER BY step, uid"
        ).to_arrow_table()
    )


def assert_same_runs(lake_a: Lake, out_a: str, lake_b: Lake, out_b: str) -> None:
    a, b = lake_a.resolve(out_a), lake_b.resolve(out_b)
    assert a.rows == b.rows
    kept_a = pl.from_arrow(lake_a.read(a.ref))
    kept_b = pl.from_arrow(lake_b.read(b.ref))
    assert kept_a.equals(kept_b)
    drops_a, drops_b = _drops(lake_a, out_a), _drops(lake_b, out_b)
    assert drops_a.height > 0
    assert drops_a.equals(drops_b)
    assert a.content_hash == b.content_hash
    lake_b.verify_hash(b.ref)


def test_demo_build_is_the_same_on_the_cluster(
    tmp_path: Path, cluster: RayCluster, ray_executor: RayExecutor
) -> None:
    ray_executor.block_rows = 100  # several blocks even on the small demo corpus
    local_lake, ray_lake = Lake(tmp_path / "local"), Lake(tmp_path / "ray")
    local = build_dataset(
        local_lake, math_rl_v2, profile="demo", manifests_dir=tmp_path / "m1",
        write_html_report=False,
    )  # fmt: skip
    clustered = build_dataset(
        ray_lake, math_rl_v2, profile="demo", manifests_dir=tmp_path / "m2",
        executor=ray_executor, write_html_report=False,
    )  # fmt: skip
    assert_same_runs(local_lake, "math_rl_v2", ray_lake, "math_rl_v2")
    assert local.manifest.output.content_hash == clustered.manifest.output.content_hash
    funnel = [(f.step, f.rows_in, f.rows_out, f.dropped) for f in local.manifest.funnel]
    assert funnel == [(f.step, f.rows_in, f.rows_out, f.dropped) for f in clustered.manifest.funnel]
    assert {f.step for f in local.manifest.funnel} >= {"decontaminate", "near_dedup"}
    # the plans ran on the cluster, in several blocks
    stages = {(s.step, s.stage) for s in ray_executor.stages}
    assert ("near_dedup", "candidate pairs (shuffle on band keys)") in stages
    assert ("decontaminate", "stock n-grams (shuffle on the n-gram)") in stages
    assert ("rule_filters", "map") in stages


def test_the_cli_builds_on_a_cluster_in_one_command(tmp_path: Path, cluster: RayCluster) -> None:
    """The README's recipe: `ray start --head` (the fixture), then `--executor ray
    --ray-address HEAD`; the published version is the local build's, byte for byte."""
    local = build_dataset(
        Lake(tmp_path / "local"), math_rl_v2, profile="demo", manifests_dir=tmp_path / "m1",
        write_html_report=False,
    )  # fmt: skip
    out = subprocess.run(
        [sys.executable, "-c", "from cli.main import main; main()", "--quiet", "--lake",
         str(tmp_path / "ray"), "build", "dataset", "math_rl_v2", "--profile", "demo",
         "--manifests", str(tmp_path / "m2"), "--executor", "ray", "--ray-address",
         cluster.address],
        capture_output=True, text=True, cwd=ROOT, timeout=600,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert f"content_hash {local.manifest.output.content_hash[:12]}" in out.stdout
    bad = subprocess.run(
        [sys.executable, "-c", "from cli.main import main; main()", "--lake",
         str(tmp_path / "bad"), "build", "dataset", "math_rl_v2", "--profile", "demo",
         "--executor", "ray", "--ray-address", "127.0.0.1:1"],
        capture_output=True, text=True, cwd=ROOT, timeout=120,
    )  # fmt: skip
    assert bad.returncode == 1
    assert "cannot connect to Ray at 127.0.0.1:1" in bad.stderr


def _corpus_steps(benchmarks: list) -> list[Step]:
    return [
        Step(
            "decontaminate",
            decontaminate,
            {"benchmarks": benchmarks, "n": 9},
            scope=decontamination_scope("boilerplate-aware"),
        ),
        Step("exact_dedup", exact_dedup, {"id_column": "uid"}, partition="normalized_text"),
        Step("near_dedup", near_dedup, {"id_column": "uid"}, partition="lsh_bands"),
    ]


@pytest.fixture(scope="module")
def corpus_lake(tmp_path_factory: pytest.TempPathFactory) -> Lake:
    lake = Lake(tmp_path_factory.mktemp("corpus") / "lake")
    lake.commit("corpus", synthetic_prompts(200_000), kind="prompts")
    return lake


def test_200k_rows_give_the_same_kept_drops_and_hash(
    corpus_lake: Lake, ray_executor: RayExecutor
) -> None:
    benchmarks = load_benchmarks([str(SHARED / "benchmarks" / "aime24.jsonl")])
    steps = _corpus_steps(benchmarks)
    local = run_steps(corpus_lake, "corpus", steps, out="local_out", producer="test")
    clustered = run_steps(
        corpus_lake, "corpus", steps, out="ray_out", producer="test", executor=ray_executor
    )
    assert_same_runs(corpus_lake, "local_out", corpus_lake, "ray_out")
    for a, b in zip(local.funnel, clustered.funnel, strict=True):
        assert (a.step, a.rows_in, a.rows_out, a.dropped, a.stats) == (
            b.step, b.rows_in, b.rows_out, b.dropped, b.stats,
        )  # fmt: skip
    by_step = {f.step: f for f in local.funnel}
    # the corpus exercises every branch: copies, siblings kept apart, answerless rows attached
    assert by_step["decontaminate"].dropped.get("contaminated", 0) > 100
    assert by_step["exact_dedup"].dropped["exact_duplicate"] > 10_000
    assert by_step["near_dedup"].dropped["near_duplicate"] > 10_000
    assert by_step["near_dedup"].stats["answerless_clusters_attached"] > 0


def test_each_prebuilt_benchmark_index_is_the_one_shared(ray_executor: RayExecutor) -> None:
    """A step handed a built `BenchmarkIndex` scans with that index on the workers: two
    indexes built one after the other (the first freed) give each its own local result."""
    frame = synthetic_prompts(4_000, seed=3)
    dropped = []
    for name in ("aime24", "math500"):
        index = BenchmarkIndex.build(
            load_benchmarks([str(SHARED / "benchmarks" / f"{name}.jsonl")]), 9
        )
        step = Step(
            "decontaminate",
            decontaminate,
            {"benchmarks": index, "n": 9},
            scope=decontamination_scope("boilerplate-aware"),
        )
        local = LocalExecutor().run(step, frame)
        clustered = ray_executor.run(step, frame)
        assert clustered.kept.equals(local.kept)
        assert clustered.dropped.equals(local.dropped)
        dropped.append(set(local.dropped["uid"]))
        del index, step
    assert dropped[0] and dropped[0] != dropped[1]


# -- faults ----------------------------------------------------------------------------------


def _kill_workers_running(cluster: RayCluster, names: tuple[str, ...], stop: threading.Event):
    """SIGKILL Ray workers while they run one of the named tasks (once per name)."""
    killed: list[str] = []

    def watch() -> None:
        pending = set(names)
        while pending and not stop.is_set():
            for proc in cluster.workers():
                try:
                    title = " ".join(proc.cmdline())
                except psutil.Error:
                    continue
                hit = next((n for n in pending if f"ray::{n}" in title), None)
                if hit:
                    proc.send_signal(signal.SIGKILL)
                    killed.append(f"{hit} (pid {proc.pid})")
                    pending.discard(hit)
            time.sleep(0.005)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread, killed


def test_workers_killed_mid_step_are_retried_and_the_lake_stays_consistent(
    corpus_lake: Lake, cluster: RayCluster, ray_executor: RayExecutor
) -> None:
    steps = _corpus_steps(load_benchmarks([str(SHARED / "benchmarks" / "aime24.jsonl")]))[1:]
    stop = threading.Event()
    thread, killed = _kill_workers_running(
        cluster, ("_exact_keys", "_near_block", "_band_buckets"), stop
    )
    try:
        run_steps(corpus_lake, "corpus", steps, out="killed", producer="t", executor=ray_executor)
    finally:
        stop.set()
        thread.join()
    assert len(killed) >= 2, killed  # workers really died mid-task
    local = run_steps(corpus_lake, "corpus", steps, out="unkilled", producer="t")
    assert_same_runs(corpus_lake, "unkilled", corpus_lake, "killed")
    assert local.output.rows == corpus_lake.resolve("killed").rows
    for info in corpus_lake.tables():
        corpus_lake.verify_hash(info.ref)


_KILL_MARK = "CASCADE_TEST_KILL_MARK"


def _dies_once_per_block(df: pl.DataFrame, *, marks: str) -> StepResult:
    """A row-local operator whose worker dies the first time it sees each block."""
    mark = Path(marks) / f"{df['uid'][0].replace(':', '_')}"
    if not mark.exists():
        mark.write_text("died")
        os.kill(os.getpid(), signal.SIGKILL)
    long = df["problem"].str.len_chars() > 200
    return StepResult(
        kept=df.filter(~long), dropped=df.filter(long).with_columns(reason=pl.lit("long"))
    )


def test_a_row_map_whose_workers_die_is_retried(
    tmp_path: Path, corpus_lake: Lake, ray_executor: RayExecutor
) -> None:
    step = Step("long", _dies_once_per_block, {"marks": str(tmp_path)}, scope="rows")
    ray_executor.block_rows = 50_000
    run_steps(corpus_lake, "corpus", [step], out="died", producer="t", executor=ray_executor)
    assert len(list(tmp_path.iterdir())) == 4  # each of the 4 blocks killed its worker once
    run_steps(corpus_lake, "corpus", [step], out="lived", producer="t", executor=LocalExecutor())
    assert_same_runs(corpus_lake, "lived", corpus_lake, "died")


# -- generation and verification on the workers ----------------------------------------------

PROMPTS, K, CHUNK = 16, 2, 4
TOTAL = PROMPTS * K * 2  # both modes
GENERATE = textwrap.dedent(
    """
    import json, sys
    from curation.generate.on_cluster import generation_backend_factory
    from curation.generate import SamplingParams, Teacher, generate_to_lake
    from curation.generate.plan import prompts_from_records
    from curation.generate.run import report_json
    from lake.catalog import Lake
    from lake.cluster import RayExecutor

    address, lake_dir, teacher, prompts = sys.argv[1:5]
    records = [json.loads(line) for line in open(prompts)]
    options = {"batch_size": 4, "num_threads": 1}
    factory = generation_backend_factory(RayExecutor(address=address), "hf", options)
    report = generate_to_lake(
        Lake(lake_dir), prompts_from_records(records, origin=prompts), output="gens",
        teacher=Teacher(teacher), backend="hf", backend_options=options,
        modes=["think", "no_think"], k=2, sampling=SamplingParams(max_new_tokens=24, temperature=1.0),
        seed=3, chunk_size=4, backend_factory=factory,
    )
    print(report_json(report), flush=True)
    """
)


def test_generation_on_the_workers_resumes_after_the_driver_is_killed(
    tmp_path: Path, cluster: RayCluster
) -> None:
    from curation.generate import SamplingParams, Teacher, generate_to_lake
    from curation.generate.plan import prompts_from_records
    from curation.generate.tiny_teacher import build_tiny_teacher

    records = _jsonl(SHARED / "sources" / "math_train.jsonl")[:300]
    teacher = str(build_tiny_teacher(tmp_path / "teacher", [r["problem"] for r in records]))
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps(r) + "\n" for r in records[:PROMPTS]))
    lake_dir = tmp_path / "lake"
    args = [sys.executable, "-c", GENERATE, cluster.address, str(lake_dir), teacher, str(prompts)]
    proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    lake = Lake(lake_dir)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        if lake.has("gens") and len(lake.versions("gens")) >= 2:
            break
        time.sleep(0.1)
    assert proc.poll() is None, f"finished before it could be killed: {proc.communicate()}"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    before = lake.read("gens").num_rows
    assert 0 < before < TOTAL and before % CHUNK == 0  # whole chunks only

    rerun = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr
    report = json.loads(rerun.stdout.strip().splitlines()[-1])
    assert (report["planned"], report["cached"]) == (TOTAL, before)
    assert report["generated"] == TOTAL - before
    rows = lake.read("gens").to_pylist()
    assert len(rows) == TOTAL and len({r["id"] for r in rows}) == TOTAL
    # the same samples a local, uninterrupted run generates
    reference = Lake(tmp_path / "reference")
    generate_to_lake(
        reference, prompts_from_records(records[:PROMPTS], origin=str(prompts)), output="gens",
        teacher=Teacher(teacher), backend="hf", backend_options={"batch_size": 8, "num_threads": 1},
        modes=["think", "no_think"], k=K, sampling=SamplingParams(max_new_tokens=24, temperature=1.0),
        seed=3,
    )  # fmt: skip
    want = {r["id"]: r["response"] for r in reference.read("gens").to_pylist()}
    assert {r["id"]: r["response"] for r in rows} == want


STDIO = json.dumps([{"input": "4\n", "output": "8\n"}, {"input": "5\n", "output": "10\n"}])


def _program(code: str) -> str:
    return f"```python\n{code}\n```"


def _worker_environment(name: str) -> str | None:
    return os.environ.get(name)


def test_code_verification_runs_in_a_sandbox_on_every_worker(
    tmp_path: Path, ray_executor: RayExecutor
) -> None:
    import ray

    from curation.verify.table import verify_step

    outside = tmp_path / "escaped.txt"
    search = (
        "import glob, os\n"
        f"found = {SECRET!r} in str(dict(os.environ))\n"
        "for path in glob.glob('/proc/*/environ'):\n"
        "    try:\n"
        f"        found = found or {SECRET!r} in open(path, errors='replace').read()\n"
        "    except Exception:\n"
        "        pass\n"
        "import sys\nprint(0 if found else 2 * int(sys.stdin.read()))"
    )
    programs = [
        "import sys\nfor x in sys.stdin.read().split():\n    print(2 * int(x))",  # passes
        "print(8)\nprint(11)",  # wrong
        f"open({str(outside)!r}, 'w').write('x')",
        "import socket\nsocket.create_connection(('127.0.0.1', 22), timeout=1)",
        search,  # the worker's environment holds the secret; the sandbox must not
    ] * 2
    df = pl.DataFrame(
        {
            "uid": [f"r{i}" for i in range(len(programs))],
            "response": [_program(p) for p in programs],
            "tests": [STDIO] * len(programs),
        }
    )
    # the secret really is in the workers' environment
    assert ray.get(ray.remote(_worker_environment).remote("CASCADE_SANDBOX_TEST_SECRET")) == SECRET
    step = Step("verify", verify_step, {"kind": "code"}, scope="rows")
    ray_executor.block_rows = 3  # blocks on both workers
    local = LocalExecutor().run(step, df)
    clustered = ray_executor.run(step, df)
    assert local.kept.equals(clustered.kept) and local.dropped.equals(clustered.dropped)
    assert clustered.kept["uid"].to_list() == ["r0", "r4", "r5", "r9"]
    assert not outside.exists()
    detail = dict(zip(clustered.dropped["uid"], clustered.dropped["detail"], strict=True))
    # the host's tmp_path is not in the sandbox's jail; the socket is refused
    assert "FileNotFoundError" in detail["r2"] and "PermissionError" in detail["r3"]


# -- choosing the executor -------------------------------------------------------------------


def test_executor_options_say_what_is_wrong() -> None:
    from cli.console import CascadeError

    assert isinstance(executor_from_options("local"), LocalExecutor)
    with pytest.raises(CascadeError, match="--ray-address needs --executor ray"):
        executor_from_options("local", "127.0.0.1:6379")
    with pytest.raises(CascadeError, match="--executor must be one of local, ray"):
        executor_from_options("spark")
    assert isinstance(executor_from_options("ray", "127.0.0.1:1"), RayExecutor)


def test_cluster_settings_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from cli.console import CascadeError

    monkeypatch.setenv("CASCADE_RAY_BLOCK_ROWS", "250000")
    monkeypatch.setenv("CASCADE_RAY_PARTITIONS", "64")
    executor = executor_from_options("ray", "127.0.0.1:1")
    assert isinstance(executor, RayExecutor)
    assert (executor.block_rows, executor.num_partitions) == (250_000, 64)
    monkeypatch.setenv("CASCADE_RAY_PARTITIONS", "many")
    with pytest.raises(CascadeError, match="CASCADE_RAY_PARTITIONS='many': expected a positive"):
        executor_from_options("ray")


def test_an_unreachable_cluster_is_one_sentence() -> None:
    from lake.cluster import ClusterError

    executor = RayExecutor(address="127.0.0.1:1")
    with pytest.raises(ClusterError, match=r"cannot connect to Ray at 127\.0\.0\.1:1"):
        executor.connect()
