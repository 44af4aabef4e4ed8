"""swe_sft: Agentless SFT data for SWE: localization, repair and test generation.

Following the Cascade recipe's SWE data section: SWE-bench-style instances from several
sources (SWE-Bench-Train, SWE-reBench, SWE-Smith, SWE-Fixer-Train); drop every instance from
a repository in SWE-bench Verified and dedup across sources on (repository, base commit).
Then, for the chosen sub-task, prompt the teacher k times per instance and keep:

- localization (issue + repository tree -> ranked files): responses whose files cover every
  file of the gold patch (recall = 1.0);
- repair (issue + the buggy files -> `<think>`, then SEARCH/REPLACE edits in `<solution>`):
  the edits are applied to the files and scored by patch similarity to the gold patch; an
  instance is in the SFT bucket when >= 4 of its 8 responses score > 0.5, and its responses
  above 0.5 are kept (or, by the SWE-Fixer rule, every response above 0.5);
- test generation (issue + candidate patch + files -> a self-contained reproduction test):
  tests that parse and run in the sandbox without a syntax error.

One build makes one sub-task's set (`subtask`); the three sets are built from the same
instances with the same teacher.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from builders.code_sft import teacher_sampler
from builders.runner import Build, BuildError
from curation.swe.instances import (
    SWE_BENCH_VERIFIED_REPOS,
    dedup_repo_commit,
    drop_verified_repos,
    instances_from_prompts,
    repo_list_benchmark,
)
from curation.swe.localization import build_localization_prompts, filter_localization
from curation.swe.repair import build_repair_prompts, score_repairs, select_sft_repairs
from curation.swe.test_generation import build_testgen_prompts, check_generated_tests
from curation.verify.sandbox import SandboxLimits
from lake.steps import Step

NAME = "swe_sft"
DOMAIN = "swe"
SUBTASKS = ("localization", "repair", "test_generation")
DEFAULTS: dict[str, Any] = {
    "subtask": "repair",
    "mapping": {"problem": "problem_statement", "source_id": "instance_id"},
    # instances: the SWE-bench Verified repositories (names or one file), source preference
    "verified_repos": list(SWE_BENCH_VERIFIED_REPOS),
    "source_priority": [],
    "repos_dir": "",
    # the teacher (Cascade 1: DeepSeek-R1-0528, 8 responses per prompt; 4 for SWE-Fixer)
    "teacher": "deepseek-ai/DeepSeek-R1-0528",
    "backend": "vllm",
    "backend_options": {},
    "mode": "think",
    "k": 8,
    "max_new_tokens": 32768,
    "temperature": 0.6,
    "top_p": 0.95,
    "seed": 0,
    "generations_table": "swe_sft_generations",
    # keep rules
    "top_n": 5,
    "min_recall": 1.0,
    "repair_threshold": 0.5,
    "repair_min_good": 4,
    "repair_rule": "cascade",
    "require_reproduction": False,
    "test_time_limit_s": 10.0,
    "on_error": "raise",
}


def steps(params: dict[str, Any], build: Build) -> list[Step]:
    """The recipe, top to bottom."""
    subtask = params["subtask"]
    if subtask not in SUBTASKS:
        raise BuildError(f"subtask must be one of {', '.join(SUBTASKS)}, got {subtask!r}")
    repos = checked_repos_dir(params, build)
    teacher = teacher_sampler(params, build, prompt_column="prompt", id_column="uid")
    return [
        *instance_steps(params, build),
        *{
            "localization": lambda: [
                Step(
                    "localization_prompts",
                    build_localization_prompts,
                    {"repos_dir": repos, "top_n": params["top_n"]},
                    scope="rows",
                ),
                Step("teacher_localizations", teacher, scope="rows", fan_out=True),
                Step(
                    "recall_filter",
                    filter_localization,
                    {"top_n": params["top_n"], "min_recall": params["min_recall"]},
                    scope="rows",
                ),
            ],
            "repair": lambda: [
                Step("repair_prompts", build_repair_prompts, {"repos_dir": repos}, scope="rows"),
                Step("teacher_repairs", teacher, scope="rows", fan_out=True),
                Step("patch_similarity", score_repairs, {"repos_dir": repos}, scope="rows"),
                Step(
                    "repair_buckets",
                    select_sft_repairs,
                    {
                        "threshold": params["repair_threshold"],
                        "min_good": params["repair_min_good"],
                        "rule": params["repair_rule"],
                    },
                    partition="prompt_id",
                ),
            ],
            "test_generation": lambda: [
                Step("testgen_prompts", build_testgen_prompts, {"repos_dir": repos}, scope="rows"),
                Step("teacher_tests", teacher, scope="rows", fan_out=True),
                Step(
                    "run_tests",
                    check_generated_tests,
                    {
                        "repos_dir": repos,
                        "require_reproduction": params["require_reproduction"],
                        "limits": SandboxLimits(time_limit_s=params["test_time_limit_s"]),
                    },
                    scope="rows",
                ),
            ],
        }[subtask](),
    ]


def instance_steps(params: dict[str, Any], build: Build) -> list[Step]:
    """The rules every SWE source goes through (shared with swe_rl); the repository list
    instances are kept apart from is recorded for the manifest."""
    verified = params["verified_repos"]
    if isinstance(verified, list) and len(verified) == 1 and Path(verified[0]).is_file():
        verified = verified[0]  # `--set verified_repos=FILE`
    if not build.dry_run:
        try:
            build.record_benchmarks([repo_list_benchmark(verified)], kind="repos")
        except (OSError, ValueError) as exc:
            raise BuildError(f"verified_repos: {exc}") from None
    return [
        Step("instances", instances_from_prompts, scope="rows"),
        Step(
            "verified_repos",
            drop_verified_repos,
            {"verified_repos": verified},
            scope="rows",
        ),
        Step(
            "repo_commit_dedup",
            functools.partial(dedup_repo_commit, source_priority=params["source_priority"]),
            partition="repo",
        ),
    ]


def checked_repos_dir(params: dict[str, Any], build: Build) -> str:
    where = params["repos_dir"]
    if not build.dry_run and not (where and Path(where).is_dir()):
        raise BuildError(
            f"repos_dir {where or '(unset)'}: give the directory of the repositories' git "
            "clones (owner__name), e.g. --set repos_dir=/data/swe-repos"
        )
    return where


def toy_profile(workdir: Path) -> tuple[list[str], dict[str, Any]]:
    """The toy world: tiny repositories with a planted bug (one of them a toy 'SWE-bench
    Verified' repository, two instances repeated by a second source), the strong toy SWE
    model as the teacher."""
    from builders.worlds.toy_profile import (
        swe_repos,
        swe_sources,
        toy_models,
        toy_root,
        verified_repos_file,
    )

    strong = toy_models(workdir, "swe")["strong"]
    return swe_sources(workdir, "pool"), {
        **strong.flat(k=8, max_new_tokens=160, temperature=0.6),
        "repos_dir": str(swe_repos(toy_root(workdir))),
        "verified_repos": [verified_repos_file(workdir)],
        "source_priority": ["toy_swe_pool"],
    }


PROFILES = {"toy": toy_profile}
