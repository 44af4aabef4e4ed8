"""Code verifier on real data: every LeetCode reference solution against its own tests."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from curation.verify.code import code_reward, extract_code, parse_tests, verify_code_batch
from curation.verify.sandbox import FunctionalTest, Sandbox, SandboxLimits, StdioTest


@pytest.fixture(scope="module")
def box():
    with Sandbox(workers=2) as sandbox:
        yield sandbox


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_extract_code_takes_last_python_block_after_think() -> None:
    response = (
        "<think>```python\nprint('draft')\n```</think>Here:\n```python\nprint(1)\n```\n"
        "and a shell line\n```bash\nls\n```\n```py\nprint(2)\n```"
    )
    assert extract_code(response) == "print(2)\n"
    assert extract_code("no code here") is None
    assert extract_code("<think>```python\nx=1\n```</think>only prose") is None


def test_parse_tests_reads_every_source_shape(shared_data: Path) -> None:
    leetcode = _jsonl(shared_data / "sources" / "leetcode_train.jsonl")[0]["tests"]
    assert isinstance(parse_tests(leetcode)[0], FunctionalTest)
    humaneval = _jsonl(shared_data / "benchmarks" / "humaneval.jsonl")[0]
    (he,) = parse_tests({"test": humaneval["test"], "entry_point": humaneval["entry_point"]})
    assert he.code.rstrip().endswith(f"check({humaneval['entry_point']})")
    codeforces = _jsonl(shared_data / "benchmarks" / "codeforces_test.jsonl")[0]["tests"]
    cf = parse_tests(codeforces)
    assert cf and all(isinstance(t, StdioTest) for t in cf)
    assert cf[0].input == codeforces[0]["input"]
    contests = _jsonl(shared_data / "benchmarks" / "code_contests_test.jsonl")[0]["tests"]
    cc = parse_tests(contests)
    assert len(cc) == len(contests["inputs"]) and all(isinstance(t, StdioTest) for t in cc)
    assert parse_tests(repr(contests)) == cc  # the Python-literal string form reads the same
    assert parse_tests(json.dumps({"inputs": ["1"], "outputs": ["2"]})) == [StdioTest("1", "2")]
    # a table mixing shapes (polars unifies struct fields) holds nulls for absent keys
    mixed = {"functional": None, "inputs": ["1"], "outputs": ["2"]}
    assert parse_tests(mixed) == [StdioTest("1", "2")]
    with pytest.raises(ValueError, match="2 inputs but 1 outputs"):
        parse_tests({"inputs": ["1", "2"], "outputs": ["2"]})
    with pytest.raises(ValueError, match="test 0"):
        parse_tests([{"in": "1"}])


def test_code_reward_trl_style(box: Sandbox, monkeypatch: pytest.MonkeyPatch) -> None:
    import curation.verify.code as code

    monkeypatch.setattr(code, "default_sandbox", lambda: box)
    tests = [{"inputs": ["3\n"], "outputs": ["9\n"]}] * 3 + ["not tests at all ("]
    completions = [
        [{"role": "assistant", "content": "```python\nn = int(input())\nprint(n * n)\n```"}],
        "```python\nn = int(input())\nprint(n + n)\n```",
        "I cannot write code.",
        "```python\nprint(1)\n```",
    ]
    rewards = code_reward(["p"] * 4, completions, tests=tests)
    assert rewards == [1.0, 0.0, 0.0, None]


def _run_leetcode(box: Sandbox, rows: list[dict], label: str) -> dict[int, str]:
    # a generous per-test limit: this checks the data and the harness, not speed (one
    # reference solution sieves primes to 1e5 at import and needs ~3-5 s on a loaded machine)
    limits = SandboxLimits(time_limit_s=30.0)
    started = time.perf_counter()
    verdicts = verify_code_batch(
        [r["solutions"] for r in rows],
        [r["tests"] for r in rows],
        sandbox=box,
        limits=limits,
        extract=False,
    )
    failures = {i: v.detail for i, v in enumerate(verdicts) if not v.passed}
    elapsed = time.perf_counter() - started
    print(f"{label}: {len(rows) - len(failures)}/{len(rows)} pass in {elapsed:.1f}s")
    return failures


def test_leetcode_reference_solutions_sample(box: Sandbox, shared_data: Path) -> None:
    rows = _jsonl(shared_data / "sources" / "leetcode_train.jsonl")
    assert len(rows) == 1889
    assert _run_leetcode(box, rows[::10], "leetcode_train every 10th") == {}


@pytest.mark.slow
def test_every_leetcode_reference_solution_passes_its_tests(
    box: Sandbox, shared_data: Path
) -> None:
    rows = _jsonl(shared_data / "sources" / "leetcode_train.jsonl")
    assert _run_leetcode(box, rows, "leetcode_train all") == {}


def test_every_humaneval_canonical_solution_passes(box: Sandbox, shared_data: Path) -> None:
    rows = _jsonl(shared_data / "benchmarks" / "humaneval.jsonl")
    verdicts = verify_code_batch(
        [r["prompt"] + r["canonical_solution"] for r in rows],
        [{"test": r["test"], "entry_point": r["entry_point"]} for r in rows],
        sandbox=box,
        extract=False,
    )
    assert [v.detail for v in verdicts if not v.passed] == []
    # and a wrong solution fails: the tests are real
    wrong = verify_code_batch(
        [
            rows[0]["prompt"]
            + "    return not "
            + rows[0]["canonical_solution"].strip().split("return ")[-1]
        ],
        [{"test": rows[0]["test"], "entry_point": rows[0]["entry_point"]}],
        sandbox=box,
        extract=False,
    )
    assert wrong[0].passed is False
