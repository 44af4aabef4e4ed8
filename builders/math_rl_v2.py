"""math_rl_v2: prompts for the Math RL stage.

Following the Cascade recipe's Math RL data section: competition math prompts whose answers
a rule verifier can check, so we drop what cannot be verified (multiple choice, proofs,
several questions at once, figures we do not have, non-English text, missing or unparseable
reference answers); decontaminate against the evaluation benchmarks with word 9-grams; and
remove exact and near duplicates, keeping template siblings that ask different questions.
Teacher generation, answer verification and difficulty filtering by pass rate extend this
list as later steps.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from builders.runner import Build, BuildError
from curation.benchmarks import load_benchmarks
from curation.decontaminate import decontaminate
from curation.dedup import exact_dedup, near_dedup
from curation.filters import DEFAULT_RULES, filter_math_rl_prompts
from lake.steps import Step
from schemas.dataset_manifest import BenchmarkUsed

NAME = "math_rl_v2"
DOMAIN = "math"
DEFAULTS: dict[str, Any] = {
    "rules": list(DEFAULT_RULES),
    "benchmarks": ["aime24", "aime25", "math500", "amc", "minerva", "olympiadbench"],
    "benchmark_dir": "",
    "ngram": 9,
    "decontam_rule": "boilerplate-aware",
    "near_dup_threshold": 0.6,
    "num_perm": 112,
    "on_error": "raise",
}


def steps(params: dict[str, Any], build: Build) -> list[Step]:
    """The recipe, top to bottom."""
    benchmarks = _benchmarks(params, build)
    return [
        Step("rule_filters", filter_math_rl_prompts, {"rules": params["rules"]}, scope="rows"),
        Step(
            "decontaminate",
            decontaminate,
            {"benchmarks": benchmarks, "n": params["ngram"], "rule": params["decontam_rule"]},
            scope="rows",
        ),
        Step("exact_dedup", exact_dedup, {"id_column": "uid"}, partition="normalized_text"),
        Step(
            "near_dedup",
            near_dedup,
            {
                "threshold": params["near_dup_threshold"],
                "num_perm": params["num_perm"],
                "id_column": "uid",
            },
            partition="lsh_bands",
        ),
    ]


def demo_profile(workdir: Path) -> tuple[list[str], dict[str, Any]]:
    """The bundled demo: the project's own generated corpus and demo benchmark."""
    from builders.demo_corpus import write_demo_corpus

    files = write_demo_corpus(workdir / "demo")
    return [str(p) for p in files.sources], {"benchmarks": [str(files.benchmark)]}


PROFILES = {"demo": demo_profile}


def _benchmarks(params: dict[str, Any], build: Build) -> list:
    if build.dry_run:
        return list(params["benchmarks"])
    where = params["benchmark_dir"]
    if where and not Path(where).is_dir():
        raise BuildError(f"benchmark_dir {where}: no such directory")
    try:
        loaded = load_benchmarks(params["benchmarks"], local_dir=params["benchmark_dir"] or None)
    except (FileNotFoundError, KeyError, ValueError) as exc:
        raise BuildError(f"cannot load benchmarks {params['benchmarks']}: {exc}") from None
    build.benchmarks = [
        BenchmarkUsed(name=b.name, items=len(b.ids), content_hash=b.content_hash, origin=b.origin)
        for b in loaded
    ]
    return loaded
