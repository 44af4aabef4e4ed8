"""Adding a recipe is one module plus its test; this file is both, for a toy recipe.

`tiny_math`: math prompts with the rule filters a rule verifier needs (no multiple choice,
a reference answer), then the cleaning block every recipe shares (decontaminate against the
benchmarks, exact and near dedup). A recipe is `NAME`, `DOMAIN`, `DEFAULTS` (its named
parameters, which `--set key=value` overrides) and `steps(params, build)`, the step list
top to bottom; listing the module in `builders.recipes.RECIPES` makes it
`cascade build dataset tiny_math`. The test builds it on six rows into a temporary lake.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import polars as pl

from builders.cleaning import cleaning
from builders.runner import Build, build_dataset
from curation.math.filters import filter_math_rl_prompts
from lake import Lake, Step

# ------------------------------------------------------------ the recipe: one module -------

NAME = "tiny_math"
DOMAIN = "math"
DEFAULTS: dict[str, Any] = {
    "rules": ["multiple_choice", "missing_answer"],
    "benchmarks": ["math500"],
    "benchmark_dir": "",
    "ngram": 9,
    "decontam_rule": "literal",
    "near_dup_threshold": 0.6,
    "num_perm": 112,
}


def steps(params: dict[str, Any], build: Build) -> list[Step]:
    """The recipe, top to bottom."""
    return [
        Step("rule_filters", filter_math_rl_prompts, {"rules": params["rules"]}, scope="rows"),
        *cleaning(params, build),
    ]


# ------------------------------------------------------------ its test ---------------------

BENCHMARK = "A train leaves the station at noon and travels sixty miles per hour; how far has it gone by three?"
SOURCES = [
    {"id": "s1", "problem": "What is the sum of the first ten positive integers?", "answer": "55"},
    {"id": "s2", "problem": "How many edges does a cube have in total?", "answer": "12"},
    {"id": "s3", "problem": "Which is prime? (A) 4 (B) 6 (C) 7 (D) 9", "answer": "C"},
    {"id": "s4", "problem": "Find the area of a square whose side is seven.", "answer": None},
    {"id": "s5", "problem": BENCHMARK, "answer": "180"},
    {"id": "s6", "problem": "What is the sum of the first ten positive integers?", "answer": "55"},
]


def test_the_recipe_builds_into_a_lake_with_its_funnel_and_manifest(tmp_path: Path) -> None:
    source = tmp_path / "tiny.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in SOURCES))
    bench = tmp_path / "tiny_bench.jsonl"
    bench.write_text(json.dumps({"id": "b1", "problem": BENCHMARK, "answer": "180"}) + "\n")
    lake = Lake(tmp_path / "lake")

    report = build_dataset(
        lake,
        sys.modules[__name__],  # this module is the recipe
        sources=[str(source)],
        overrides={"benchmarks": [str(bench)]},
        manifests_dir=tmp_path / "manifests",
        write_html_report=False,
    )

    manifest = report.manifest
    assert manifest.output.ref == "tiny_math@1" and manifest.output.rows == 2
    kept = pl.from_arrow(lake.read("tiny_math")).get_column("source_id").to_list()
    assert sorted(kept) == ["s1", "s2"]
    assert [(f.step, f.rows_in, f.rows_out, f.dropped) for f in manifest.funnel] == [
        ("rule_filters", 6, 4, {"missing_answer": 1, "multiple_choice": 1}),
        ("decontaminate", 4, 3, {"contaminated": 1}),
        ("exact_dedup", 3, 2, {"exact_duplicate": 1}),
        ("near_dedup", 2, 2, {}),
    ]
    assert [(b.name, b.items) for b in manifest.benchmarks] == [("tiny_bench", 1)]
    drops = lake.sql(
        "SELECT step, reason FROM drops WHERE output_table = 'tiny_math' ORDER BY step, reason"
    ).fetchall()
    assert drops == [
        ("decontaminate", "contaminated"),
        ("exact_dedup", "exact_duplicate"),
        ("rule_filters", "missing_answer"),
        ("rule_filters", "multiple_choice"),
    ]
    assert report.manifest_path == tmp_path / "manifests" / "datasets" / "tiny_math" / "v1.json"
