"""Sandbox benchmark: test executions per second for short Python programs, side by side.

Two workloads from the shared data, each run three ways on the same number of cores:
- naive: one `python -c program` subprocess per test (fresh interpreter each time, no
  limits, no isolation), `--cores` of them at a time;
- naive -S: the same with `python -S` (no site processing, site-packages on PYTHONPATH),
  the fastest a fresh interpreter per test can start: the stronger baseline;
- sandbox: `curation.verify.sandbox.Sandbox(workers=--cores)`: persistent workers that fork
  one locked-down child per program and run all its tests in it.

Workloads:
- stdio: small stdin/stdout programs (sum, sort, reverse, ...) with 10 tests each, the shape
  of competitive-programming tests;
- leetcode: reference solutions from leetcode_train.jsonl with their `check(candidate)` test
  (one execution per program: the worst case for the sandbox, one fork per test).

Both ways must agree on every verdict; the script says so or fails.

`--baseline DIR` also times the sandbox of another checkout (e.g. `git archive` of main into
/tmp) on the same jobs, alternating rounds with this tree's (each in a fresh process, the
same driver), and prints both and their ratio: what a change to the sandbox costs.

    python bench/sandbox.py --cores 2
    python bench/sandbox.py --cores 2 --baseline /tmp/main-tree --rounds 5 --skip-naive
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import site
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from curation.verify.code import parse_tests  # noqa: E402
from curation.verify.sandbox import FunctionalTest, Sandbox, StdioTest, Test  # noqa: E402
from curation.verify.sandbox_prelude import LEETCODE_PRELUDE  # noqa: E402

SOURCES = ROOT.parent / "shared" / "data" / "sources"

STDIO_PROGRAMS = {
    "sum": ("print(sum(map(int, input().split())))", lambda xs: str(sum(xs))),
    "sort": (
        "print(*sorted(map(int, input().split())))",
        lambda xs: " ".join(map(str, sorted(xs))),
    ),
    "max": ("print(max(map(int, input().split())))", lambda xs: str(max(xs))),
    "reverse": ("print(*input().split()[::-1])", lambda xs: " ".join(map(str, xs[::-1]))),
    "squares": (
        "import sys\nxs = list(map(int, sys.stdin.read().split()))\nprint(sum(x * x for x in xs))",
        lambda xs: str(sum(x * x for x in xs)),
    ),
    "prefix": (
        "from itertools import accumulate\nprint(*accumulate(map(int, input().split())))",
        lambda xs: " ".join(str(sum(xs[: i + 1])) for i in range(len(xs))),
    ),
}


def stdio_workload(programs: int, tests_per_program: int) -> list[tuple[str, list[Test]]]:
    jobs = []
    names = list(STDIO_PROGRAMS)
    for p in range(programs):
        source, answer = STDIO_PROGRAMS[names[p % len(names)]]
        tests: list[Test] = []
        for t in range(tests_per_program):
            xs = [(p * 31 + t * 7 + k * 13) % 97 - 40 for k in range(5 + t)]
            tests.append(StdioTest(" ".join(map(str, xs)) + "\n", answer(xs)))
        jobs.append((f"# program {p}\n{source}\n", tests))
    return jobs


def leetcode_workload(programs: int) -> list[tuple[str, list[Test]]]:
    rows = [json.loads(line) for line in (SOURCES / "leetcode_train.jsonl").open()]
    step = max(1, len(rows) // programs)
    return [(r["solutions"], parse_tests(r["tests"])) for r in rows[::step][:programs]]


FAST_ENV = {"PATH": "/usr/bin:/bin", "PYTHONPATH": os.pathsep.join(site.getsitepackages())}


def naive_run(program: str, test: Test, timeout: float, fast: bool) -> bool:
    """One fresh interpreter per test: the baseline (`fast`: `python -S`)."""
    python = [sys.executable, "-S"] if fast else [sys.executable]
    if isinstance(test, StdioTest):
        args, stdin = [*python, "-c", program], test.input
    else:
        assert isinstance(test, FunctionalTest)
        args, stdin = [*python, "-c", f"{LEETCODE_PRELUDE}\n{program}\n{test.code}"], ""
    try:
        done = subprocess.run(
            args,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=FAST_ENV if fast else None,
        )
    except subprocess.TimeoutExpired:
        return False
    if done.returncode != 0:
        return False
    return isinstance(test, FunctionalTest) or done.stdout.split() == test.output.split()


def bench(jobs: list[tuple[str, list[Test]]], cores: int) -> dict[str, float]:
    executions = sum(len(tests) for _, tests in jobs)
    flat = [(program, test) for program, tests in jobs for test in tests]

    naive_s: dict[bool, float] = {}
    for fast in (False, True):
        started = time.perf_counter()
        with ThreadPoolExecutor(cores) as pool:
            run = functools.partial(naive_run, timeout=10.0, fast=fast)
            naive = list(pool.map(lambda pt, run=run: run(pt[0], pt[1]), flat))
        naive_s[fast] = time.perf_counter() - started
        if fast:
            naive_fast = naive

    with Sandbox(workers=cores) as box:
        box.run("print(1)", [StdioTest("", "1")])  # workers up: start-up is not per-test cost
        started = time.perf_counter()
        results = box.run_many(jobs, stop_on_failure=False)
        sandbox_s = time.perf_counter() - started
    boxed = [o.status == "passed" for r in results for o in r.outcomes]
    for baseline in (naive, naive_fast):
        if boxed != baseline:
            disagree = sum(a != b for a, b in zip(boxed, baseline, strict=True))
            raise SystemExit(f"verdicts differ on {disagree} of {executions} executions")
    return {
        "executions": executions,
        "passed": sum(boxed),
        "naive_exec_per_s": executions / naive_s[False],
        "naive_fast_exec_per_s": executions / naive_s[True],
        "sandbox_exec_per_s": executions / sandbox_s,
    }


# times one tree's Sandbox on jobs given as JSON; run with that tree first on PYTHONPATH
DRIVER = """
import json, sys, time
from curation.verify.sandbox import FunctionalTest, Sandbox, StdioTest
cores, path = int(sys.argv[1]), sys.argv[2]
jobs = [
    (program, [StdioTest(t[1], t[2]) if t[0] == "stdio" else FunctionalTest(t[1]) for t in tests])
    for program, tests in json.load(open(path))
]
with Sandbox(workers=cores) as box:
    box.run("print(1)", [StdioTest("", "1")])
    started = time.perf_counter()
    results = box.run_many(jobs, stop_on_failure=False)
    seconds = time.perf_counter() - started
print(json.dumps({"seconds": seconds, "passed": [o.status == "passed" for r in results for o in r.outcomes]}))
"""


def _as_json(jobs: list[tuple[str, list[Test]]]) -> list[Any]:
    return [
        (
            program,
            [
                ["stdio", t.input, t.output] if isinstance(t, StdioTest) else ["functional", t.code]
                for t in tests
            ],
        )
        for program, tests in jobs
    ]


def side_by_side(
    jobs: list[tuple[str, list[Test]]], cores: int, baseline: Path, rounds: int
) -> dict[str, float]:
    """Executions per second of this tree's sandbox and of `baseline`'s, median over
    alternating rounds; the verdicts must agree."""
    executions = sum(len(tests) for _, tests in jobs)
    seconds: dict[str, list[float]] = {"this": [], "baseline": []}
    verdicts: dict[str, list[bool]] = {}
    with tempfile.NamedTemporaryFile("w", suffix=".json") as spec:
        json.dump(_as_json(jobs), spec)
        spec.flush()
        for _ in range(rounds):
            for name, tree in (("baseline", baseline), ("this", ROOT)):
                done = subprocess.run(
                    [sys.executable, "-c", DRIVER, str(cores), spec.name],
                    env={**os.environ, "PYTHONPATH": str(tree)},
                    cwd=tree,
                    capture_output=True,
                    text=True,
                    check=True,
                )
                report = json.loads(done.stdout.strip().splitlines()[-1])
                seconds[name].append(report["seconds"])
                verdicts[name] = report["passed"]
    if verdicts["this"] != verdicts["baseline"]:
        disagree = sum(a != b for a, b in zip(verdicts["this"], verdicts["baseline"], strict=True))
        raise SystemExit(f"the two sandboxes' verdicts differ on {disagree} executions")
    return {name: executions / statistics.median(values) for name, values in seconds.items()} | {
        "executions": executions
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--stdio-programs", type=int, default=30)
    parser.add_argument("--tests-per-program", type=int, default=10)
    parser.add_argument("--leetcode-programs", type=int, default=200)
    parser.add_argument("--baseline", type=Path, help="another checkout, timed side by side")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--skip-naive", action="store_true", help="only the side-by-side table")
    args = parser.parse_args()
    workloads = {
        f"stdio ({args.tests_per_program} tests/program)": stdio_workload(
            args.stdio_programs, args.tests_per_program
        ),
        "leetcode (1 test/program)": leetcode_workload(args.leetcode_programs),
    }
    print(f"cores={args.cores}  python={sys.version.split()[0]}")
    if args.baseline is not None:
        print(f"side by side with {args.baseline}, median of {args.rounds} alternating rounds")
        header = ["workload", "execs", "baseline/s", "this/s", "this/baseline"]
        print(f"{header[0]:<28}" + "".join(f"{h:>14}" for h in header[1:]))
        for name, jobs in workloads.items():
            r = side_by_side(jobs, args.cores, args.baseline, args.rounds)
            print(
                f"{name:<28}{r['executions']:>14}{r['baseline']:>14.1f}{r['this']:>14.1f}"
                f"{r['this'] / r['baseline']:>14.2f}"
            )
    if args.skip_naive:
        return
    header = ["workload", "execs", "naive/s", "naive -S/s", "sandbox/s", "vs naive", "vs -S"]
    print(f"{header[0]:<28}" + "".join(f"{h:>11}" for h in header[1:]))
    for name, jobs in workloads.items():
        r = bench(jobs, args.cores)
        box = r["sandbox_exec_per_s"]
        print(
            f"{name:<28}{r['executions']:>11}{r['naive_exec_per_s']:>11.1f}"
            f"{r['naive_fast_exec_per_s']:>11.1f}{box:>11.1f}"
            f"{box / r['naive_exec_per_s']:>10.1f}x{box / r['naive_fast_exec_per_s']:>10.1f}x"
        )


if __name__ == "__main__":
    main()
