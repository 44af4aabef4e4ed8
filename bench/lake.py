"""Lake benchmark: ingest rows/s, GROUP BY latency through `cascade sql`, peak RAM.

Builds a jsonl corpus of N rows (default 10M) from the shared sources (MATH train, AIME,
GSM8K, LeetCode prompts, each row re-numbered so ids differ), then, side by side:

- ingest: `curation.ingest.ingest` (ids, metadata, schema checks, atomic commit) against a
  plain `polars.read_ndjson(...).write_parquet(...)` of the same file (no ids, no checks);
- query: `SELECT source, count(*) ... GROUP BY` through the lake's views against DuckDB
  reading the same Parquet files directly.

Each phase runs in its own subprocess so its peak RSS is its own.

    python bench/lake.py --rows 10000000
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ROOT.parent / "shared" / "data" / "sources"


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
    for _ in range(3):
        t = time.perf_counter()
        result = con.sql(query).fetchall()
        times.append(time.perf_counter() - t)
    return result, min(times)


def phase(name: str, corpus: str, work: str) -> dict:
    """Run one phase in this process and return its timing and peak RSS."""
    import duckdb
    import polars as pl

    from curation.ingest import ingest
    from lake.catalog import Lake

    start = time.perf_counter()
    out: dict = {"phase": name}
    if name == "ingest_cascade":
        report = ingest(Lake(work), [corpus], "bench", source="bench")
        out["rows"] = report.version.rows
    elif name == "ingest_polars":
        frame = pl.read_ndjson(corpus)
        frame.write_parquet(Path(work) / "plain.parquet")
        out["rows"] = frame.height
    elif name == "query_cascade":
        con = Lake(work).connect()
        q = "SELECT json_extract_string(metadata, '$.origin') AS origin, count(*) FROM bench GROUP BY 1"
        out["result"], out["latency_s"] = best_of_three(con, q)
        q2 = "SELECT source, count(*) FROM bench GROUP BY 1"
        t = time.perf_counter()
        con.sql(q2).fetchall()
        out["latency_plain_column_s"] = time.perf_counter() - t
    elif name == "query_duckdb":
        files = [str(p) for p in sorted(Path(work).glob("tables/bench/v*/*.parquet"))]
        con = duckdb.connect()
        q = (
            "SELECT json_extract_string(metadata, '$.origin') AS origin, count(*) "
            f"FROM read_parquet({files!r}) GROUP BY 1"
        )
        out["result"], out["latency_s"] = best_of_three(con, q)
    out["seconds"] = time.perf_counter() - start
    out["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--phase", help=argparse.SUPPRESS)
    parser.add_argument("--corpus", help=argparse.SUPPRESS)
    parser.add_argument("--work", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.phase:
        print(json.dumps(phase(args.phase, args.corpus, args.work), default=str))
        return
    with tempfile.TemporaryDirectory(dir=ROOT / "bench") as tmp:
        corpus = Path(tmp) / "corpus.jsonl"
        t = time.perf_counter()
        build_corpus(corpus, args.rows)
        size_gib = corpus.stat().st_size / 2**30
        print(
            f"corpus: {args.rows:,} rows, {size_gib:.2f} GiB, built in {time.perf_counter() - t:.0f}s"
        )
        results = {}
        for name in ("ingest_polars", "ingest_cascade", "query_cascade", "query_duckdb"):
            proc = subprocess.run(
                [sys.executable, __file__, "--phase", name, "--corpus", str(corpus), "--work", tmp],
                capture_output=True,
                text=True,
                cwd=ROOT,
            )
            if proc.returncode != 0:
                print(f"{name} failed:\n{proc.stderr[-3000:]}")
                results[name] = None
                continue
            results[name] = json.loads(proc.stdout.strip().splitlines()[-1])
            print(json.dumps(results[name], default=str))
        ic, ip = results.get("ingest_cascade"), results.get("ingest_polars")
        if ic and ip:
            print(
                f"ingest: cascade {ic['rows'] / ic['seconds']:,.0f} rows/s "
                f"(peak {ic['peak_rss_mib']:,.0f} MiB) vs plain polars "
                f"{ip['rows'] / ip['seconds']:,.0f} rows/s (peak {ip['peak_rss_mib']:,.0f} MiB); "
                f"ratio {(ic['rows'] / ic['seconds']) / (ip['rows'] / ip['seconds']):.2f}"
            )
        qc, qd = results.get("query_cascade"), results.get("query_duckdb")
        if qc and qd:
            print(
                f"GROUP BY over {args.rows:,} rows: cascade sql {qc['latency_s'] * 1000:,.0f} ms "
                f"(plain column {qc['latency_plain_column_s'] * 1000:,.0f} ms, peak "
                f"{qc['peak_rss_mib']:,.0f} MiB) vs DuckDB on the files {qd['latency_s'] * 1000:,.0f} ms; "
                f"same result: {sorted(qc['result']) == sorted(qd['result'])}"
            )


if __name__ == "__main__":
    main()
