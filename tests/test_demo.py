"""The demo corpus generator: determinism, labels, counts and the properties it promises.

End-to-end checks (the recipe drops every planted case and no clean row) belong to the
recipe's tests; here each planted case is checked against what defines it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import polars as pl
import pytest

from builders.worlds.demo_corpus import (
    CONTAMINATION_COUNTS,
    DEMO_CASES,
    DUPLICATE_COUNTS,
    FILTER_CASES,
    MAX_CLEAN_JACCARD,
    NEAR_DUP_EDITS,
    SEED,
    write_demo_corpus,
)
from curation.ingest import read_chunks, to_prompts
from curation.math.filters import answer_parse_error, filter_math_rl_prompts
from curation.prompt_ids import prompt_ids

FIELDS = ["id", "problem", "answer", "demo_case", "demo_of", "demo_edit"]


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def shingles(text: str) -> set[str]:
    """Character 5-grams of lower-cased, whitespace-collapsed text (independent of demo.py)."""
    flat = " ".join(text.lower().split())
    return {flat[i : i + 5] for i in range(len(flat) - 4)}


def jaccard(a: set[str], b: set[str]) -> float:
    return len(a & b) / len(a | b)


def grams9(text: str) -> set[tuple[str, ...]]:
    words = re.findall(r"[a-z0-9]+", text.lower())
    return {tuple(words[i : i + 9]) for i in range(len(words) - 8)}


def numbers(text: str) -> list[str]:
    return re.findall(r"\d+", text)


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> tuple[list[dict], list[dict], object]:
    paths = write_demo_corpus(tmp_path_factory.mktemp("demo"))
    return read_jsonl(paths.sources[0]), read_jsonl(paths.benchmark), paths


def by_case(corpus: list[dict], case: str) -> list[dict]:
    return [row for row in corpus if row["demo_case"] == case]


def test_output_is_byte_identical_across_runs_and_seed_dependent(tmp_path, demo):
    _, _, first = demo
    second = write_demo_corpus(tmp_path / "again")
    other = write_demo_corpus(tmp_path / "other", seed=SEED + 1)
    assert first.sources[0].read_bytes() == second.sources[0].read_bytes()
    assert first.benchmark.read_bytes() == second.benchmark.read_bytes()
    assert first.sources[0].read_bytes() != other.sources[0].read_bytes()
    assert first.benchmark_dir == first.benchmark.parent
    assert first.sources[0].parent != first.benchmark_dir  # a benchmark dir holds only tests


def test_output_does_not_depend_on_the_hash_seed(tmp_path, demo):
    _, _, first = demo
    script = (
        "import sys; from builders.worlds.demo_corpus import write_demo_corpus; "
        "print(write_demo_corpus(sys.argv[1]).sources[0])"
    )
    root = Path(__file__).resolve().parents[1]
    for seed in ("1", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run(
            [sys.executable, "-c", script, str(tmp_path / seed)],
            env=env,
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
        )
        written = Path(out.stdout.strip()).read_bytes()
        assert (
            hashlib.sha256(written).digest()
            == hashlib.sha256(first.sources[0].read_bytes()).digest()
        )


def test_every_row_has_fields_and_a_known_label(demo):
    corpus, bench, _ = demo
    assert 500 <= len(corpus) <= 1000
    assert all(list(row) == FIELDS for row in corpus)
    assert [row["id"] for row in corpus] == [f"demo-{i:04d}" for i in range(1, len(corpus) + 1)]
    counts = Counter(row["demo_case"] for row in corpus)
    assert set(counts) == set(DEMO_CASES)
    assert counts["clean"] >= 300
    for case, n in {**CONTAMINATION_COUNTS, **DUPLICATE_COUNTS}.items():
        assert counts[case] == n
    for case in FILTER_CASES:
        assert counts[case] >= 10
    assert all(row["problem"].strip() for row in corpus)


def test_benchmark_looks_like_a_test_set(demo):
    _, bench, _ = demo
    assert 20 <= len(bench) <= 40
    assert all(list(item) == ["id", "problem", "answer"] for item in bench)
    assert len({item["id"] for item in bench}) == len(bench)
    assert all(answer_parse_error(item["answer"]) is None for item in bench)
    grams = [grams9(item["problem"]) for item in bench]
    assert all(grams)  # every item is long enough for 9-gram matching
    for i in range(len(grams)):
        for j in range(i):
            assert not grams[i] & grams[j], (bench[i]["id"], bench[j]["id"])


def test_clean_rows_are_distinct_problems_with_parseable_answers(demo):
    corpus, bench, _ = demo
    clean = by_case(corpus, "clean")
    sets = [shingles(row["problem"]) for row in clean]
    worst = max(jaccard(sets[i], sets[j]) for i in range(len(sets)) for j in range(i))
    assert worst < MAX_CLEAN_JACCARD  # the generator checks pairs within a template only
    assert len({row["problem"] for row in clean}) == len(clean)
    assert all(answer_parse_error(row["answer"]) is None for row in clean)
    bench_grams = set().union(*(grams9(item["problem"]) for item in bench))
    assert not any(grams9(row["problem"]) & bench_grams for row in clean)


def test_copies_point_at_earlier_clean_originals(demo):
    corpus, _, _ = demo
    position = {row["id"]: i for i, row in enumerate(corpus)}
    rows = {row["id"]: row for row in corpus}
    for case in ("exact_dup", "near_dup", "sibling"):
        for row in by_case(corpus, case):
            original = rows[row["demo_of"]]
            assert original["demo_case"] == "clean"
            assert position[original["id"]] < position[row["id"]]


def test_exact_and_near_duplicates_keep_answer_and_numbers(demo):
    corpus, _, _ = demo
    rows = {row["id"]: row for row in corpus}
    for row in by_case(corpus, "exact_dup"):
        original = rows[row["demo_of"]]
        assert (row["problem"], row["answer"]) == (original["problem"], original["answer"])
    edits = Counter()
    for row in by_case(corpus, "near_dup"):
        original = rows[row["demo_of"]]
        edits[row["demo_edit"]] += 1
        assert row["problem"] != original["problem"]
        assert row["answer"] == original["answer"]
        assert numbers(row["problem"]) == numbers(original["problem"])
        assert jaccard(shingles(row["problem"]), shingles(original["problem"])) >= 0.8
        same_id = prompt_ids(pl.Series([row["problem"], original["problem"]])).n_unique() == 1
        assert same_id == (row["demo_edit"] == "respace_case"), row
    assert set(edits) == set(NEAR_DUP_EDITS)


def test_siblings_are_similar_texts_with_other_answers(demo):
    corpus, _, _ = demo
    rows = {row["id"]: row for row in corpus}
    for row in by_case(corpus, "sibling"):
        original = rows[row["demo_of"]]
        assert row["answer"] != original["answer"]
        assert numbers(row["problem"]) != numbers(original["problem"])
        assert jaccard(shingles(row["problem"]), shingles(original["problem"])) > 0.4


def test_contaminated_rows_copy_benchmark_items(demo):
    corpus, bench, _ = demo
    items = {item["id"]: item for item in bench}
    used = [row["demo_of"] for case in CONTAMINATION_COUNTS for row in by_case(corpus, case)]
    assert len(set(used)) == len(used)  # each copies a different item
    for case in CONTAMINATION_COUNTS:
        for row in by_case(corpus, case):
            item = items[row["demo_of"]]
            assert row["answer"] == item["answer"]
            shared = grams9(row["problem"]) & grams9(item["problem"])
            if case == "contaminated_verbatim":
                assert row["problem"] == item["problem"]
            elif case == "contaminated_half":
                assert 0.3 <= len(shared) / len(grams9(item["problem"])) < 0.9
            else:
                assert row["problem"] != item["problem"]
                assert shared == grams9(item["problem"])  # every 9-gram survives
    respaced = by_case(corpus, "contaminated_respaced")
    assert all("  " in row["problem"] or "$ " in row["problem"] for row in respaced)


def test_rule_filters_drop_exactly_the_planted_filter_cases(demo):
    corpus, _, _ = demo
    df = pl.DataFrame(corpus, schema={field: pl.String for field in FIELDS})
    result = filter_math_rl_prompts(df)
    dropped = result.dropped
    assert set(dropped["demo_case"]) == set(FILTER_CASES)
    assert dropped.height == sum(1 for row in corpus if row["demo_case"] in FILTER_CASES)
    for row in dropped.iter_rows(named=True):
        assert row["flagged_by"] == [row["demo_case"]], row


def test_corpus_ingests_with_labels_in_metadata(demo):
    _, _, paths = demo
    path = str(paths.sources[0])
    frames = [
        to_prompts(chunk, path=path, source="demo_math", domain="math", mapping={})
        for chunk in read_chunks(path)
    ]
    prompts = pl.concat(frames)
    assert prompts["source_id"].to_list()[:2] == ["demo-0001", "demo-0002"]
    labels = [json.loads(m)["demo_case"] for m in prompts["metadata"]]
    assert Counter(labels) == Counter(row["demo_case"] for row in read_jsonl(paths.sources[0]))
