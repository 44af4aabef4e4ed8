"""Math verifier: boxed-answer extraction, math-verify equivalence on real benchmark answers,
timeouts that work off the main thread, and majority vote."""

from __future__ import annotations

import json
import re
import threading
from fractions import Fraction
from pathlib import Path

import pytest

from curation.verify.math import MathVerifier, extract_boxed, math_reward


@pytest.fixture(scope="module")
def verifier():
    v = MathVerifier(workers=2, timeout_s=20.0)  # generous: the machine is shared
    yield v
    v.close()


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.parametrize(
    ("response", "answer"),
    [
        (r"<think>maybe \boxed{3}</think>So the answer is \boxed{\frac{1}{2}}.", r"\frac{1}{2}"),
        (r"\boxed{\frac{a^{2}}{\sqrt{b_{1}}}} then \boxed{x^{2}+\{1\}}", r"x^{2}+\{1\}"),
        (r"The answer is $\boxed 5$.", "5"),
        (r"final: \fbox{42}", "42"),
        (r"\boxed {7}", "7"),
        (r"<think>\boxed{3}", None),  # cut inside the think block: no answer
        (r"<think>x</think> no box here", None),
        (r"\boxed{unbalanced", None),
        (r"\boxedx{3}", None),
    ],
)
def test_extract_boxed(response: str, answer: str | None) -> None:
    assert extract_boxed(response) == answer


def _fraction_variants(answer: str) -> tuple[list[str], list[str]] | None:
    """Reformatted and wrong versions of an integer or a simple fraction answer."""
    text = answer.strip().strip("$")
    if re.fullmatch(r"-?\d+", text):
        n = int(text)
        return [f"{n}.0", f"\\boxed{{{n}}}", f"{2 * n}/2"], [str(n + 1), f"{n}.5"]
    m = re.fullmatch(r"(-?)\\[dt]?frac\{?(\d+)\}?\{?(\d+)\}?", text)
    if not m:
        return None
    sign, a, b = m.group(1), int(m.group(2)), int(m.group(3))
    value = Fraction(int(f"{sign}{a}"), b)
    same = [
        f"{sign}{a}/{b}",
        f"{sign}\\dfrac{{{a}}}{{{b}}}",
        f"{sign}\\frac{a}{b}" if a < 10 and b < 10 else f"{sign}\\tfrac{{{a}}}{{{b}}}",
    ]
    if 10**6 % value.denominator == 0 or all(
        p in (2, 5) for p in _prime_factors(value.denominator)
    ):
        same.append(str(float(value)))
    wrong = [f"{sign}{a + 1}/{b}", f"{sign}\\frac{{{b}}}{{{a}}}" if a != b else f"{a + 2}"]
    return same, wrong


def _prime_factors(n: int) -> set[int]:
    factors, d = set(), 2
    while d * d <= n:
        while n % d == 0:
            factors.add(d)
            n //= d
        d += 1
    if n > 1:
        factors.add(n)
    return factors


def test_benchmark_answers_equal_reformatted_versions_and_not_wrong_ones(
    verifier: MathVerifier, shared_data: Path
) -> None:
    bench = shared_data / "benchmarks"
    answers = [
        str(r["expected_answer"])
        for f in ("aime24.jsonl", "aime25.jsonl")
        for r in _jsonl(bench / f)
    ]
    answers += [r["answer"] for r in _jsonl(bench / "math500.jsonl")]
    same_pairs, wrong_pairs = [], []
    for answer in answers:
        variants = _fraction_variants(answer)
        if variants is None:
            continue
        same, wrong = variants
        same_pairs += [(answer, s) for s in same]
        wrong_pairs += [(answer, w) for w in wrong]
    assert len(same_pairs) > 300  # all 60 AIME answers and most MATH-500 numbers
    same_verdicts = verifier.equivalent_many(same_pairs, fast_path=False)
    missed = [(p, v.detail) for p, v in zip(same_pairs, same_verdicts, strict=True) if not v.passed]
    assert missed == []
    wrong_verdicts = verifier.equivalent_many(wrong_pairs, fast_path=False)
    accepted = [
        p for p, v in zip(wrong_pairs, wrong_verdicts, strict=True) if v.passed is not False
    ]
    assert accepted == []


def test_the_documented_examples(verifier: MathVerifier) -> None:
    pairs = [("\\frac{1}{2}", "1/2"), ("\\frac{1}{2}", "0.5"), ("\\frac{1}{2}", "\\dfrac12")]
    assert all(v.passed for v in verifier.equivalent_many(pairs, fast_path=False))
    wrong = [("\\frac{1}{2}", "1/3"), ("\\frac{1}{2}", "0.25"), ("\\frac{1}{2}", "\\dfrac13")]
    assert not any(v.passed for v in verifier.equivalent_many(wrong, fast_path=False))


def test_every_math500_answer_is_equivalent_to_itself_through_sympy(
    verifier: MathVerifier, shared_data: Path
) -> None:
    answers = [r["answer"] for r in _jsonl(shared_data / "benchmarks" / "math500.jsonl")]
    # \dfrac -> \frac changes the text, so this goes through math-verify, not the fast path
    pairs = [(a, a.replace("\\dfrac", "\\frac")) for a in answers[::5]]
    verdicts = verifier.equivalent_many(pairs, fast_path=False)
    assert [(p, v.detail) for p, v in zip(pairs, verdicts, strict=True) if not v.passed] == []


def test_timeout_is_reported_from_a_worker_thread() -> None:
    tight = MathVerifier(workers=1, timeout_s=0.001)
    try:
        results = []
        thread = threading.Thread(
            target=lambda: results.append(tight.verify(r"\boxed{\sqrt{2}^{2}}", "2"))
        )
        thread.start()
        thread.join()
        (verdict,) = results
        assert verdict.passed is None and verdict.detail.startswith("timeout")
        assert verdict.reward() is None
    finally:
        tight.close()


def test_verify_from_threads_gives_real_answers(verifier: MathVerifier) -> None:
    results: dict[int, bool | None] = {}

    def check(i: int) -> None:
        results[i] = verifier.verify(rf"\boxed{{{i}/2}}", rf"\frac{{{i}}}{{2}}").passed

    threads = [threading.Thread(target=check, args=(i,)) for i in range(1, 5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == {1: True, 2: True, 3: True, 4: True}


def test_majority_vote_merges_equivalent_forms(verifier: MathVerifier) -> None:
    responses = [
        r"\boxed{3}",
        r"\boxed{1/2}",
        r"<think>\boxed{9}</think>\boxed{\frac12}",
        r"\boxed{3}",
        r"\boxed{0.5}",
        "no answer",
    ]
    answer, votes = verifier.majority_answer(responses)
    assert votes == 3 and answer == "1/2"
    assert verifier.majority_answer(["nothing", "<think>\\boxed{1}"]) == (None, 0)


def test_math_reward_trl_style(monkeypatch: pytest.MonkeyPatch, verifier: MathVerifier) -> None:
    import curation.verify.math as math_module

    monkeypatch.setattr(math_module, "default_math_verifier", lambda: verifier)
    completions = [
        [{"role": "assistant", "content": r"<think>...</think>\boxed{\dfrac{3}{4}}"}],
        r"\boxed{0.7}",
        "I give up",
        r"\boxed{1}",
    ]
    rewards = math_reward(["q"] * 4, completions, answer=["0.75", "3/4", "1", None])
    assert rewards == [1.0, 0.0, 0.0, None]


def test_majority_vote_frame_flags_noisy_references(verifier: MathVerifier) -> None:
    import polars as pl

    from curation.verify.math import majority_vote_frame

    df = pl.DataFrame(
        {
            "id": ["a", "a", "a", "b", "b", "b", "c"],
            "response": [
                r"\boxed{1/2}",
                r"\boxed{0.5}",
                r"\boxed{3}",  # majority 1/2, reference right
                r"\boxed{7}",
                r"\boxed{7}",
                r"\boxed{\frac{14}{2}}",  # majority 7, reference wrong
                "no answer",
            ],
            "answer": [r"\frac12"] * 3 + ["8"] * 3 + ["1"],
        }
    )
    out = majority_vote_frame(df, verifier=verifier)
    assert out.get_column("id").to_list() == ["a", "b", "c"]
    assert out.get_column("votes").to_list() == [2, 3, 0]
    assert out.get_column("k").to_list() == [3, 3, 1]
    assert out.get_column("agrees").to_list() == [True, False, None]
    assert out.get_column("majority_answer").to_list()[:2] == ["1/2", "7"]


def test_deadline_pool_kills_only_the_late_call_and_keeps_serving() -> None:
    import math
    import time

    from curation.verify.deadline_pool import DeadlinePool

    pool = DeadlinePool(time.sleep, workers=2, timeout_s=1.0)
    try:
        outcomes = pool.map([(0.01,), (60,), (0.01,), (0.01,)])
        assert [kind for kind, _ in outcomes] == ["ok", "timeout", "ok", "ok"]
        assert [kind for kind, _ in pool.map([(0.01,)] * 3)] == ["ok"] * 3  # replaced worker
    finally:
        pool.close()
    failing = DeadlinePool(math.sqrt, workers=1, timeout_s=5.0)
    try:
        ((kind, message),) = failing.map([(-1.0,)])
        assert kind == "error" and message.startswith("ValueError: math domain error")
    finally:
        failing.close()
