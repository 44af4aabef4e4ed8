"""Near-dup benchmark: cascade's exact + MinHash dedup vs datatrove's MinHash pipeline.

Builds a corpus of real problems (the shared sources, exact-deduplicated) replicated to
`--rows` rows with random meaning-preserving perturbations (whitespace, case, punctuation,
LaTeX re-spacing, small word edits, an added instruction prefix or suffix), so every row
knows its origin. Then runs, side by side on the same file and the same cores:

- ours: `exact_dedup` + `near_dedup` with their defaults (2 worker threads), reading and
  writing jsonl;
- datatrove: MinhashDedupSignature -> Buckets -> Cluster -> Filter, word 5-grams,
  14 bands x 8 rows, LocalPipelineExecutor with 2 workers (run with the python of a venv
  that has datatrove: `--datatrove-python`; datatrove is not a project dependency).

Each tool runs in its own process; wall time and the peak RSS of its process tree are
measured from outside. Quality, per row: a dropped row is correct when the row it was
clustered with and that was kept has the same origin. Recall = correct drops / planted
duplicates (rows - origins); precision = correct drops / drops.

    python bench/dedup.py --rows 100000 --datatrove-python /tmp/dtvenv/bin/python
    python bench/dedup.py --rows 1000000 --skip-datatrove      # RAM figure at 1M rows
"""

from __future__ import annotations

import argparse
import json
import random
import re
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import polars as pl
import psutil

# `python bench/dedup.py` puts bench/ first on the path, where bench/lake.py would shadow the
# `lake` package; the project root goes there instead.
sys.path[0] = str(Path(__file__).resolve().parents[1])

SCHEMA = {"answer": pl.String, "tests": pl.String}
ROOT = Path(__file__).resolve().parents[1]
SOURCES = ROOT.parent / "shared" / "data" / "sources"

PREFIXES = [
    "Solve the following problem.",
    "Problem:",
    "Answer the following question.",
    "Please solve this:",
    "Question:",
    "Here is a math problem.",
]
SUFFIXES = [
    "Show your work.",
    "Explain your reasoning.",
    "Give only the final answer.",
    "Think step by step.",
    "Put the final answer in a box.",
]
SYNONYMS = {
    "find": "determine",
    "determine": "find",
    "compute": "calculate",
    "calculate": "compute",
    "what": "which",
    "number": "count",
    "total": "overall",
    "many": "much",
    "the": "a",
    "a": "the",
    "is": "equals",
    "of": "for",
    "and": "plus",
    "value": "amount",
    "each": "every",
    "every": "each",
}


# --------------------------------------------------------------------------- corpus


def load_originals() -> pl.DataFrame:
    """All shared sources as (problem, answer), one row per distinct normalized problem."""
    from curation.dedup import shingle_text

    frames = []
    math = pl.read_ndjson(SOURCES / "math_train.jsonl")
    none = pl.lit(None, pl.String).alias("tests")
    frames.append(math.select("problem", pl.col("answer").cast(pl.String), none))
    aime = pl.read_ndjson(SOURCES / "aime_1983_2023.jsonl")
    frames.append(aime.select("problem", pl.col("answer").cast(pl.String), none))
    gsm = pl.read_ndjson(SOURCES / "gsm8k_train.jsonl")
    frames.append(
        gsm.select(
            pl.col("question").alias("problem"),
            pl.col("answer").str.extract(r"####\s*(.+)$").str.strip_chars().alias("answer"),
            none,
        )
    )
    code = pl.read_ndjson(SOURCES / "leetcode_train.jsonl", infer_schema_length=None)
    tests = pl.col("tests").struct.json_encode().alias("tests")
    frames.append(code.select("problem", pl.lit(None, pl.String).alias("answer"), tests))
    df = pl.concat(frames).filter(pl.col("problem").str.strip_chars() != "")
    df = df.with_columns(shingle_text(df.get_column("problem")).alias("_norm"))
    df = df.unique("_norm", keep="first", maintain_order=True).drop("_norm")
    return drop_restatements(df)


def drop_restatements(df: pl.DataFrame, min_jaccard: float = 0.5) -> pl.DataFrame:
    """Keep one of each group of originals that are the same problem stated twice.

    The sources overlap (AIME problems also appear in MATH train, re-typeset), so two
    originals with the same reference answer and char 5-gram Jaccard >= `min_jaccard` are
    one problem: keeping both would count correct merges as false positives for both
    tools. Compared exactly, with Python sets, within groups of equal answers.
    """
    from curation.dedup import answer_key, jaccard, shingle_set

    answers = answer_key(df.get_column("answer")).to_list()
    problems = df.get_column("problem").to_list()
    groups: dict[str, list[int]] = {}
    for i, a in enumerate(answers):
        if a is not None:
            groups.setdefault(a, []).append(i)
    drop: set[int] = set()
    for members in groups.values():
        sets = {i: shingle_set(problems[i]) for i in members}
        for x, i in enumerate(members):
            if i in drop:
                continue
            for j in members[x + 1 :]:
                small, big = sorted((len(sets[i]), len(sets[j])))
                similar = small >= min_jaccard * big and jaccard(sets[i], sets[j]) >= min_jaccard
                if j not in drop and similar:
                    drop.add(j)
    keep = [i for i in range(df.height) if i not in drop]
    print(f"originals: {df.height} distinct texts, {len(drop)} restatements dropped", flush=True)
    return df[keep]


def _respace_latex(text: str, rng: random.Random) -> str:
    def respace(match: re.Match) -> str:
        body = match.group(1)
        if rng.random() < 0.5:
            body = re.sub(r"\s*([=+\-<>,])\s*", r" \1 ", body)
            return "$ " + body.strip() + " $"
        return "$" + re.sub(r"\s+", "", body) + "$"

    return re.sub(r"\$([^$]{1,200})\$", respace, text)


def _word_edit(text: str, rng: random.Random) -> str:
    words = text.split(" ")
    spots = [i for i, w in enumerate(words) if w.lower() in SYNONYMS]
    if not spots:
        return text
    i = rng.choice(spots)
    repl = SYNONYMS[words[i].lower()]
    words[i] = repl.capitalize() if words[i][:1].isupper() else repl
    return " ".join(words)


def perturb(text: str, rng: random.Random) -> str:
    """1-3 meaning-preserving edits; numbers and the question asked never change."""
    ops = rng.sample(range(7), rng.randint(1, 3))
    for op in ops:
        if op == 0:  # whitespace
            text = re.sub(r" ", lambda m: "  " if rng.random() < 0.1 else " ", text)
            text = text + rng.choice(["", " ", "\n"])
        elif op == 1:  # case
            text = text.lower() if rng.random() < 0.5 else text[:1].upper() + text[1:]
        elif op == 2:  # punctuation at the end
            text = text.rstrip(".?! ") + rng.choice(["", ".", "?", " ."])
        elif op == 3:
            text = _respace_latex(text, rng)
        elif op == 4:
            for _ in range(rng.randint(1, 2)):
                text = _word_edit(text, rng)
        elif op == 5:
            text = rng.choice(PREFIXES) + " " + text
        else:
            text = text + " " + rng.choice(SUFFIXES)
    return text


def build_corpus(rows: int, folder: Path, shards: int = 2, seed: int = 0) -> dict[str, int]:
    """Write `rows` rows in `shards` files (one per datatrove task): every chosen original
    once, unchanged, then perturbed copies of random originals, shuffled."""
    originals = load_originals()
    problems = originals.get_column("problem").to_list()
    answers = originals.get_column("answer").to_list()
    tests = originals.get_column("tests").to_list()
    rng = random.Random(seed)
    n_orig = min(len(problems), max(1, rows // 5))  # at least ~5 rows per origin
    order = rng.sample(range(len(problems)), n_orig)
    origin = order + [rng.choice(order) for _ in range(rows - n_orig)]
    rng.shuffle(origin)
    per_shard = -(-rows // shards)
    files = [(folder / f"corpus_{k:02d}.jsonl").open("w") for k in range(shards)]
    seen: set[int] = set()
    for i, o in enumerate(origin):
        text = problems[o] if o not in seen else perturb(problems[o], rng)
        seen.add(o)
        rec = {"id": f"r{i}", "origin": o, "problem": text, "answer": answers[o]}
        if tests[o] is not None:
            rec["tests"] = tests[o]
        files[i // per_shard].write(json.dumps(rec, ensure_ascii=False) + "\n")
    for f in files:
        f.close()
    return {"rows": rows, "origins": n_orig}


# --------------------------------------------------------------------------- runners


def run_measured(cmd: list[str]) -> dict[str, float]:
    """Run a command; wall seconds, CPU seconds and peak RSS (GiB) of its process tree.

    CPU seconds (user + system of the command and all its descendants: the larger of the
    reaped-children rusage and the sum of per-process samples, since some pools never reap
    their workers) are the fairer speed measure on a shared machine, where wall time
    depends on the neighbours. Samples every 50 ms, so the last 50 ms of a process may be
    missed.
    """
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.Popen(cmd)
    peak = 0
    cpu: dict[int, float] = {}
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        root = psutil.Process(proc.pid)
        while not done.is_set():
            rss = 0
            for p in [root, *_children(root)]:
                try:
                    rss += p.memory_info().rss
                    times = p.cpu_times()
                    cpu[p.pid] = times.user + times.system
                except psutil.Error:
                    pass
            peak = max(peak, rss)
            time.sleep(0.05)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    rc = proc.wait()
    wall = time.perf_counter() - start
    done.set()
    thread.join()
    if rc:
        raise RuntimeError(f"{cmd[:3]} failed with exit code {rc}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    reaped = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    sampled = sum(cpu.values())
    return {"seconds": wall, "cpu_seconds": max(reaped, sampled), "peak_rss_gib": peak / 2**30}


def _children(root: psutil.Process) -> list[psutil.Process]:
    try:
        return root.children(recursive=True)
    except psutil.Error:
        return []


def ours(corpus: str, out_dir: str, workers: int) -> None:
    """Our pipeline end to end: read jsonl, exact + near dedup, write kept and dropped."""
    from curation.dedup import exact_dedup, near_dedup

    df = pl.read_ndjson(sorted(Path(corpus).glob("*.jsonl")), schema_overrides=SCHEMA)
    exact = exact_dedup(df)
    del df  # free what is no longer needed, as a recipe runner would
    cols = ["id", "origin", "reason", "cluster_id", "duplicate_of"]
    exact_dropped, exact_stats, kept = exact.dropped.select(cols), exact.stats, exact.kept
    del exact
    near = near_dedup(kept, workers=workers)
    del kept
    out = Path(out_dir)
    near.kept.write_ndjson(out / "kept.jsonl")
    dropped = pl.concat([exact_dropped, near.dropped.select(cols)])
    dropped.write_ndjson(out / "dropped.jsonl")
    (out / "stats.json").write_text(json.dumps({"exact": exact_stats, "near": near.stats}))


DATATROVE_SCRIPT = """
import sys
from datatrove.executor import LocalPipelineExecutor
from datatrove.pipeline.dedup.minhash import (MinhashConfig, MinhashDedupBuckets,
    MinhashDedupCluster, MinhashDedupFilter, MinhashDedupSignature)
from datatrove.pipeline.readers import JsonlReader
from datatrove.pipeline.writers import JsonlWriter

def main():
    corpus_dir, work, workers = sys.argv[1], sys.argv[2], int(sys.argv[3])
    config = MinhashConfig(n_grams=5, num_buckets=14, hashes_per_bucket=8)
    reader = lambda: JsonlReader(corpus_dir, text_key="problem", id_key="id")
    kw = dict(tasks=workers, workers=workers, logging_dir=f"{work}/logs", skip_completed=False)
    LocalPipelineExecutor(pipeline=[reader(), MinhashDedupSignature(f"{work}/sigs",
        config=config)], **kw).run()
    LocalPipelineExecutor(pipeline=[MinhashDedupBuckets(f"{work}/sigs", f"{work}/buckets",
        config=config)], **{**kw, "tasks": config.num_buckets}).run()
    LocalPipelineExecutor(pipeline=[MinhashDedupCluster(f"{work}/buckets", f"{work}/remove",
        config=config, save_cluster_id=True)], **{**kw, "tasks": 1, "workers": 1}).run()
    LocalPipelineExecutor(pipeline=[reader(), MinhashDedupFilter(f"{work}/remove",
        exclusion_writer=JsonlWriter(f"{work}/removed"), load_cluster_ids=True),
        JsonlWriter(f"{work}/kept")], **kw).run()


if __name__ == "__main__":  # datatrove starts workers with spawn
    main()
"""


# --------------------------------------------------------------------------- quality


def quality(origin_of: dict[str, int], dropped: dict[str, str], n_origins: int) -> dict:
    """Row-level recall/precision; `dropped` maps a dropped id to the kept id it joined."""
    correct = sum(
        1 for row, kept in dropped.items() if kept is not None and origin_of[row] == origin_of[kept]
    )
    planted = len(origin_of) - n_origins
    return {
        "dropped": len(dropped),
        "planted_duplicates": planted,
        "recall": correct / planted if planted else 1.0,
        "precision": correct / len(dropped) if dropped else 1.0,
    }


def read_jsonl_dir(folder: Path) -> pl.DataFrame:
    files = sorted(folder.rglob("*.jsonl*"))
    frames = [pl.read_ndjson(f) for f in files if f.stat().st_size]
    return pl.concat(frames, how="diagonal_relaxed") if frames else pl.DataFrame()


def datatrove_pairs(work: Path) -> dict[str, str | None]:
    """Dropped id -> the kept id of its datatrove cluster."""
    kept = read_jsonl_dir(work / "kept")
    removed = read_jsonl_dir(work / "removed")
    if removed.height == 0:
        return {}

    def cluster(df: pl.DataFrame) -> pl.DataFrame:
        return df.select(
            "id", pl.col("metadata").struct.field("minhash_cluster_id").alias("cluster")
        )

    rep = cluster(kept).filter(pl.col("cluster") >= 0).rename({"id": "kept_id"})
    joined = cluster(removed).join(rep, on="cluster", how="left")
    return dict(
        zip(joined.get_column("id").to_list(), joined.get_column("kept_id").to_list(), strict=True)
    )


# --------------------------------------------------------------------------- main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--datatrove-python", default=None, help="python with datatrove")
    parser.add_argument("--skip-datatrove", action="store_true")
    parser.add_argument("--work", default=None, help="working directory (default: a temp dir)")
    parser.add_argument("--out", default=None, help="write the results as json here")
    parser.add_argument("--reuse-corpus", action="store_true", help="keep WORK/corpus if built")
    parser.add_argument("--_ours", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args._ours:
        ours(args._ours[0], args._ours[1], args.workers)
        return

    work = Path(args.work or tempfile.mkdtemp(prefix="bench_dedup_"))
    work.mkdir(parents=True, exist_ok=True)
    corpus_dir = work / "corpus"
    corpus_dir.mkdir(exist_ok=True)
    t0 = time.perf_counter()
    shape_file = work / "shape.json"
    if args.reuse_corpus and shape_file.exists():
        shape = json.loads(shape_file.read_text())
    else:
        shape = build_corpus(args.rows, corpus_dir, shards=max(args.workers, 1))
        shape_file.write_text(json.dumps(shape))
    print(f"corpus: {shape} in {time.perf_counter() - t0:.1f}s -> {corpus_dir}", flush=True)
    files = sorted(corpus_dir.glob("*.jsonl"))
    ids = pl.read_ndjson(files, schema_overrides=SCHEMA).select("id", "origin")
    origin_of = dict(
        zip(ids.get_column("id").to_list(), ids.get_column("origin").to_list(), strict=True)
    )
    results: dict[str, object] = {"corpus": shape}

    our_dir = work / "ours"
    our_dir.mkdir(exist_ok=True)
    cmd = [sys.executable, __file__, "--workers", str(args.workers), "--_ours", str(corpus_dir)]
    timing = run_measured([*cmd, str(our_dir)])
    dropped = pl.read_ndjson(our_dir / "dropped.jsonl")
    pairs = dict(
        zip(dropped.get_column("id").to_list(), dropped.get_column("duplicate_of"), strict=True)
    )
    results["ours"] = {
        **timing,
        "rows_per_s": args.rows / timing["seconds"],
        **quality(origin_of, pairs, shape["origins"]),
        "stats": json.loads((our_dir / "stats.json").read_text()),
    }
    print("ours:", json.dumps(results["ours"], default=str), flush=True)

    if not args.skip_datatrove:
        if not args.datatrove_python:
            raise SystemExit("give --datatrove-python (a venv with datatrove) or --skip-datatrove")
        dt_dir = work / "datatrove"
        dt_dir.mkdir(exist_ok=True)
        script = work / "run_datatrove.py"
        script.write_text(DATATROVE_SCRIPT)
        timing = run_measured(
            [args.datatrove_python, str(script), str(corpus_dir), str(dt_dir), str(args.workers)]
        )
        results["datatrove"] = {
            **timing,
            "rows_per_s": args.rows / timing["seconds"],
            **quality(origin_of, datatrove_pairs(dt_dir), shape["origins"]),
        }
        print("datatrove:", json.dumps(results["datatrove"]), flush=True)
        ratio = results["ours"]["rows_per_s"] / results["datatrove"]["rows_per_s"]
        cpu_ratio = results["datatrove"]["cpu_seconds"] / results["ours"]["cpu_seconds"]
        results["speedup"] = ratio
        results["speedup_cpu"] = cpu_ratio
        print(f"speedup ours/datatrove: {ratio:.1f}x wall, {cpu_ratio:.1f}x CPU", flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=2, default=str))


if __name__ == "__main__":
    main()
