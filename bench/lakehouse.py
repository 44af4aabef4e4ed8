"""Lake benchmark: the DuckLake lake against the lake it replaced, side by side.

Builds a jsonl corpus of N rows (default 10M) from the shared sources (MATH train, AIME,
GSM8K, LeetCode prompts, each row re-numbered so ids differ), then runs, on the same corpus
and one after the other:

- ingest: `curation.ingest.ingest` of this tree (DuckLake catalog, uid per row, one commit with
  its drops) against the same call in the tree of commit `--baseline` (cascade's own DuckDB
  catalog of versions: the code before the move); plain
  `polars.read_ndjson(...).write_parquet(...)` for scale;
- query: `SELECT ... GROUP BY` through `Lake.connect()` (what `cascade sql` uses) in both
  trees, and DuckDB reading the new lake's Parquet files directly.

Each phase runs in its own subprocess (with that tree on sys.path) so its peak RSS is its own;
the two lakes' phases alternate (`--repeats` rounds) and each keeps its best run.

    python bench/lakehouse.py --rows 10000000
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ROOT.parent / "shared" / "data" / "sources"
BASELINE_COMMIT = "34de43e"  # the last commit before the lake moved onto DuckLake
GROUP_BY_JSON = (
    "SELECT json_extract_string(metadata, '$.origin') AS origin, count(*) FROM bench GROUP BY 1"
)
GROUP_BY_COLUMN = "SELECT source, count(*) FROM bench GROUP BY 1"


def build_corpus(path: Path, rows: int, seed: int = 0) -> None:
    """Write `rows` jsonl records cycling through the shared sources with a varying suffix."""
    base: list[tuple[str, str, str]] = []
    for name, field in (
        ("math_train.jsonl", "problem"),
        ("aime_1983_2023.jsonl", "problem"),
        ("gsm8k_train.jsonl", "question"),
        ("leetcode_train.jsonl", "problem"),
    ):
        for line in (SOURCES / name).read_text().split("\n"):
            if line.strip():
                rec = json.loads(line)
                base.append((name.split(".")[0], rec[field], str(rec.get("answer", ""))[:50]))
    rng = random.Random(seed)
    with open(path, "w") as fh:
        for i in range(rows):
            src, problem, answer = base[i % len(base)]
            rec = {
                "problem": f"{problem} (variant {i})",
                "answer": answer,
                "origin": src,
                "difficulty": rng.randint(1, 9),
            }
            fh.write(json.dumps(rec) + "\n")


def best_of_three(con, query: str) -> tuple[list, float]:
    """The result of a query and its fastest latency over three runs (seconds)."""
    times = []
    result: list = []
    for _ in range(3):
        t = time.perf_counter()
        result = con.sql(query).fetchall()
        times.append(time.perf_counter() - t)
    return result, min(times)


def phase(name: str, corpus: str, work: str) -> dict:
    """Run one phase in this process (its tree first on sys.path); timing and peak RSS."""
    import duckdb
    import polars as pl

    start = time.perf_counter()
    out: dict = {"phase": name}
    if name == "ingest_polars":
        frame = pl.read_ndjson(corpus)
        frame.write_parquet(Path(work) / "plain.parquet")
        out["rows"] = frame.height
    elif name.startswith("ingest_"):
        from curation.ingest import ingest

        report = ingest(_lake_class()(work), [corpus], "bench", source="bench")
        out["rows"] = report.version.rows
    elif name == "query_duckdb":
        from lake.catalog import Lake

        files = Lake(work).files("bench")
        con = duckdb.connect()
        query = GROUP_BY_JSON.replace("FROM bench", f"FROM read_parquet({files!r})")
        out["result"], out["latency_s"] = best_of_three(con, query)
    else:
        con = _lake_class()(work).connect()
        out["result"], out["latency_s"] = best_of_three(con, GROUP_BY_JSON)
        _, out["latency_plain_column_s"] = best_of_three(con, GROUP_BY_COLUMN)
    out["seconds"] = time.perf_counter() - start
    out["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return out


def _lake_class():
    try:
        from lake.catalog import Lake  # this tree
    except ImportError:
        from curation.lake import Lake  # the baseline tree
    return Lake


def _baseline_tree(directory: Path, commit: str) -> Path:
    """The project at `commit`, extracted with git archive so its code runs beside ours."""
    tree = directory / "baseline"
    tree.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", commit], capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    return tree


def _run_phase(name: str, tree: Path, corpus: Path, work: Path) -> dict | None:
    if not name.startswith("query"):
        work.mkdir(exist_ok=True)
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "lakehouse.py"), "--phase", name, "--corpus",
         str(corpus), "--work", str(work), "--tree", str(tree)],
        capture_output=True,
        text=True,
        cwd=tree,
    )  # fmt: skip
    if proc.returncode != 0:
        print(f"{name} failed:\n{proc.stderr[-3000:]}")
        return None
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    print(json.dumps({k: v for k, v in result.items() if k != "result"}, default=str), flush=True)
    return result


def _keep_best(results: dict, name: str, run: dict | None) -> None:
    """Keep the faster of two runs of a phase (by seconds, or by query latency)."""
    key = "latency_s" if name.startswith("query") else "seconds"
    best = results.get(name)
    if run is not None and (best is None or run[key] < best[key]):
        results[name] = run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--baseline", default=BASELINE_COMMIT, help="commit of the old lake")
    parser.add_argument("--repeats", type=int, default=2, help="alternating runs per lake")
    parser.add_argument("--phase", help=argparse.SUPPRESS)
    parser.add_argument("--corpus", help=argparse.SUPPRESS)
    parser.add_argument("--work", help=argparse.SUPPRESS)
    parser.add_argument("--tree", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.phase:
        sys.path[0] = args.tree  # that tree's packages, not this script's folder
        print(json.dumps(phase(args.phase, args.corpus, args.work), default=str))
        return
    with tempfile.TemporaryDirectory(dir=ROOT / "bench") as tmp_name:
        tmp = Path(tmp_name)
        corpus = tmp / "corpus.jsonl"
        t = time.perf_counter()
        build_corpus(corpus, args.rows)
        size_gib = corpus.stat().st_size / 2**30
        print(
            f"corpus: {args.rows:,} rows, {size_gib:.2f} GiB, built in {time.perf_counter() - t:.0f}s"
        )
        old_tree = _baseline_tree(tmp, args.baseline)
        new_lake, old_lake = tmp / "new_lake", tmp / "old_lake"
        trees = {"old": (old_tree, old_lake), "new": (ROOT, new_lake)}
        r: dict[str, dict | None] = {
            "ingest_polars": _run_phase("ingest_polars", ROOT, corpus, tmp / "plain")
        }
        # Alternate the two lakes (old, new, old, new, ...) and keep each one's best run, so
        # a change of machine load between phases does not decide the ratio.
        for _ in range(args.repeats):
            for side, (tree, where) in trees.items():
                if where.exists():
                    shutil.rmtree(where)
                _keep_best(r, f"ingest_{side}", _run_phase(f"ingest_{side}", tree, corpus, where))
        for _ in range(args.repeats):
            for side, (tree, where) in trees.items():
                _keep_best(r, f"query_{side}", _run_phase(f"query_{side}", tree, corpus, where))
        r["query_duckdb"] = _run_phase("query_duckdb", ROOT, corpus, new_lake)
        new, old, plain = r["ingest_new"], r["ingest_old"], r["ingest_polars"]
        if new and old and plain:
            rate = {"new": new, "old": old, "plain": plain}
            rate = {k: v["rows"] / v["seconds"] for k, v in rate.items()}
            print(
                f"ingest {args.rows:,} rows: DuckLake lake {rate['new']:,.0f} rows/s (peak "
                f"{new['peak_rss_mib']:,.0f} MiB) vs old lake {rate['old']:,.0f} rows/s (peak "
                f"{old['peak_rss_mib']:,.0f} MiB): {rate['new'] / rate['old']:.2f}x; plain polars "
                f"{rate['plain']:,.0f} rows/s"
            )
        qn, qo, qd = r["query_new"], r["query_old"], r["query_duckdb"]
        if qn and qo and qd:
            same = sorted(map(tuple, qn["result"])) == sorted(map(tuple, qo["result"]))
            print(
                f"GROUP BY over {args.rows:,} rows: DuckLake lake {qn['latency_s'] * 1000:,.0f} ms "
                f"vs old lake {qo['latency_s'] * 1000:,.0f} ms "
                f"({qo['latency_s'] / qn['latency_s']:.2f}x faster); plain column "
                f"{qn['latency_plain_column_s'] * 1000:,.0f} vs "
                f"{qo['latency_plain_column_s'] * 1000:,.0f} ms; DuckDB on the files "
                f"{qd['latency_s'] * 1000:,.0f} ms; same result: {same}"
            )


if __name__ == "__main__":
    main()
