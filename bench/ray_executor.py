"""Ray executor benchmark: the same steps on the local executor and on Ray, side by side.

Builds the dedup benchmark's corpus (bench/dedup.py: the shared sources, exact-deduplicated,
replicated to `--rows` rows with meaning-preserving perturbations), then runs the three
steps a recipe runs before its models (decontamination against the math benchmarks, exact
dedup, near dedup; each on the previous step's kept rows) with `LocalExecutor` and with
`RayExecutor` on a local Ray instance of `--cpus` CPUs, alternating, `--repeat` times. Ray's
worker processes are started and warmed up first (a small run of each step), and that
one-time cost is reported apart. Checks that both executors return the same kept and dropped
rows, and reports per step the wall times, the overhead ratio (Ray / local), and the driver's
peak RSS (local: during the step; Ray: per stage of its plan, RSS sampled every 20 ms).

    python bench/ray_executor.py                   # 1M rows, 2 CPUs
    python bench/ray_executor.py --rows 200000
    python bench/ray_executor.py --whole           # the whole step list through run_steps

`--whole` measures what a build does instead: the corpus is committed to a lake and
`run_steps` runs the three steps over that version with each executor (Ray first, so its
figure carries nothing the local run left behind), committing both outputs; it reports the
wall time and the driver's peak RSS of each and checks that the content hashes agree. The
local executor reads the version onto the driver; the Ray executor's workers read, run and
write it (`RayExecutor.run_all`).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

# `python bench/ray_executor.py` puts bench/ first on the path, where bench/lake.py would
# shadow the `lake` package; the project root goes there instead.
sys.path[0] = str(Path(__file__).resolve().parents[1])
os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # no token file for a local bench cluster
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

import argparse  # noqa: E402
import importlib.util  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import polars as pl  # noqa: E402

from curation.cluster_plans import CLUSTER_PLANS  # noqa: E402
from curation.decontaminate import decontaminate  # noqa: E402
from curation.decontaminate.benchmarks import MATH_RL_DEFAULT, load_benchmarks  # noqa: E402
from curation.dedup import exact_dedup, near_dedup  # noqa: E402
from lake.catalog import Lake  # noqa: E402
from lake.cluster import RayExecutor  # noqa: E402
from lake.cluster.memory import PeakRss  # noqa: E402
from lake.steps import LocalExecutor, Step, run_steps  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT.parent / "shared" / "data" / "benchmarks"


def corpus(rows: int) -> pl.DataFrame:
    """bench/dedup.py's corpus as a prompts frame (uid, problem, answer, tests)."""
    spec = importlib.util.spec_from_file_location("bench_dedup", ROOT / "bench" / "dedup.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.path[0] = str(ROOT)  # bench/dedup.py set it for itself
    with tempfile.TemporaryDirectory() as folder:
        module.build_corpus(rows, Path(folder), shards=1)
        frame = pl.read_ndjson(
            Path(folder) / "corpus_00.jsonl",
            schema={"id": pl.String, "problem": pl.String, "answer": pl.String, "tests": pl.String},
        )
    return frame.select(pl.col("id").alias("uid"), "id", "problem", "answer", "tests")


def steps() -> list[Step]:
    benchmarks = load_benchmarks(list(MATH_RL_DEFAULT), local_dir=BENCHMARKS)
    return [
        Step("decontaminate", decontaminate, {"benchmarks": benchmarks}, scope="rows"),
        Step("exact_dedup", exact_dedup, {"id_column": "uid"}, partition="normalized_text"),
        Step("near_dedup", near_dedup, {"id_column": "uid"}, partition="lsh_bands"),
    ]


def rss_gib(value: int) -> float:
    return round(value / 2**30, 2)


def whole_list(lake: Lake, plan: list[Step], ray: RayExecutor) -> dict:
    """`run_steps` over the lake's `corpus` with each executor: seconds, driver peak, hashes."""
    figures: dict = {"rows": lake.resolve("corpus").rows}
    for name in ("ray", "local"):
        executor = ray if name == "ray" else LocalExecutor()
        base = PeakRss().stop()
        peak = PeakRss()
        t0 = time.perf_counter()
        run = run_steps(lake, "corpus", plan, out=name, producer="bench", executor=executor)
        seconds = time.perf_counter() - t0
        top = peak.stop()
        figures[name] = {
            "seconds": round(seconds, 2),
            "driver_rss_before_gib": rss_gib(base),
            "driver_peak_gib": rss_gib(top),
            "driver_growth_gib": rss_gib(top - base),
            "rows_out": run.output.rows,
            "content_hash": run.output.content_hash,
        }
        print(json.dumps({name: figures[name]}), flush=True)
    if figures["ray"]["content_hash"] != figures["local"]["content_hash"]:
        raise SystemExit("the executors committed different content")
    figures["ratio"] = round(figures["ray"]["seconds"] / figures["local"]["seconds"], 2)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--cpus", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--block-rows", type=int, default=100_000)
    parser.add_argument("--json", type=Path, help="Also write the figures here.")
    parser.add_argument("--whole", action="store_true", help="run_steps over a lake version.")
    args = parser.parse_args()

    started = time.perf_counter()
    frame = corpus(args.rows)
    print(f"corpus: {frame.height:,} rows in {time.perf_counter() - started:.1f}s", flush=True)
    plan = steps()
    local = LocalExecutor()
    ray = RayExecutor(
        plans=CLUSTER_PLANS, num_cpus=args.cpus, block_rows=args.block_rows, measure_memory=True
    )
    started = time.perf_counter()
    ray.connect()
    cluster_start = time.perf_counter() - started
    started = time.perf_counter()
    ray.block_rows = 5_000  # several small blocks: every worker starts and warms up
    warm = frame.head(5_000 * 2 * args.cpus)
    for step in plan:  # worker processes start and import the operators once
        warm = ray.run(step, warm).kept
    ray.block_rows = args.block_rows
    ray.component_rounds.clear()
    warm_up = time.perf_counter() - started
    print(f"ray: started in {cluster_start:.1f}s, workers warm in {warm_up:.1f}s", flush=True)
    if args.whole:
        folder = tempfile.TemporaryDirectory()
        lake = Lake(Path(folder.name) / "lake")
        prompts = frame.select(
            "uid", "id", source=pl.lit("bench"), source_id="uid", domain=pl.lit("math"),
            problem="problem", answer="answer", metadata="tests",
        )  # fmt: skip
        lake.commit("corpus", prompts, kind="prompts")
        del frame, prompts, warm  # the driver keeps no copy of the corpus
        figures_whole = whole_list(lake, plan, ray)
        ray.close()
        folder.cleanup()
        print(json.dumps(figures_whole, indent=2))
        if args.json:
            args.json.write_text(json.dumps(figures_whole, indent=2))
        return

    figures = []
    rows_in = frame
    for step in plan:
        times: dict[str, list[float]] = {"local": [], "ray": []}
        local_peak = 0
        stages: dict[str, tuple[list[float], int]] = {}
        result = None
        for _ in range(args.repeat):
            for name in ("local", "ray"):
                ray.stages.clear()
                peak = PeakRss() if name == "local" else None
                t0 = time.perf_counter()
                out = (local if name == "local" else ray).run(step, rows_in)
                times[name].append(time.perf_counter() - t0)
                if peak is not None:
                    local_peak = max(local_peak, peak.stop())
                    result = out
                else:
                    assert result is not None
                    same = out.kept.equals(result.kept) and out.dropped.equals(result.dropped)
                    if not same:
                        raise SystemExit(f"{step.name}: the executors disagree")
                    for s in ray.stages:
                        seconds, rss = stages.get(s.stage, ([], 0))
                        stages[s.stage] = ([*seconds, s.seconds], max(rss, s.driver_peak_rss))
        assert result is not None
        local_s, ray_s = statistics.median(times["local"]), statistics.median(times["ray"])
        entry = {
            "step": step.name,
            "rows_in": rows_in.height,
            "rows_out": result.kept.height,
            "local_s": round(local_s, 2),
            "ray_s": round(ray_s, 2),
            "ratio": round(ray_s / local_s, 2),
            "local_driver_peak_gib": rss_gib(local_peak),
            "ray_stages": [
                {
                    "stage": k,
                    "seconds": round(statistics.median(v[0]), 2),
                    "peak_gib": rss_gib(v[1]),
                }
                for k, v in stages.items()
            ],
        }
        if ray.component_rounds:
            entry["component_rounds"] = ray.component_rounds[-1]
            ray.component_rounds.clear()
        figures.append(entry)
        print(json.dumps(entry), flush=True)
        rows_in = result.kept
    ray.close()
    print()
    print("| step | rows in | local s | ray s | ray / local | driver peak local | ray |")
    print("|---|---|---|---|---|---|---|")
    for e in figures:
        peak = max((s["peak_gib"] for s in e["ray_stages"]), default=0)
        print(
            f"| {e['step']} | {e['rows_in']:,} | {e['local_s']} | {e['ray_s']} | "
            f"**{e['ratio']}x** | {e['local_driver_peak_gib']} GiB | {peak} GiB |"
        )
    if args.json:
        args.json.write_text(json.dumps({"rows": args.rows, "cpus": args.cpus, "steps": figures,
                                         "cluster_start_s": cluster_start, "warm_up_s": warm_up},
                                        indent=2))  # fmt: skip


if __name__ == "__main__":
    main()
