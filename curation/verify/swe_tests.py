"""Execution-based SWE verification: an instance's tests run against a repository held as a
dict of files, in the sandbox, with verdicts no repository code can fake.

The repository becomes importable modules inside the sandboxed program (an import hook over
the files); each test function runs in the sandbox's checker process and calls the code under
test by message (`curation.verify.sandbox`), so passing is the checker's verdict. Tests are
plain functions of the test files (`tests/test_x.py::test_name`; no pytest fixtures).

`swe_tests` (a reward kind) replays an episode's `edit_file` calls on the base commit's files,
puts the instance's test files back over them (editing a test to pass it gains nothing) and
runs every FAIL_TO_PASS and PASS_TO_PASS test: 1 when all pass, else 0.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Mapping, Sequence
from typing import Any

from curation.verify.sandbox import FunctionalTest, Sandbox, SandboxLimits, default_sandbox
from schemas.environment import ToolError

SWE_COLUMNS = ("problem_statement", "test_files", "FAIL_TO_PASS", "PASS_TO_PASS")
"""The row columns an swe episode reads besides its repository (`repo_files`, or `repo` and
`base_commit` with a local mirror)."""

IMPORTER = """
import importlib.abc, importlib.util, sys
FILES = {files!r}
class _Repository(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path=None, target=None):
        base = name.replace(".", "/")
        for file, package in ((base + ".py", False), (base + "/__init__.py", True)):
            if file in FILES:
                return importlib.util.spec_from_loader(name, self, is_package=package)
        if any(f.startswith(base + "/") for f in FILES):
            return importlib.util.spec_from_loader(name, self, is_package=True)
        return None
    def create_module(self, spec):
        return None
    def exec_module(self, module):
        base = module.__name__.replace(".", "/")
        file = base + ".py" if base + ".py" in FILES else base + "/__init__.py"
        if file in FILES:
            exec(compile(FILES[file], file, "exec"), module.__dict__)
sys.meta_path.insert(0, _Repository())
"""


def split_test_id(test_id: str) -> tuple[str, str]:
    """`tests/test_x.py::test_name` -> (path, function name), or a ValueError."""
    path, sep, name = test_id.partition("::")
    if not sep or not path.endswith(".py") or not name.isidentifier():
        raise ValueError(f"test id {test_id!r} is not path.py::function_name")
    return path, name


def sandbox_job(files: Mapping[str, str], test_id: str) -> tuple[str, FunctionalTest]:
    """The sandbox job of one test: a program that makes the repository importable and runs
    the test file's imports, and the test function (with a call) for the checker."""
    path, name = split_test_id(test_id)
    if path not in files:
        raise ValueError(f"no test file {path}")
    tree = ast.parse(files[path], path)
    imports = [n for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom)]
    function = next(
        (n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name), None
    )
    if function is None:
        raise ValueError(f"no test function {name} in {path}")
    sources = {p: t for p, t in files.items() if p.endswith(".py")}
    program = IMPORTER.format(files=sources) + "\n".join(ast.unparse(n) for n in imports) + "\n"
    return program, FunctionalTest(f"{ast.unparse(function)}\n{name}()\n")


def run_tests(
    sandbox: Sandbox, files: Mapping[str, str], test_ids: Sequence[str], timeout_s: float
) -> list[tuple[str, bool, str]]:
    """(test id, passed, detail) per test, each run in the sandbox (see the module docstring)."""
    jobs, ids, out = [], [], []
    for test_id in test_ids:
        try:
            program, test = sandbox_job(files, test_id)
        except (ValueError, SyntaxError) as exc:
            out.append((test_id, False, str(exc)))
            continue
        jobs.append((program, [test]))
        ids.append(test_id)
    limits = SandboxLimits(time_limit_s=timeout_s, memory_mb=512, max_processes=4)
    for test_id, result in zip(
        ids, sandbox.run_many(jobs, limits=limits, prelude=None), strict=True
    ):
        out.append((test_id, result.passed, result.summary()))
    return out


def edited(files: dict[str, str], args: Mapping[str, Any]) -> dict[str, str]:
    """`files` after one edit_file call, or a ToolError saying why it cannot apply."""
    path, old, new = args.get("path"), args.get("old"), args.get("new")
    if not all(isinstance(v, str) for v in (path, old, new)):
        raise ToolError("edit_file takes strings path, old and new")
    if path not in files:
        raise ToolError(f"no file {path!r}")
    count = files[path].count(old) if old else 0
    if count != 1:
        raise ToolError(f"`old` occurs {count} times in {path}; it must occur exactly once")
    return {**files, path: files[path].replace(old, new, 1)}


def replayed_files(files: dict[str, str], turns: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """The repository after the episode's edit_file calls, replayed in order (refused edits
    change nothing, as in the episode)."""
    for turn in turns:
        if turn.get("role") != "assistant":
            continue
        for raw in turn.get("tool_calls") or ():
            call = raw.get("function", raw) if isinstance(raw, dict) else {}
            if call.get("name") != "edit_file":
                continue
            args = call.get("arguments", {})
            try:
                args = json.loads(args) if isinstance(args, str) else args
                files = edited(files, args if isinstance(args, dict) else {})
            except (ToolError, ValueError):
                continue
    return files


def tests_verdict(
    sandbox: Sandbox,
    files: dict[str, str],
    row: Mapping[str, Any],
    completion: object,
    timeout_s: float = 10.0,
) -> tuple[float, str]:
    """(1.0 or 0.0, why): every FAIL_TO_PASS and PASS_TO_PASS test after the replayed edits,
    with the instance's test files put back."""
    turns = completion if isinstance(completion, list) else []
    final = {**replayed_files(files, turns), **dict(as_json(row["test_files"]))}
    wanted = [*as_json(row["FAIL_TO_PASS"]), *as_json(row["PASS_TO_PASS"])]
    results = run_tests(sandbox, final, wanted, timeout_s)
    failed = [f"{t} ({why})" for t, ok, why in results if not ok]
    if failed:
        return 0.0, f"swe_tests: {len(failed)}/{len(results)} failed: {'; '.join(failed)[:300]}"
    return 1.0, f"swe_tests: {len(results)}/{len(results)} passed"


def as_json(value: object) -> Any:
    return json.loads(value) if isinstance(value, str) else value


def swe_tests_reward(
    prompts: Sequence[Any],
    completions: Sequence[Any],
    test_files: Sequence[Any],
    FAIL_TO_PASS: Sequence[Any],  # noqa: N803 - the SWE-bench column name
    PASS_TO_PASS: Sequence[Any],  # noqa: N803
    repo_files: Sequence[Any] | None = None,
    **_: Any,
) -> list[float | None]:
    """TRL-style reward of an swe episode: 1 if its replayed edits pass every issue test."""
    if repo_files is None:
        raise ValueError("swe_tests needs each row's repo_files (the base commit's files)")
    sandbox = default_sandbox()
    out: list[float | None] = []
    for c, files, tests, f2p, p2p in zip(
        completions, repo_files, test_files, FAIL_TO_PASS, PASS_TO_PASS, strict=True
    ):
        row = {"test_files": tests, "FAIL_TO_PASS": f2p, "PASS_TO_PASS": p2p}
        out.append(
            tests_verdict(sandbox, {**dict(as_json(files)), **dict(as_json(tests))}, row, c)[0]
        )
    return out
