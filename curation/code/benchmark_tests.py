"""Code benchmark items with their tests, for behaviour decontamination.

`curation.decontaminate.benchmarks` loads a benchmark's texts for n-gram decontamination;
behaviour decontamination also needs each item's tests. The shared benchmark files differ in shape:
LeetCode has `problem` and `tests: {functional}`, Codeforces `tests: [{input, output}]`,
CodeContests `tests: {inputs, outputs}` (or that dict as a Python literal string), HumanEval
`prompt`, `test` and `entry_point`. Items without an id field are named by their 0-based
line position, as `curation.decontaminate.benchmarks` does.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import polars as pl

from curation.decontaminate.benchmarks import Benchmark
from lake.files import json_lines

ID_FIELDS = ("task_id", "id", "unique_id", "question_id", "name")


def load_code_benchmark(path: str | Path, name: str | None = None) -> pl.DataFrame:
    """One benchmark file as `benchmark`, `benchmark_id`, `problem`, `tests` (JSON text).

    ValueError names the file and line of an item without a statement or tests.
    """
    path = Path(path)
    name = name or path.name.removesuffix(".jsonl")
    rows = []
    for position, (line, record) in enumerate(json_lines(path)):
        text = record.get("problem") or record.get("prompt") or record.get("question")
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f"{path}:{line}: no problem / prompt / question text")
        if "tests" in record:
            tests = record["tests"]
        elif "test" in record and "entry_point" in record:
            tests = {"test": record["test"], "entry_point": record["entry_point"]}
        else:
            raise ValueError(
                f"{path}:{line}: no tests (expected 'tests' or 'test' + 'entry_point')"
            )
        item_id = next((record[f] for f in ID_FIELDS if record.get(f) is not None), position)
        rows.append(
            {
                "benchmark": name,
                "benchmark_id": str(item_id),
                "problem": text,
                "tests": tests if isinstance(tests, str) else json.dumps(tests),
            }
        )
    return pl.DataFrame(
        rows,
        schema={
            "benchmark": pl.String,
            "benchmark_id": pl.String,
            "problem": pl.String,
            "tests": pl.String,
        },
    )


def load_code_benchmarks(paths: Sequence[str | Path]) -> pl.DataFrame:
    """Several benchmark files, one frame (each named after its file)."""
    frames = [load_code_benchmark(p) for p in paths]
    if not frames:
        raise ValueError("no code benchmark files given")
    return pl.concat(frames)


def tests_benchmark(items: pl.DataFrame, origin: str | Path) -> Benchmark:
    """One file's items (`load_code_benchmark`) as a `Benchmark`, for a manifest and a
    report: each item's text is its statement and its tests, what behaviour
    decontamination compares."""
    texts = [f"{problem}\n\n{tests}" for problem, tests in items.select("problem", "tests").rows()]
    return Benchmark(
        Path(origin).name.removesuffix(".jsonl"),
        items.get_column("benchmark_id").to_list(),
        texts,
        origin=str(origin),
        domain="code",
    )
