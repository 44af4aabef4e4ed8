"""Decontamination benchmark: `curation.decontaminate` against an open-r1-style set scan.

Builds an N-row corpus (default 1M) in-process from the shared math sources (MATH train,
AIME 1983-2023, GSM8K train) replicated with random perturbations (re-spacing, case, a
changed number, a dropped word, an instruction prefix), with planted copies of benchmark
items (verbatim, re-spaced, prefixed, embedded, half-quoted). Then, for each rule, side by
side on the same texts and the same cores:

- baseline: open-r1's `scripts/decontaminate.py` approach (a dict from each benchmark n-gram
  string to its items, each row's n-grams built as Python strings and looked up one by one,
  `multiprocessing` workers), extended to compute exactly our rule (same normalization, short
  items, stock-phrase document frequencies, thresholds) so both drop the same rows;
- ours: `decontaminate(df, benchmarks, rule=..., workers=W)`.

Reports rows/s, the ratio, peak RSS of each phase (ours: the kernel's high-water mark;
baseline: sampled), flags, planted-copy recall, and whether both tools drop exactly the
same rows.

    python bench/decontam.py                 # 1M rows, 2 workers, both rules
    python bench/decontam.py --rows 100000   # smaller
"""

from __future__ import annotations

import os

# Our operator parallelizes over row chunks with its own worker threads; Polars' internal pool
# would add a second set of threads fighting for the same cores (measured on 200K rows, 2
# workers: 2.6 vs 1.7 CPU-s). Must be set before Polars is imported; the baseline does not
# use Polars.
os.environ.setdefault("POLARS_MAX_THREADS", "1")

import sys  # noqa: E402

# `python bench/decontam.py` puts bench/ first on the path, where bench/lake.py would shadow
# the `lake` package; the project root goes there instead.
sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import multiprocessing as mp  # noqa: E402
import random  # noqa: E402
import re  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from collections import Counter, defaultdict  # noqa: E402
from pathlib import Path  # noqa: E402

import polars as pl  # noqa: E402
import psutil  # noqa: E402

from curation.decontaminate import (  # noqa: E402
    DEFAULT_N,
    LAYOUT_COMMANDS,
    decontaminate,
    rule_named,
)
from curation.decontaminate.benchmarks import MATH_RL_DEFAULT, Benchmark, load_benchmarks  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"
PREFIXES = (
    "Solve the following math problem. ",
    "Please reason step by step, and put your final answer within \\boxed{}. ",
    "Problem: ",
    "Answer the question below.\n\n",
)
PLANT_KINDS = ("verbatim", "respaced", "prefixed", "embedded", "half", "perturbed")


# ---------------------------------------------------------------- corpus
def load_sources() -> list[str]:
    """Problems of the shared math sources."""
    texts: list[str] = []
    for name, field in (
        ("math_train.jsonl", "problem"),
        ("aime_1983_2023.jsonl", "problem"),
        ("gsm8k_train.jsonl", "question"),
    ):
        with open(SHARED / "sources" / name, encoding="utf-8") as fh:
            texts.extend(json.loads(line)[field] for line in fh if line.strip())
    return texts


def perturb(text: str, rng: random.Random) -> str:
    """One or two random surface edits of a problem (what real re-postings look like)."""
    for _ in range(rng.randint(1, 2)):
        op = rng.randrange(5)
        if op == 0:
            text = re.sub(r"\s+", lambda m: " " * rng.randint(1, 2), text)
        elif op == 1:
            text = text.lower() if rng.random() < 0.5 else text.upper()
        elif op == 2:
            text = re.sub(r"\d+", lambda m: str(int(m.group()) + rng.randint(1, 9)), text, count=1)
        elif op == 3:
            words = text.split(" ")
            if len(words) > 4:
                del words[rng.randrange(len(words))]
            text = " ".join(words)
        else:
            text = rng.choice(PREFIXES) + text
    return text


def plant(item: str, kind: str, filler: str, rng: random.Random) -> str:
    """A copy of a benchmark item of the given kind."""
    if kind == "verbatim":
        return item
    if kind == "respaced":
        return re.sub(r"\s+", "  ", item).replace("$", " $ ")
    if kind == "prefixed":
        return rng.choice(PREFIXES) + item
    if kind == "embedded":
        return f"{filler}\n\nAlso consider this one: {item}\n\nExplain your reasoning."
    if kind == "perturbed":
        return perturb(item, rng)
    words = item.split()
    return filler + " " + " ".join(words[: (len(words) + 1) // 2])


def build_corpus(
    rows: int, benchmarks: list[Benchmark], plant_every: int, seed: int = 0
) -> tuple[list[str], dict[int, str]]:
    """`rows` texts; returns them and {row: plant kind} for planted benchmark copies.

    Half-quoted copies are planted only from items of 40+ words, whose half is long enough
    to be a copy rather than an opening phrase.
    """
    rng = random.Random(seed)
    sources = load_sources()
    items = [t for b in benchmarks for t in b.texts]
    long_items = [t for t in items if len(t.split()) >= 40]
    texts: list[str] = []
    planted: dict[int, str] = {}
    for row in range(rows):
        if plant_every and row % plant_every == plant_every - 1:
            kind = PLANT_KINDS[(row // plant_every) % len(PLANT_KINDS)]
            pool = long_items if kind == "half" else items
            texts.append(plant(rng.choice(pool), kind, rng.choice(sources), rng))
            planted[row] = kind
        else:
            texts.append(perturb(rng.choice(sources), rng))
    return texts, planted


# ---------------------------------------------------------------- baseline (open-r1 style)
# Python `re` spelling of curation.decontaminate's normalization (same tokens): lower-case,
# skip figure code, join thousands groups, drop layout commands, fold display variants.
_PY_FIGURE = re.compile(r"(?s:\[asy\].*?\[/asy\])")
_PY_THOUSANDS = re.compile(r"(?<=[0-9]),(?:\\!)?(?=[0-9]{3}(?![^\W_]))")
_PY_LAYOUT = re.compile(r"\\(?:" + "|".join(LAYOUT_COMMANDS) + r")(?![^\W_])")
_PY_FOLDED = re.compile(r"\\[dt](frac|binom)(?![^\W_])")
_PY_TOKEN = re.compile(r"[^\W_]+")


def py_tokens(text: str) -> list[str]:
    text = _PY_THOUSANDS.sub("", _PY_FIGURE.sub(" ", text.lower()))
    return _PY_TOKEN.findall(_PY_FOLDED.sub(r"\\\1", _PY_LAYOUT.sub(" ", text)))


_LOOKUP: dict[str, set[int]] = {}
_SHORT: dict[str, set[int]] = {}
_EDGES: list[tuple[str, str]] = []  # per item: its first and last n-gram (end quotes)
_ITEM_TOKENS: list[int] = []
_SHORT_RE: re.Pattern[str] | None = None
_N = DEFAULT_N


def build_lookup(items: list[str], n: int) -> None:
    """open-r1's `build_ngram_lookup`: n-gram string -> set of item ids (+ whole short items)."""
    global _SHORT_RE
    _LOOKUP.clear()
    _SHORT.clear()
    _EDGES.clear()
    _ITEM_TOKENS.clear()
    for item_id, text in enumerate(items):
        words = py_tokens(text)
        _ITEM_TOKENS.append(len(words))
        _EDGES.append((" ".join(words[:n]), " ".join(words[-n:])))
        if 0 < len(words) < n:
            _SHORT.setdefault(" ".join(words), set()).add(item_id)
        for i in range(len(words) - n + 1):
            _LOOKUP.setdefault(" ".join(words[i : i + n]), set()).add(item_id)
    if _SHORT:
        alternatives = "|".join(re.escape(s) for s in sorted(_SHORT, key=len, reverse=True))
        _SHORT_RE = re.compile(rf"(?<!\S)(?:{alternatives})(?!\S)")


def baseline_chunk(texts: list[str]) -> list[list[tuple[int, str, int]]]:
    """Per row: every (item, ngram, start) shared with a benchmark (open-r1's per-row scan)."""
    out = []
    n = _N
    for text in texts:
        words = py_tokens(text)
        found = []
        for i in range(len(words) - n + 1):
            gram = " ".join(words[i : i + n])
            items = _LOOKUP.get(gram)
            if items:
                found.extend((item, gram, i) for item in items)
        if _SHORT_RE is not None:
            joined = " ".join(words)
            for m in _SHORT_RE.finditer(joined):
                found.extend((item, m.group(), -1) for item in _SHORT[m.group()])
        out.append(found)
    return out


def baseline(
    texts: list[str],
    items: list[str],
    item_benchmark: list[str],
    n: int,
    rule_name: str,
    workers: int,
) -> set[int]:
    """Rows the baseline drops under `rule_name` (same decision as curation.decontaminate).

    An n-gram's document frequency is the number of distinct input texts holding it (rows
    that are partial copies left out) plus the number of benchmarks holding it.
    """
    global _N
    _N = n
    build_lookup(items, n)
    rule = rule_named(rule_name)
    size = max(1, len(texts) // (workers * 8))
    chunks = [texts[i : i + size] for i in range(0, len(texts), size)]
    if workers > 1:
        with mp.get_context("fork").Pool(workers) as pool:
            parts = pool.map(baseline_chunk, chunks)
    else:
        parts = [baseline_chunk(c) for c in chunks]
    hits_by_row = {
        row: found for row, found in enumerate(f for part in parts for f in part) if found
    }
    item_grams: Counter[int] = Counter()
    bench_df: Counter[str] = Counter()
    for gram, ids in _LOOKUP.items():
        bench_df[gram] += len({item_benchmark[i] for i in ids})
        for item in ids:
            item_grams[item] += 1
    for gram, ids in _SHORT.items():
        bench_df[gram] += len({item_benchmark[i] for i in ids})
        for item in ids:
            item_grams[item] += 1
    pairs: dict[tuple[int, int], set[str]] = defaultdict(set)
    for row, found in hits_by_row.items():
        for item, gram, _ in found:
            pairs[(row, item)].add(gram)
    coverage = {key: len(grams) / item_grams[key[1]] for key, grams in pairs.items()}
    stock: set[str] = set()
    if rule.ignore_stock:
        copies = {
            row
            for key, cov in coverage.items()
            if cov >= rule.copy_coverage or len(pairs[key]) >= (rule.copy_hits or 2**62)
            for row in [key[0]]
        }
        seen: dict[str, set[str]] = defaultdict(set)
        for (row, _), grams in pairs.items():
            if row not in copies:
                for gram in grams:
                    seen[gram].add(texts[row])
        stock = {g for g, rows in seen.items() if len(rows) + bench_df[g] >= rule.min_df}
        stock |= {g for g in bench_df if bench_df[g] >= rule.min_df}
        stock |= {g for g in bench_df if re.fullmatch(r"[0-9 ]+", g)}  # lists of numbers
    dropped = set()
    for (row, item), grams in pairs.items():
        hits = len(grams - stock) if rule.ignore_stock else len(grams)
        cov = coverage[(row, item)]
        needed = rule.min_hits
        tokens = _ITEM_TOKENS[item]
        if rule.quote_share is not None and tokens >= 2 * n and grams & set(_EDGES[item]):
            quote = math.floor(rule.quote_share * tokens) - n + 1  # an end quote's n-grams
            needed = min(max(quote, 1), needed)
        if hits >= needed or (rule.min_coverage is not None and cov >= rule.min_coverage):
            dropped.add(row)
    return dropped


# ---------------------------------------------------------------- measurement
class PeakRss:
    """Peak RSS of this process tree in bytes (`.peak`), sampled every 100 ms by a thread.

    For the baseline, whose work runs in worker processes. The thread competes with
    in-process worker threads for the GIL, so ours is measured with `PeakRssExact`.
    """

    def __init__(self) -> None:
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        proc = psutil.Process()
        while not self._stop.is_set():
            try:
                total = proc.memory_info().rss + sum(
                    c.memory_info().rss for c in proc.children(recursive=True)
                )
            except psutil.Error:
                total = 0
            self.peak = max(self.peak, total)
            time.sleep(0.1)

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


class PeakRssExact:
    """This process's peak RSS in bytes (`.peak`), from the kernel's high-water mark (VmHWM),
    reset on entry through /proc/self/clear_refs: exact, and no sampling thread."""

    def __enter__(self) -> PeakRssExact:
        Path("/proc/self/clear_refs").write_text("5")
        self.peak = 0
        return self

    def __exit__(self, *exc: object) -> None:
        status = Path("/proc/self/status").read_text()
        self.peak = int(re.search(r"VmHWM:\s+(\d+) kB", status).group(1)) * 1024  # type: ignore[union-attr]


def cpu_seconds() -> float:
    """User + system CPU time of this process and its reaped children."""
    times = psutil.Process().cpu_times()
    return times.user + times.system + times.children_user + times.children_system


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--n", type=int, default=DEFAULT_N)
    parser.add_argument("--rules", default="literal,boilerplate-aware")
    parser.add_argument("--plant-every", type=int, default=1000, help="one planted copy per K rows")
    parser.add_argument("--skip-baseline", action="store_true")
    args = parser.parse_args()

    benchmarks = load_benchmarks(list(MATH_RL_DEFAULT), local_dir=SHARED / "benchmarks")
    items = [t for b in benchmarks for t in b.texts]
    item_benchmark = [b.name for b in benchmarks for _ in b.texts]
    t0 = time.perf_counter()
    texts, planted = build_corpus(args.rows, benchmarks, args.plant_every)
    df = pl.DataFrame({"row": range(len(texts)), "problem": texts})
    print(
        f"corpus: {len(texts):,} rows ({sum(map(len, texts)) / 1e6:.0f} MB text, "
        f"{len(planted)} planted copies) built in {time.perf_counter() - t0:.1f}s; "
        f"benchmarks: {', '.join(f'{b.name}({len(b)})' for b in benchmarks)}",
        flush=True,
    )
    base_rss = psutil.Process().memory_info().rss
    print(
        f"process RSS with corpus loaded: {base_rss / 2**30:.2f} GiB; workers {args.workers}; "
        f"POLARS_MAX_THREADS={os.environ['POLARS_MAX_THREADS']}",
        flush=True,
    )
    for rule in args.rules.split(","):
        with PeakRssExact() as ours_mem:
            t0, c0 = time.perf_counter(), cpu_seconds()
            result = decontaminate(df, benchmarks, n=args.n, rule=rule, workers=args.workers)
            ours_s, ours_cpu = time.perf_counter() - t0, cpu_seconds() - c0
        # the process's first call also pays one-time costs (loading Numba and its compiled
        # loops, ~0.7 s; growing the heap): report it, then a second call
        t0 = time.perf_counter()
        decontaminate(df, benchmarks, n=args.n, rule=rule, workers=args.workers)
        again_s = time.perf_counter() - t0
        dropped_rows = set(result.dropped["row"].to_list())
        recall = {
            kind: sum(1 for r, k in planted.items() if k == kind and r in dropped_rows)
            / max(1, sum(1 for k in planted.values() if k == kind))
            for kind in PLANT_KINDS
        }
        line = (
            f"[{rule}] ours: {ours_s:.2f}s = {len(texts) / ours_s:,.0f} rows/s "
            f"(CPU {ours_cpu:.1f}s), "
            f"peak RSS {ours_mem.peak / 2**30:.2f} GiB, dropped {result.dropped.height:,} "
            f"({result.dropped.height / len(texts):.2%}); planted recall "
            + " ".join(f"{k}={v:.2f}" for k, v in recall.items())
        )
        print(line, flush=True)
        if args.skip_baseline:
            continue
        with PeakRss() as base_mem:
            t0, c0 = time.perf_counter(), cpu_seconds()
            base_dropped = baseline(texts, items, item_benchmark, args.n, rule, args.workers)
            base_s, base_cpu = time.perf_counter() - t0, cpu_seconds() - c0
        print(
            f"[{rule}] baseline: {base_s:.2f}s = {len(texts) / base_s:,.0f} rows/s "
            f"(CPU {base_cpu:.1f}s), "
            f"peak RSS {base_mem.peak / 2**30:.2f} GiB, dropped {len(base_dropped):,}; "
            f"speedup {base_s / ours_s:.1f}x wall, {base_cpu / ours_cpu:.1f}x CPU "
            f"(ours' second call: {again_s:.2f}s, {base_s / again_s:.1f}x wall); "
            f"same rows dropped: {base_dropped == dropped_rows} "
            f"(only baseline {len(base_dropped - dropped_rows)}, "
            f"only ours {len(dropped_rows - base_dropped)})",
            flush=True,
        )


if __name__ == "__main__":
    main()
