"""The swe_sft and swe_rl recipes' steps, run in order on SWE instances of a git repository
built in the test, with a scripted teacher whose answers depend on the instance."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from pathlib import Path

import polars as pl
import pytest
from test_swe_agentless import BROKEN, FIX_MEAN, FIX_PARSE, ISSUE, REPRODUCE, build_repo, solution

from builders import swe_rl, swe_sft
from builders.runner import Build
from curation.ingest import ingest
from curation.swe.repository import Snapshot, repo_dir
from curation.verify.swe import swe_reward
from lake import Lake
from schemas.generation import Completion, GenerationRequest

WRONG = ("calc/stats.py", "    total = 0\n", "    total = 1\n")
LOCALIZED = "<think>files</think>\n```\ncalc/stats.py\ncalc/io.py\ncalc/report.py\n```"
PARTIAL = "<think>files</think>\n```\ncalc/stats.py\ncalc/report.py\n```"
PLANS = {
    # tag: how many of the 8 repair responses are the gold fix, half fix (~0.67), wrong, junk
    "EASY": ["gold"] * 5 + ["junk"] * 3,
    "HARD": ["half"] * 2 + ["wrong"] * 2 + ["junk"] * 4,
    "NONE": ["junk"] * 8,
}


class ScriptedTeacher:
    """Repairs, localizations and tests chosen by the instance's tag (`[EASY]`, ...) and the
    sample index, so each bucket and keep rule is exercised by a known response."""

    name = "scripted"

    def __init__(self, model: str) -> None:
        self.model = model

    def generate(self, requests: Sequence[GenerationRequest]) -> Iterator[Completion]:
        for request in requests:
            prompt = request.messages[-1]["content"]
            tag = re.search(r"\[(\w+)\]", prompt).group(1)
            i = request.seed
            if "Repository files" in prompt:  # localization
                text = LOCALIZED if i % 2 == 0 else PARTIAL
            elif "Candidate patch" in prompt:  # test generation
                text = REPRODUCE if i % 2 == 0 else BROKEN
            else:
                kind = PLANS[tag][i]
                text = {
                    "gold": solution(FIX_MEAN, FIX_PARSE),
                    "half": solution(FIX_MEAN),
                    "wrong": solution(WRONG),
                    "junk": "no idea",
                }[kind]
            yield Completion(request.key, text, 10, len(text.split()), "stop")

    def close(self) -> None:
        pass


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("swe_recipes")
    repo = build_repo(root / "repos")

    def instance(instance_id: str, tag: str, **over: str) -> dict:
        return {
            "instance_id": instance_id,
            "repo": "acme/calc",
            "base_commit": repo.base,
            "problem_statement": f"[{tag}] {ISSUE}",
            "patch": repo.patch,
            "test_patch": repo.test_patch,
            "FAIL_TO_PASS": repo.fail_to_pass,
            "PASS_TO_PASS": ["tests/test_stats.py::test_median"],
            **over,
        }

    gym = [
        instance("calc-1", "EASY"),
        instance("calc-2", "HARD"),
        instance("calc-3", "NONE"),
        instance("django-1", "EASY", repo="django/django"),
        instance("calc-bad", "EASY", base_commit="not-a-commit"),
    ]
    rebench = [instance("calc-1-again", "HARD")]  # same repo and commit, another source
    paths = []
    for name, rows in (("swe_gym", gym), ("swe_rebench", rebench)):
        path = root / f"{name}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        paths.append(str(path))
    lake = Lake(root / "lake")
    mapping = swe_sft.DEFAULTS["mapping"]
    report = ingest(lake, paths, "swe_sources", domain="swe", mapping=mapping)
    frame = pl.from_arrow(lake.read(report.version.ref))
    common = {
        "repos_dir": str(repo.root),
        "teacher": "scripted",
        "localizer": "scripted",
        "backend_factory": ScriptedTeacher,
    }
    return lake, root, frame, common


def run(recipe, params: dict, lake: Lake, root: Path, frame: pl.DataFrame):
    build = Build(lake=lake, profile="default", workdir=root)
    log = {}
    for step in recipe.steps({**recipe.DEFAULTS, **params}, build):
        result = step.run(frame, **step.params)
        if not step.name.startswith("teacher_"):  # sampling steps fan out: k rows per prompt
            assert frame.height == result.kept.height + result.dropped.height, step.name
        log[step.name] = result
        frame = result.kept
    return log, frame


def test_instance_rules(world) -> None:
    lake, root, frame, common = world
    log, _ = run(swe_sft, {**common, "subtask": "repair"}, lake, root, frame)
    bad = log["instances"].dropped.row(0, named=True)
    assert bad["uid"] == "swe_gym:5" and bad["reason"] == "malformed_instance"
    assert "base_commit 'not-a-commit'" in bad["error"]
    assert log["verified_repos"].dropped["source_id"].to_list() == ["django-1"]
    dup = log["repo_commit_dedup"].dropped.row(0, named=True)
    assert (dup["source_id"], dup["kept_source"], dup["duplicate_of"]) == (
        "calc-1-again",
        "swe_gym",
        "swe_gym:1",
    )


def test_repair_sft_keeps_the_sft_bucket_above_threshold(world) -> None:
    lake, root, frame, common = world
    log, final = run(swe_sft, {**common, "subtask": "repair"}, lake, root, frame)
    assert log["teacher_repairs"].kept.height == 3 * 8
    assert final["repair_similarity"].to_list() == [1.0] * 5
    assert set(final["repair_bucket"]) == {"sft"}
    assert final["prompt_id"].unique().to_list() == ["swe_gym:1"]
    dropped = log["repair_buckets"].dropped
    per = dict(dropped.group_by("reason").len().rows())
    assert per == {"low_similarity": 3, "not_sft_bucket": 16}
    fixer, kept = run(
        swe_sft, {**common, "subtask": "repair", "repair_rule": "swe_fixer"}, lake, root, frame
    )
    assert kept.height == 5 + 2  # every response above 0.5: the gold fixes and the half fixes
    assert fixer["teacher_repairs"].stats["generated"] == 0  # all cached from the first build


def test_localization_and_test_generation_sets(world) -> None:
    lake, root, frame, common = world
    _, local = run(swe_sft, {**common, "subtask": "localization"}, lake, root, frame)
    assert local.height == 3 * 4  # 3 instances x the 4 of 8 responses naming both gold files
    assert set(local["localization_recall"]) == {1.0}
    log, tests = run(swe_sft, {**common, "subtask": "test_generation", "k": 2}, lake, root, frame)
    assert tests.height == 3
    assert set(tests["outcome_before"]) == {"Issue reproduced"}
    assert set(tests["outcome_after"]) == {"Issue resolved"}
    assert set(log["run_tests"].dropped["reason"]) == {"test_syntax_error"}


def words(text: str) -> int:
    return len(text.split())


def test_swe_rl_prompts_come_from_hard_instances(world) -> None:
    lake, root, frame, common = world
    params = {
        **common,
        "tokenizer": words,
        "min_prompt_tokens": 10,
        "max_prompt_tokens": 10_000,
        "mixed_fraction": 1.0,
    }
    log, final = run(swe_rl, params, lake, root, frame)
    buckets = dict(log["repair_buckets"].kept.select("source_id", "repair_bucket").rows())
    assert buckets == {"calc-1": "sft", "calc-2": "hard", "calc-3": "none"}
    dropped = dict(log["hard_instances"].dropped.select("source_id", "reason").rows())
    assert dropped == {"calc-1": "repair_easy", "calc-3": "repair_unsolved"}
    row = final.row(0, named=True)
    assert final.height == 1 and row["source_id"] == "calc-2"
    assert row["localized_files"] == ["calc/stats.py", "calc/io.py", "calc/report.py"]
    assert row["prompt_kind"] == "mixed" and row["distractor_files"] == ["calc/report.py"]
    assert sorted(row["context_files"]) == ["calc/io.py", "calc/report.py", "calc/stats.py"]
    assert row["prompt_tokens"] == words(row["prompt"]) <= 10_000
    # The row carries what the SWE RL reward needs: the files as the prompt showed them, so a
    # rollout's SEARCH/REPLACE edits score as the bucket step scored the teacher's.
    snap = Snapshot(repo_dir(common["repos_dir"], "acme/calc"), row["base_commit"])
    shown = dict(zip(row["context_files"], row["context_contents"], strict=True))
    assert shown == snap.read_many(row["context_files"])
    assert row["problem_statement"] == f"[HARD] {ISSUE}"  # what the patch judge is shown
    columns = {k: [row[k]] for k in ("patch", "context_files", "context_contents")}
    scores = [
        swe_reward([row["prompt"]], [answer], **columns)[0]
        for answer in (solution(FIX_MEAN, FIX_PARSE), solution(FIX_MEAN), "no idea")
    ]
    assert scores == [1.0, pytest.approx(2 / 3), -1.0]
    floor = run(swe_rl, {**params, "min_prompt_tokens": 5000}, lake, root, frame)[0]
    assert floor["rl_prompts"].dropped["reason"].to_list() == ["prompt_below_min_tokens"]


def test_step_lists_read_like_the_recipes() -> None:
    dry = Build(lake=None, profile="default", workdir=Path("."), dry_run=True)
    names = {
        subtask: [s.name for s in swe_sft.steps({**swe_sft.DEFAULTS, "subtask": subtask}, dry)]
        for subtask in swe_sft.SUBTASKS
    }
    assert names["repair"] == [
        "instances",
        "verified_repos",
        "repo_commit_dedup",
        "repair_prompts",
        "teacher_repairs",
        "patch_similarity",
        "repair_buckets",
    ]
    assert (
        names["localization"][-1] == "recall_filter" and names["test_generation"][-1] == "run_tests"
    )
    assert [s.name for s in swe_rl.steps(dict(swe_rl.DEFAULTS), dry)][3:] == [
        "repair_buckets",
        "hard_instances",
        "localize",
        "rl_prompts",
    ]


def test_the_verified_repository_list_reaches_the_manifest(tmp_path: Path) -> None:
    """The instance rules both SWE recipes share record the repository list they keep
    instances apart from: the built-in SWE-bench Verified list, or a file given instead."""
    build = Build(lake=None, profile="default", workdir=tmp_path)
    swe_sft.instance_steps(dict(swe_sft.DEFAULTS), build)
    (repos,) = build.benchmarks
    assert (repos.kind, repos.name, repos.items) == ("repos", "verified_repos", 12)
    listed = tmp_path / "verified.txt"
    listed.write_text("# SWE-bench Verified\ndjango/django\nsympy/sympy\n")
    build = Build(lake=None, profile="default", workdir=tmp_path)
    swe_sft.instance_steps({**swe_sft.DEFAULTS, "verified_repos": [str(listed)]}, build)
    (repos,) = build.benchmarks
    assert (repos.name, repos.items, repos.origin) == ("verified", 2, str(listed))
