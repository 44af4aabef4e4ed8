"""The code_sft recipe's steps, run in order on real LeetCode problems with planted cases and a
scripted teacher: every planted case leaves at the step and with the reason it should."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path

import polars as pl
import pytest

from builders import code_sft
from builders.runner import Build
from curation.ingest import ingest
from lake import Lake
from lake.files import json_lines
from schemas.generation import Completion, GenerationRequest

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
TWO_SUM_STORY = (
    "Please solve the programming task below using a self-contained code snippet in a markdown "
    "code block.\n\nA cashier holds a row of coin values and a price. Name the positions of the "
    "two coins that together pay the price exactly; exactly one such pair exists and a coin is "
    "used once. Any order of the two positions is accepted.\n"
)


class ScriptedTeacher:
    """Answers each prompt with: its reference solution, the same program re-commented and
    re-formatted, and a wrong program; prompts without a solution get traces of three lengths."""

    name = "scripted"

    def __init__(self, model: str, solutions: dict[str, str]) -> None:
        self.model = model
        self.solutions = solutions

    def generate(self, requests: Sequence[GenerationRequest]) -> Iterator[Completion]:
        for request in requests:
            prompt = request.messages[-1]["content"]
            solution = self.solutions.get(prompt)
            index = request.seed  # seed = sample index (seed 0)
            if solution is None:
                text = "<think>" + "reasoning " * (10 * (index + 1)) + "</think>done"
            elif index == 0:
                text = f"<think>plan</think>\n```python\n{solution}```"
            elif index == 1:
                lines = solution.replace("\n", "\n\n").replace("    ", "  ")
                text = f"<think>again</think>\n```python\n# restated\n{lines}```"
            else:
                text = "<think>guess</think>\n```python\nclass Solution:\n    pass\n```"
            yield Completion(request.key, text, 10, len(text.split()), "stop")

    def close(self) -> None:
        pass


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("code_sft")
    train = [r for _, r in json_lines(DATA / "sources" / "leetcode_train.jsonl")][:8]
    bench = [r for _, r in json_lines(DATA / "benchmarks" / "leetcode_test.jsonl")]
    planted = [
        {**train[0], "problem": TWO_SUM_STORY, "case": "behaviour_duplicate"},
        {**bench[0], "case": "benchmark_copy"},
        {
            **bench[5],
            "problem": "Please solve the programming task below.\n\nA gardener "
            "waters plants along a path and wants the fewest trips; compute it.",
            "case": "benchmark_behaviour",
        },
        {
            **train[3],
            "problem": train[3]["problem"] + "\n(Asked at an interview.)",
            "url": "https://leetcode.com/problems/median-of-two-sorted-arrays/",
            "case": "eval_url",
        },
        {
            **train[4],
            "problem": train[4]["problem"] + "\nSolve it fast.",
            "release_date": "2024-09-15",
            "case": "after_cutoff",
        },
        {"problem": "Explain how a hash map resolves collisions, with code.", "case": "untested"},
    ]
    rows = [{**r, "case": "clean"} for r in train] + planted
    for row in rows:
        row.setdefault("url", None)
        row.setdefault("release_date", "2023-01-01")
        row.setdefault("tests", None)
        row.setdefault("solutions", None)
    source = root / "code_problems.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in rows))
    urls = root / "eval_urls.txt"
    urls.write_text("https://leetcode.com/problems/median-of-two-sorted-arrays/description/\n")
    lake = Lake(root / "lake")
    report = ingest(lake, [str(source)], "code_sft_sources", domain="code")
    frame = pl.from_arrow(lake.read(report.version.ref))
    solutions = {r["problem"]: r["solutions"] for r in rows if r["solutions"]}
    params = {
        **code_sft.DEFAULTS,
        "benchmark_dir": str(DATA / "benchmarks"),
        "benchmark_url_file": str(urls),
        "teacher": "scripted-teacher",
        "k": 3,
        "backend_factory": lambda model: ScriptedTeacher(model, solutions),
    }
    build = Build(lake=lake, profile="default", workdir=root)
    log = []
    for step in code_sft.steps(params, build):
        result = step.run(frame, **step.params)
        if step.name != "teacher_traces":  # the one fan-out step: one row per trace
            assert frame.height == result.kept.height + result.dropped.height, step.name
        log.append((step.name, frame, result))
        frame = result.kept
    return rows, log, frame


def case_of(frame: pl.DataFrame) -> list[str]:
    return [json.loads(m)["case"] for m in frame["metadata"]]


def test_each_planted_problem_leaves_at_its_step(built) -> None:
    _, log, _ = built
    drops = {
        (name, reason): sorted(case_of(part))
        for name, _, result in log
        if result.dropped.height
        for (reason,), part in result.dropped.group_by("reason")
        if name != "correctness" and name != "syntax_dedup"
    }
    assert drops == {
        ("release_cutoff", "released_after_cutoff"): ["after_cutoff"],
        ("decontaminate", "contaminated"): ["benchmark_copy"],
        ("decontaminate_urls", "same_problem_id"): ["eval_url"],
        ("decontaminate_behaviour", "behaviour_contaminated"): ["benchmark_behaviour"],
        ("behaviour_dedup", "behaviour_duplicate"): ["behaviour_duplicate"],
    }
    dedup = next(r for name, _, r in log if name == "behaviour_dedup")
    twin = dedup.dropped.row(0, named=True)
    assert twin["duplicate_of"] == "code_problems:1"  # the original Two Sum, first line
    assert twin["io_jaccard"] == 1.0 and twin["text_similarity"] < 0.3


def test_traces_are_verified_and_renamed_copies_dropped(built) -> None:
    _, log, final = built
    results = {name: (before, result) for name, before, result in log}
    prompts, traces = results["teacher_traces"]
    assert traces.kept.height == 3 * prompts.height
    assert traces.kept["uid"].n_unique() == traces.kept.height
    correctness = results["correctness"][1]
    reasons = correctness.dropped.group_by("reason").len().sort("reason").rows()
    tested = prompts.height - 1
    assert reasons == [("shorter_trace", 1), ("tests_failed", tested)]
    syntax = results["syntax_dedup"][1]
    assert syntax.dropped.height == tested  # the re-formatted copy of each reference solution
    assert (syntax.dropped["duplicate_of"].to_list()) == (
        syntax.kept.filter(pl.col("has_tests"))["uid"].to_list()
    )
    assert sorted(set(case_of(final))) == ["clean", "untested"]
    untested = final.filter(~pl.col("has_tests"))
    assert sorted(untested["length_rank"]) == [1, 2]  # the two longer of three traces
    assert final.height == tested + 2


def test_step_list_reads_like_the_recipe_without_loading_anything() -> None:
    dry = Build(lake=None, profile="default", workdir=Path("."), dry_run=True)
    names = [s.name for s in code_sft.steps(dict(code_sft.DEFAULTS), dry)]
    assert names == [
        "lift_fields",
        "release_cutoff",
        "decontaminate",
        "decontaminate_urls",
        "decontaminate_behaviour",
        "exact_dedup",
        "behaviour_dedup",
        "near_dedup",
        "teacher_traces",
        "correctness",
        "syntax_dedup",
    ]


def test_every_benchmark_and_url_list_reaches_the_manifest(tmp_path: Path) -> None:
    """The 9-gram sets, the code benchmarks' tests and the URL list the recipe loads itself
    are all recorded, and a report reads each back unchanged."""
    from builders.publish.evidence import BenchmarkItems
    from curation.code.benchmark_tests import load_code_benchmark

    urls = tmp_path / "eval_urls.txt"
    urls.write_text("# evaluation problems\nhttps://leetcode.com/problems/two-sum/\n")
    params = {
        **code_sft.DEFAULTS,
        "benchmark_dir": str(DATA / "benchmarks"),
        "benchmark_url_file": str(urls),
    }
    build = Build(lake=None, profile="default", workdir=tmp_path)
    code_sft.steps(params, build)
    recorded = {(b.kind, b.name): b.items for b in build.benchmarks}
    assert set(recorded) == {
        *(("texts", name) for name in code_sft.DEFAULTS["benchmarks"]),
        *(
            ("tests", f.removesuffix(".jsonl"))
            for f in code_sft.DEFAULTS["behaviour_benchmark_files"]
        ),
        ("urls", "eval_urls"),
    }
    assert recorded[("urls", "eval_urls")] == 1
    assert all(n > 0 for n in recorded.values())
    reread = BenchmarkItems.from_manifest(build.benchmarks)
    assert reread.problems == {}
    assert reread.text("eval_urls", "https://leetcode.com/problems/two-sum/") is not None
    tests = load_code_benchmark(DATA / "benchmarks" / "leetcode_test.jsonl")
    assert reread.loaded["leetcode_test"].ids == tests["benchmark_id"].to_list()
