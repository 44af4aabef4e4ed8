"""swe_rl: prompts for the SWE RL stage (execution-free repair RL).

Following the Cascade recipe's SWE RL data section: the same instance rules as the SFT sets
(no SWE-bench Verified repository, one source per repository and base commit); the teacher
answers each repair prompt 8 times and the instance is kept when it is hard: not in the SFT
bucket (fewer than 4 of 8 responses with patch similarity > 0.5) and at least one response
with similarity > 0. Each kept instance gets a repair prompt capped at `l` tokens
(`max_prompt_tokens`; 24K for 8B, 32K for 14B): GT-only (the gold files) or mixed
localization (the gold files plus the localizer's distractor files, added one at a time
while the prompt fits, at most 5 files), files shuffled; instances whose gold files alone
exceed l are dropped, and so are prompts under 8K tokens. Each row keeps what the SWE RL
reward reads: the gold `patch`, the issue (`problem_statement`) and the files as the prompt
showed them (`context_files`, `context_contents`), which a rollout's edits are applied to.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from builders.code_sft import teacher_sampler
from builders.runner import Build, BuildError
from builders.swe_sft import checked_repos_dir, instance_steps
from curation.swe.instances import SWE_BENCH_VERIFIED_REPOS
from curation.swe.localization import localize_files
from curation.swe.repair import measure_repair_buckets, select_repair_bucket
from curation.swe.rl_prompts import build_rl_prompts
from lake.steps import Step

NAME = "swe_rl"
DOMAIN = "swe"
DEFAULTS: dict[str, Any] = {
    "mapping": {"problem": "problem_statement", "source_id": "instance_id"},
    "verified_repos": list(SWE_BENCH_VERIFIED_REPOS),
    "source_priority": [],
    "repos_dir": "",
    # repair rollouts that sort instances into buckets, and the localizer of distractors
    "teacher": "deepseek-ai/DeepSeek-R1-0528",
    "localizer": "deepseek-ai/DeepSeek-R1-0528",
    "backend": "vllm",
    "backend_options": {},
    "mode": "think",
    "k": 8,
    "max_new_tokens": 32768,
    "temperature": 0.6,
    "top_p": 0.95,
    "seed": 0,
    "generations_table": "swe_rl_generations",
    "repair_threshold": 0.5,
    "repair_min_good": 4,
    "top_n": 5,
    # prompts: l, the 8K floor, files, the GT-only / mixed split, in the student's tokens
    "tokenizer": "Qwen/Qwen3-8B",
    "max_prompt_tokens": 24 * 1024,
    "min_prompt_tokens": 8 * 1024,
    "max_files": 5,
    "mixed_fraction": 0.5,
    "prompt_seed": 0,
    "on_error": "raise",
}


def steps(params: dict[str, Any], build: Build) -> list[Step]:
    """The recipe, top to bottom."""
    repos = checked_repos_dir(params, build)
    rollouts = teacher_sampler(params, build, prompt_column="prompt", id_column="uid")
    localizer = teacher_sampler(
        {**params, "teacher": params["localizer"]},
        build,
        prompt_column="prompt",
        id_column="uid",
        k=1,
    )
    return [
        *instance_steps(params, build),
        Step(
            "repair_buckets",
            measure_repair_buckets,
            {
                "repos_dir": repos,
                "sample": rollouts,
                "threshold": params["repair_threshold"],
                "min_good": params["repair_min_good"],
            },
            scope="rows",
        ),
        Step("hard_instances", select_repair_bucket, {"bucket": "hard"}, scope="rows"),
        Step(
            "localize",
            localize_files,
            {"repos_dir": repos, "sample": localizer, "top_n": params["top_n"]},
            scope="rows",
        ),
        Step(
            "rl_prompts",
            build_rl_prompts,
            {
                "repos_dir": repos,
                "tokenizer": _tokenizer(params, build),
                "max_tokens": params["max_prompt_tokens"],
                "min_tokens": params["min_prompt_tokens"],
                "max_files": params["max_files"],
                "mixed_fraction": params["mixed_fraction"],
                "seed": params["prompt_seed"],
            },
            scope="rows",
        ),
    ]


def _tokenizer(params: dict[str, Any], build: Build) -> Any:
    """The student's tokenizer: an object or counting function as given, or loaded by name
    (an HF id or a local path) with transformers."""
    name = params["tokenizer"]
    if not isinstance(name, str) or build.dry_run:
        return name
    try:
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(name)
    except (OSError, ValueError) as exc:
        raise BuildError(f"cannot load tokenizer {name!r}: {exc}") from None


def toy_profile(workdir: Path, split: str = "pool") -> tuple[list[str], dict[str, Any]]:
    """The toy world: the SWE SFT recipe's instances, bucketed by the strong toy SWE model's
    repairs, prompts measured in that model's tokens."""
    from builders.swe_sft import toy_profile as swe_sft_toy
    from builders.worlds.toy_profile import swe_sources, toy_models

    _, params = swe_sft_toy(workdir)
    strong = toy_models(workdir, "swe")["strong"]
    shared = {k: v for k, v in params.items() if k in DEFAULTS}
    return swe_sources(workdir, split), {
        **shared,
        "temperature": 1.0,  # pass rates measured as the policy samples, not as the teacher
        "localizer": strong.name,
        "tokenizer": str(strong.path),
        "max_prompt_tokens": 600,
        "min_prompt_tokens": 100,
    }


def toy_heldout_profile(workdir: Path) -> tuple[list[str], dict[str, Any]]:
    """The same recipe on repositories no other split uses (the toy cascade's held-out set)."""
    return toy_profile(workdir, "heldout")


PROFILES = {"toy": toy_profile, "toy-heldout": toy_heldout_profile}
