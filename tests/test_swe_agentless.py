"""Agentless sub-tasks on a real git repository built here: localization recall, repair
edits applied and scored against the gold patch, generated tests run in the sandbox, and
SWE RL prompts within a token budget."""

from __future__ import annotations

import subprocess
import textwrap
from dataclasses import dataclass
from pathlib import Path

import polars as pl
import pytest
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from curation.swe.localization import (
    build_localization_prompts,
    filter_localization,
    parse_ranked_files,
)
from curation.swe.repair import (
    build_repair_prompts,
    score_repairs,
    select_repair_bucket,
    select_sft_repairs,
)
from curation.swe.repository import Snapshot, apply_patch, patch_files, repo_dir
from curation.swe.rl_prompts import build_rl_prompts, token_counter
from curation.swe.test_generation import (
    build_testgen_prompts,
    check_generated_tests,
    outcome_of,
    sandbox_program,
)
from curation.verify.sandbox import FunctionalTest, Sandbox, SandboxLimits
from curation.verify.swe import EditError, apply_edits, parse_repair

STATS = '''\
"""Summary statistics."""


def mean(values):
    """Arithmetic mean of a non-empty sequence."""
    total = 0
    for v in values:
        total += v
    return total / (len(values) + 1)


def median(values):
    """Middle value (mean of the two middle values for an even count)."""
    ordered = sorted(values)
    mid = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[mid]
    return (ordered[mid - 1] + ordered[mid]) / 2
'''
IO = '''\
"""Reading numbers."""


def parse(text):
    """Numbers from comma-separated text."""
    return [float(x) for x in text.split(",")]
'''
REPORT = '''\
"""Plain-text reports."""

from calc.stats import mean, median


def report(values):
    """One line per statistic."""
    lines = [f"mean: {mean(values)}", f"median: {median(values)}"]
    return "\\n".join(lines)


def table(rows):
    """Rows of (name, value) as aligned text."""
    width = max(len(name) for name, _ in rows)
    return "\\n".join(f"{name.ljust(width)}  {value}" for name, value in rows)
'''
TESTS = """\
from calc.stats import median


def test_median():
    assert median([3, 1, 2]) == 2
"""
NEW_TESTS = """\
from calc.io import parse
from calc.stats import mean


def test_mean():
    assert mean([2, 4]) == 3


def test_parse_empty_fields():
    assert parse("1,,2") == [1.0, 2.0]
"""
ISSUE = (
    "calc.stats.mean is off by one: mean([2, 4]) returns 2.0 instead of 3.0. Also "
    "calc.io.parse crashes on empty fields: parse('1,,2') should give [1.0, 2.0]."
)


@dataclass(frozen=True)
class Repo:
    root: Path  # the repos_dir
    base: str
    patch: str
    test_patch: str
    fail_to_pass: list[str]


def git(path: Path, *args: str) -> str:
    env = {
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.org",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.org",
        "PATH": "/usr/bin:/bin",
        "HOME": str(path),
    }
    done = subprocess.run(["git", *args], cwd=path, capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout


def write(path: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)


def build_repo(root: Path) -> Repo:
    """acme/calc: a package with two bugs, an issue, the gold fix and the tests that show it."""
    path = root / "acme__calc"
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    write(
        path,
        {
            "calc/__init__.py": "",
            "calc/stats.py": STATS,
            "calc/io.py": IO,
            "calc/report.py": REPORT,
            "tests/test_stats.py": TESTS,
            "README.md": "# calc\n",
        },
    )
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "base")
    base = git(path, "rev-parse", "HEAD").strip()
    write(
        path,
        {
            "calc/stats.py": STATS.replace("(len(values) + 1)", "len(values)"),
            "calc/io.py": IO.replace('text.split(",")]', 'text.split(",") if x.strip()]'),
        },
    )
    git(path, "commit", "-q", "-am", "fix")
    patch = git(path, "diff", base, "HEAD")
    write(path, {"tests/test_new.py": NEW_TESTS})
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "tests")
    test_patch = git(path, "diff", "HEAD~1", "HEAD")
    fail_to_pass = ["tests/test_new.py::test_mean", "tests/test_new.py::test_parse_empty_fields"]
    return Repo(root, base, patch, test_patch, fail_to_pass)


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Repo:
    return build_repo(tmp_path_factory.mktemp("repos"))


@pytest.fixture(scope="module")
def box():
    with Sandbox(workers=2) as sandbox:
        yield sandbox


def instances(repo: Repo, n: int = 1, **extra: list) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "uid": [f"i{k}" for k in range(n)],
            "source": ["toy"] * n,
            "source_id": [f"acme__calc-{k}" for k in range(n)],
            "repo": ["acme/calc"] * n,
            "base_commit": [repo.base] * n,
            "problem_statement": [ISSUE] * n,
            "patch": [repo.patch] * n,
            **extra,
        }
    )


def solution(*blocks: tuple[str, str, str], think: bool = True) -> str:
    body = "".join(
        f"### {path}\n<<<<<<< SEARCH\n{old}=======\n{new}>>>>>>> REPLACE\n"
        for path, old, new in blocks
    )
    head = "<think>The mean divides by the wrong count.</think>\n" if think else ""
    return f"{head}<solution>\n```python\n{body}```\n</solution>"


FIX_MEAN = (
    "calc/stats.py",
    "    return total / (len(values) + 1)\n",
    "    return total / len(values)\n",
)
FIX_PARSE = (
    "calc/io.py",
    '    return [float(x) for x in text.split(",")]\n',
    '    return [float(x) for x in text.split(",") if x.strip()]\n',
)


def run_tests_in_sandbox(box: Sandbox, files: dict[str, str], test_ids: list[str]) -> str:
    """Run pytest-style test functions on `files` in the sandbox: 'Issue resolved' when all
    pass, 'Issue reproduced' when one fails."""
    runner = textwrap.dedent(
        f"""
        import importlib
        failed = []
        for test_id in {test_ids!r}:
            path, name = test_id.split("::")
            module = importlib.import_module(path[:-3].replace("/", "."))
            try:
                getattr(module, name)()
            except Exception:
                failed.append(test_id)
        print("Issue reproduced" if failed else "Issue resolved")
        """
    )
    probe = FunctionalTest("assert __outcome__ == 'Issue reproduced', __outcome__\n")
    result = box.run(sandbox_program(files, runner), [probe], prelude=None)
    said, error = outcome_of(result)
    assert error is None, error
    return said


# --------------------------------------------------------------------------- repository


def test_snapshot_reads_the_base_commit_and_the_gold_patch_applies(repo: Repo, box) -> None:
    path = repo_dir(repo.root, "acme/calc")
    assert path is not None and repo_dir(repo.root, "acme/other") is None
    snap = Snapshot(path, repo.base)
    assert "calc/stats.py" in snap.paths and "tests/test_new.py" not in snap.paths
    assert snap.read("calc/stats.py") == STATS and snap.read("nope.py") is None
    assert patch_files(repo.patch) == ["calc/io.py", "calc/stats.py"]
    base = snap.read_many(snap.paths)
    fixed = {**base, **apply_patch(snap.read_many(patch_files(repo.patch)), repo.patch)}
    new_tests = apply_patch({}, repo.test_patch)
    assert run_tests_in_sandbox(box, {**base, **new_tests}, repo.fail_to_pass) == "Issue reproduced"
    assert run_tests_in_sandbox(box, {**fixed, **new_tests}, repo.fail_to_pass) == "Issue resolved"


# --------------------------------------------------------------------------- localization


def test_localization_prompt_holds_the_tree_and_recall_decides(repo: Repo) -> None:
    df = instances(repo, 2).with_columns(pl.Series("repo", ["acme/calc", "acme/missing"]))
    prompts = build_localization_prompts(df, repos_dir=repo.root, top_n=3)
    assert prompts.dropped["reason"].to_list() == ["repo_unavailable"]
    prompt = prompts.kept["prompt"][0]
    assert ISSUE in prompt and "calc/report.py" in prompt and "README.md" not in prompt
    assert prompts.kept["repo_files"][0] == 5
    responses = pl.concat([prompts.kept] * 3).with_columns(
        pl.Series("uid", ["a", "b", "c"]),
        pl.Series(
            "response",
            [
                "<think>mean and parse</think>\n```\ncalc/stats.py\ncalc/io.py\ncalc/report.py\n```",
                "<think>only mean</think>\n```\ncalc/stats.py\ncalc/report.py\n```",
                "<think>deep</think>```\n1. calc/report.py\n2. calc/__init__.py\n3. tests/x.py\n4. calc/stats.py\n5. calc/io.py\n```",
            ],
        ),
    )
    result = filter_localization(responses, top_n=3)
    assert result.kept["uid"].to_list() == ["a"]
    recall = dict(zip(result.dropped["uid"], result.dropped["localization_recall"], strict=True))
    assert recall == {"b": 0.5, "c": 0.0}  # c names both gold files, but below its top 3
    assert result.kept["gold_files"][0].to_list() == ["calc/io.py", "calc/stats.py"]
    assert set(result.dropped["reason"]) == {"incomplete_localization"}
    assert filter_localization(responses, top_n=5).kept["uid"].to_list() == ["a", "c"]


def test_ranked_files_parse_plain_answers_too() -> None:
    assert parse_ranked_files("calc/a.py\n  calc/b.py  \nnot a path here\n", 5) == [
        "calc/a.py",
        "calc/b.py",
    ]


# --------------------------------------------------------------------------- repair


def test_repair_format_is_parsed_strictly() -> None:
    assert [e.path for e in parse_repair(solution(FIX_MEAN, FIX_PARSE))] == [
        "calc/stats.py",
        "calc/io.py",
    ]
    with pytest.raises(EditError, match="no <think>"):
        parse_repair(solution(FIX_MEAN, think=False))
    with pytest.raises(EditError, match="no SEARCH/REPLACE block"):
        parse_repair("<think>x</think><solution>just prose</solution>")
    with pytest.raises(EditError, match="SEARCH text not found in calc/stats.py"):
        apply_edits(
            {"calc/stats.py": STATS}, parse_repair(solution(("calc/stats.py", "nope\n", "x\n")))
        )


def test_repairs_are_applied_scored_and_run(repo: Repo, box) -> None:
    prompts = build_repair_prompts(instances(repo), repos_dir=repo.root)
    prompt = prompts.kept["prompt"][0]
    assert "#### calc/stats.py" in prompt and "#### calc/io.py" in prompt
    assert "calc/report.py" not in prompt  # only the files the gold patch touches
    responses = [
        solution(FIX_MEAN, FIX_PARSE),  # the gold fix
        solution(FIX_MEAN),  # half of it
        solution(
            ("calc/stats.py", "        total += v\n", "        total += v * 1\n")
        ),  # no-op-ish
        solution(("calc/stats.py", "missing line\n", "x\n")),  # cannot apply
        "I think the bug is in mean().",  # no format at all
    ]
    df = pl.concat([prompts.kept] * len(responses)).with_columns(
        pl.Series("uid", [f"r{i}" for i in range(len(responses))]),
        pl.Series("prompt_id", ["i0"] * len(responses)),
        pl.Series("response", responses),
    )
    scored = score_repairs(df, repos_dir=repo.root).kept
    sim = scored["repair_similarity"].to_list()
    assert sim[0] == 1.0
    assert 0 < sim[1] < 1 and 0 <= sim[2] < sim[1]
    assert sim[3] == -1.0 and sim[4] == -1.0
    assert "SEARCH text not found" in scored["repair_error"][3]
    assert scored["repair_error"][4] == "no <think>...</think> block"
    # the applied edits really fix the bug: the FAIL_TO_PASS tests pass in the sandbox
    snap = Snapshot(repo_dir(repo.root, "acme/calc"), repo.base)
    base = snap.read_many(snap.paths)
    new_tests = apply_patch({}, repo.test_patch)
    repaired = apply_patch(base, scored["repair_patch"][0])
    assert (
        run_tests_in_sandbox(box, {**repaired, **new_tests}, repo.fail_to_pass) == "Issue resolved"
    )
    half = apply_patch(base, scored["repair_patch"][1])
    assert run_tests_in_sandbox(box, {**half, **new_tests}, repo.fail_to_pass) == "Issue reproduced"


def bucket_frame(similarities: dict[str, list[float]]) -> pl.DataFrame:
    rows = [
        (inst, f"{inst}-{i}", s) for inst, sims in similarities.items() for i, s in enumerate(sims)
    ]
    return pl.DataFrame(rows, schema=["prompt_id", "uid", "repair_similarity"], orient="row")


def test_repair_buckets_follow_the_recipe_rules() -> None:
    df = bucket_frame(
        {
            "sft": [1.0, 0.9, 0.6, 0.51, 0.5, 0.2, -1.0, 0.0],  # 4 of 8 > 0.5
            "hard": [0.9, 0.8, 0.7, 0.3, 0.0, 0.0, -1.0, -1.0],  # 3 of 8 > 0.5, some > 0
            "none": [0.0, 0.0, -1.0, 0.0, 0.0, -1.0, 0.0, 0.0],  # nothing > 0
        }
    )
    result = select_sft_repairs(df)
    assert result.kept["uid"].to_list() == ["sft-0", "sft-1", "sft-2", "sft-3"]
    reasons = result.dropped.group_by("reason").len().sort("reason").rows()
    assert reasons == [("low_similarity", 4), ("not_sft_bucket", 16)]
    buckets = dict(result.dropped.unique("prompt_id").select("prompt_id", "repair_bucket").rows())
    assert buckets == {"sft": "sft", "hard": "hard", "none": "none"}
    fixer = select_sft_repairs(df, rule="swe_fixer")
    assert fixer.kept.height == 4 + 3  # every pair above 0.5, whatever its instance's bucket
    instances_df = pl.DataFrame(
        {"uid": ["sft", "hard", "none"], "repair_bucket": ["sft", "hard", "none"]}
    )
    hard = select_repair_bucket(instances_df)
    assert hard.kept["uid"].to_list() == ["hard"]
    assert dict(hard.dropped.select("uid", "reason").rows()) == {
        "sft": "repair_easy",
        "none": "repair_unsolved",
    }


# --------------------------------------------------------------------------- test generation

REPRODUCE = """<think>check mean</think>
```python
from calc.stats import mean

try:
    value = mean([2, 4])
except Exception:
    print("Other issues")
else:
    print("Issue resolved" if value == 3 else "Issue reproduced")
```"""
OTHER = """```python
print("starting")
print("Other issues")
```"""
RAISES = """```python
from calc.io import parse
parse("1,,2")
```"""
BROKEN = """```python
def test(:
    print("Issue reproduced")
```"""
LOOPS = """```python
while True:
    pass
```"""


def test_generated_tests_parse_and_run_in_the_sandbox(repo: Repo, box) -> None:
    prompts = build_testgen_prompts(instances(repo), repos_dir=repo.root)
    assert (
        "Candidate patch" in prompts.kept["prompt"][0]
        and repo.patch.strip() in prompts.kept["prompt"][0]
    )
    responses = [REPRODUCE, OTHER, RAISES, BROKEN, LOOPS, "no code here"]
    df = pl.concat([instances(repo)] * len(responses)).with_columns(
        pl.Series("uid", [f"t{i}" for i in range(len(responses))]),
        pl.Series("response", responses),
    )
    result = check_generated_tests(
        df, repos_dir=repo.root, sandbox=box, limits=SandboxLimits(time_limit_s=2.0)
    )
    assert result.kept["uid"].to_list() == ["t0", "t1", "t2"]
    kept = {r["uid"]: r for r in result.kept.iter_rows(named=True)}
    assert (kept["t0"]["outcome_before"], kept["t0"]["outcome_after"]) == (
        "Issue reproduced",
        "Issue resolved",
    )
    assert kept["t1"]["outcome_before"] == "Other issues"
    assert kept["t2"]["outcome_before"].startswith("raised ValueError")
    assert kept["t2"]["outcome_after"] == "printed no outcome"
    dropped = {r["uid"]: r for r in result.dropped.iter_rows(named=True)}
    assert dropped["t3"]["reason"] == "test_syntax_error"
    assert dropped["t3"]["run_error"].startswith("line 1")
    assert dropped["t4"]["reason"] == "test_not_completed"
    assert "timeout" in dropped["t4"]["run_error"]
    assert dropped["t5"]["reason"] == "no_test_code"
    strict = check_generated_tests(
        df.head(2), repos_dir=repo.root, sandbox=box, require_reproduction=True
    )
    assert strict.kept["uid"].to_list() == ["t0"]
    assert strict.dropped["reason"].to_list() == ["not_reproduced"]


# --------------------------------------------------------------------------- RL prompts


def words(text: str) -> int:
    return len(text.split())


def test_rl_prompts_fill_the_budget_with_distractors(repo: Repo) -> None:
    ranked = [["calc/stats.py", "calc/report.py", "calc/__init__.py", "tests/test_stats.py"]]
    df = instances(repo, localized_files=ranked)
    gold_only = build_rl_prompts(
        df, repos_dir=repo.root, tokenizer=words, min_tokens=1, mixed_fraction=0.0
    )
    row = gold_only.kept.row(0, named=True)
    assert row["prompt_kind"] == "gt_only" and sorted(row["context_files"]) == [
        "calc/io.py",
        "calc/stats.py",
    ]
    assert row["prompt_tokens"] == row["gold_tokens"] == words(row["prompt"])
    gold = row["gold_tokens"]
    with_report = build_rl_prompts(
        df, repos_dir=repo.root, tokenizer=words, min_tokens=1, mixed_fraction=1.0, max_tokens=10**6
    ).kept.row(0, named=True)
    assert with_report["distractor_files"] == [
        "calc/report.py",
        "calc/__init__.py",
        "tests/test_stats.py",
    ]
    assert len(with_report["context_files"]) == 5  # max_files reached
    # a budget that fits the gold files and report.py but not one more file
    budget = with_report["prompt_tokens"] - 1
    tight = build_rl_prompts(
        df,
        repos_dir=repo.root,
        tokenizer=words,
        min_tokens=1,
        mixed_fraction=1.0,
        max_tokens=budget,
    ).kept.row(0, named=True)
    assert tight["distractor_files"] == ["calc/report.py", "calc/__init__.py"]
    assert gold < tight["prompt_tokens"] <= budget
    three = build_rl_prompts(
        df, repos_dir=repo.root, tokenizer=words, min_tokens=1, mixed_fraction=1.0, max_files=3
    ).kept.row(0, named=True)
    assert three["distractor_files"] == ["calc/report.py"]
    over = build_rl_prompts(
        df, repos_dir=repo.root, tokenizer=words, max_tokens=gold - 1, min_tokens=1
    )
    assert over.dropped["reason"].to_list() == ["gold_exceeds_budget"]
    short = build_rl_prompts(
        df, repos_dir=repo.root, tokenizer=words, min_tokens=gold + 10**5, max_tokens=10**6
    )
    assert short.dropped["reason"].to_list() == ["prompt_below_min_tokens"]


def test_rl_prompt_order_is_seeded_and_kinds_split_instances(repo: Repo) -> None:
    ranked = [["calc/report.py", "calc/__init__.py"]] * 40
    df = instances(repo, 40, localized_files=ranked)
    kwargs = {"repos_dir": repo.root, "tokenizer": words, "min_tokens": 1, "max_tokens": 10**6}
    first = build_rl_prompts(df, seed=1, **kwargs).kept
    again = build_rl_prompts(df, seed=1, **kwargs).kept
    other = build_rl_prompts(df, seed=2, **kwargs).kept
    assert first["prompt"].to_list() == again["prompt"].to_list()
    orders = {
        tuple(f) for f in first.filter(pl.col("prompt_kind") == "mixed")["context_files"].to_list()
    }
    assert len(orders) > 1  # shuffled per instance
    assert first["prompt_kind"].to_list() != other["prompt_kind"].to_list()
    kinds = first["prompt_kind"].value_counts().sort("prompt_kind")["count"].to_list()
    assert all(10 <= k <= 30 for k in kinds)


def test_rl_prompts_count_with_a_trained_tokenizer(repo: Repo) -> None:
    tokenizer = Tokenizer(models.BPE(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel()
    tokenizer.train_from_iterator(
        [STATS, IO, REPORT, TESTS, ISSUE] * 5,
        trainers.BpeTrainer(vocab_size=300, special_tokens=["[UNK]"], show_progress=False),
    )
    count = token_counter(tokenizer)
    assert count("def mean(values):") == len(tokenizer.encode("def mean(values):").ids)
    result = build_rl_prompts(
        instances(repo), repos_dir=repo.root, tokenizer=tokenizer, min_tokens=10, max_tokens=10**5
    )
    row = result.kept.row(0, named=True)
    assert row["prompt_tokens"] == count(row["prompt"]) > words(row["prompt"])
