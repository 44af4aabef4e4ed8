"""code_sft: competitive-programming SFT data (Cascade 2's code SFT).

Following the Cascade recipe's code SFT data section: keep training problems released on or
before the competitive-coding cutoff (evaluation uses the problems after it); drop problems
that share a word 9-gram with a benchmark item, that link to an evaluation problem's URL, or
whose tests are a benchmark item's tests; deduplicate the prompts by their tests' I/O
cases joined with n-gram text analysis (Cascade 2 removed ~24% this way), then by text
among problems whose tests do not tell them apart; sample the teacher's thinking traces;
keep only traces whose code passes the problem's tests (the longer traces for problems
without tests); and drop renamed copies of one program among a prompt's traces.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import polars as pl

from builders.cleaning import decontamination, exact_dedup_step, near_dedup_step
from builders.runner import Build, BuildError
from curation.code.behaviour_dedup import decontaminate_by_behaviour, dedup_by_behaviour
from curation.code.benchmark_tests import load_code_benchmarks, tests_benchmark
from curation.code.correctness import filter_by_correctness
from curation.code.fields import lift_fields
from curation.code.problem_ids import (
    benchmark_key_frame,
    decontaminate_by_problem_id,
    load_url_list,
)
from curation.code.release_cutoff import drop_after_cutoff
from curation.code.syntax_dedup import dedup_by_syntax
from curation.generate.samples import Sampler, sample_responses
from lake.steps import Step

NAME = "code_sft"
DOMAIN = "code"
DEFAULTS: dict[str, Any] = {
    # decontamination: word 9-grams, original problem URLs, benchmark tests
    "benchmarks": ["humaneval", "leetcode", "codeforces", "code_contests"],
    "benchmark_dir": "",
    "ngram": 9,
    "decontam_rule": "boilerplate-aware",
    "behaviour_benchmark_files": [
        "leetcode_test.jsonl",
        "codeforces_test.jsonl",
        "code_contests_test.jsonl",
        "humaneval.jsonl",
    ],
    "benchmark_url_file": "",
    "url_field": "url",
    # the competitive-coding cutoff (Aug 2024): later problems belong to evaluation
    "cutoff": "2024-08-01",
    "release_date_field": "release_date",
    "undated": "keep",
    # dedup by behaviour: same tests = same task, joined with text similarity
    "min_io_jaccard": 0.75,
    "min_specific_chars": 40,
    "min_io_containment": 0.75,
    "min_text_similarity": 0.8,
    "near_dup_threshold": 0.6,
    # teacher traces (Cascade 2: GPT-OSS-120B, thinking)
    "teacher": "openai/gpt-oss-120b",
    "backend": "vllm",
    "backend_options": {},
    "mode": "think",
    "k": 8,
    "max_new_tokens": 32768,
    "temperature": 1.0,
    "top_p": 1.0,
    "seed": 0,
    "generations_table": "code_sft_generations",
    # correctness filtering
    "untested_keep": 0.5,
    "on_error": "raise",
}


def steps(params: dict[str, Any], build: Build) -> list[Step]:
    """The recipe, top to bottom."""
    return [
        *problem_cleaning(params, build),
        Step(
            "teacher_traces",
            teacher_sampler(params, build, prompt_column="problem"),
            scope="rows",
            fan_out=True,
        ),
        Step(
            "correctness",
            filter_by_correctness,
            {"untested_keep": params["untested_keep"]},
            partition="prompt_id",
        ),
        Step("syntax_dedup", dedup_by_syntax, {"id_column": "uid"}, partition="prompt_id"),
    ]


def problem_cleaning(params: dict[str, Any], build: Build) -> list[Step]:
    """Code problems as both code recipes clean them: the cutoff, decontamination by 9-grams,
    problem URL and benchmark tests, then dedup by text and by behaviour."""
    benchmarks = build.load_benchmarks(params["benchmarks"], params["benchmark_dir"])
    behaviour = _behaviour_benchmarks(params, build)
    thresholds = {
        k: params[k]
        for k in (
            "min_io_jaccard",
            "min_specific_chars",
            "min_io_containment",
            "min_text_similarity",
        )
    }
    return [
        Step(
            "lift_fields",
            lift_fields,
            {"fields": ["tests", params["url_field"], params["release_date_field"]]},
            scope="rows",
        ),
        Step(
            "release_cutoff",
            drop_after_cutoff,
            {
                "cutoff": params["cutoff"],
                "date_field": params["release_date_field"],
                "undated": params["undated"],
            },
            scope="rows",
        ),
        decontamination(params, benchmarks),
        Step(
            "decontaminate_urls",
            decontaminate_by_problem_id,
            {"benchmarks": _benchmark_urls(params, build), "url_field": params["url_field"]},
            scope="rows",
        ),
        Step(
            "decontaminate_behaviour",
            decontaminate_by_behaviour,
            {"benchmarks": behaviour, "id_column": "uid", **thresholds},
            scope="rows",
        ),
        exact_dedup_step(),
        Step(
            "behaviour_dedup",
            dedup_by_behaviour,
            {"id_column": "uid", **thresholds},
            partition="io_cases",
        ),
        near_dedup_step(params),
    ]


def teacher_sampler(
    params: dict[str, Any],
    build: Build,
    *,
    prompt_column: str,
    id_column: str = "id",
    k: int | None = None,
) -> functools.partial:
    """`sample_responses` with the teacher's parameters bound (one row per trace)."""
    sampler = Sampler(
        model=params["teacher"],
        backend=params["backend"],
        backend_options=params["backend_options"] or {},
        mode=params["mode"],
        k=k or params["k"],
        max_new_tokens=params["max_new_tokens"],
        temperature=params["temperature"],
        top_p=params["top_p"],
        seed=params["seed"],
    )
    return functools.partial(
        sample_responses,
        lake=build.lake,
        sampler=sampler,
        table=params["generations_table"],
        backend_factory=params.get("backend_factory"),
        prompt_column=prompt_column,
        id_column=id_column,
    )


def _benchmark_dir(params: dict[str, Any]) -> Path | None:
    where = params["benchmark_dir"]
    if where and not Path(where).is_dir():
        raise BuildError(f"benchmark_dir {where}: no such directory")
    return Path(where) if where else None


def _behaviour_benchmarks(params: dict[str, Any], build: Build) -> pl.DataFrame | list[str]:
    """Benchmark items with their tests, from `behaviour_benchmark_files` in benchmark_dir
    (recorded for the manifest, one set per file)."""
    files = list(params["behaviour_benchmark_files"])
    if build.dry_run:
        return files
    where = _benchmark_dir(params) or Path(".")
    paths = [where / f for f in files]
    try:
        items = load_code_benchmarks(paths)
    except (FileNotFoundError, ValueError) as exc:
        raise BuildError(f"cannot load code benchmarks {files}: {exc}") from None
    by_file = [
        tests_benchmark(items.filter(pl.col("benchmark") == p.name.removesuffix(".jsonl")), p)
        for p in paths
    ]
    build.record_benchmarks(by_file, kind="tests")
    return items


def _benchmark_urls(params: dict[str, Any], build: Build) -> pl.DataFrame | str:
    """Evaluation problem URLs, one per line in `benchmark_url_file` (none when empty;
    recorded for the manifest)."""
    path = params["benchmark_url_file"]
    if build.dry_run:
        return path
    if not path:
        return benchmark_key_frame("none", [])
    try:
        urls = load_url_list(path)
    except OSError as exc:
        raise BuildError(f"benchmark_url_file {path}: {exc.strerror}") from None
    build.record_benchmarks([urls], kind="urls")
    return benchmark_key_frame(urls.name, urls.ids)


def toy_profile(workdir: Path) -> tuple[list[str], dict[str, Any]]:
    """The toy world: tiny-function problems with tests, the strong toy coder as teacher, a
    toy benchmark (with two SFT problems copied in) and its URL list for decontamination."""
    from builders.worlds.toy_profile import code_benchmark_dir, code_rows, toy_file, toy_models

    strong = toy_models(workdir, "code")["strong"]
    bench = code_benchmark_dir(workdir)
    return [toy_file(workdir, "code_sft", code_rows("sft"))], {
        **strong.flat(k=4, max_new_tokens=96, temperature=0.6),
        "benchmarks": [str(bench / "toy_code_bench.jsonl")],
        "benchmark_dir": str(bench),
        "behaviour_benchmark_files": ["toy_code_bench.jsonl"],
        "benchmark_url_file": str(bench / "urls.txt"),
        "generations_table": "code_sft_generations",
    }


PROFILES = {"toy": toy_profile}
