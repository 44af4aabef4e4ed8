"""Test generation: a self-contained reproduction test, run for real in the sandbox.

The prompt holds the issue, a candidate patch (the gold one when building SFT data) and the
files it touches; the response ends with one Python test that prints "Issue reproduced" when
the bug shows, "Issue resolved" when it is fixed and "Other issues" otherwise. The SFT keep
rule is that the test parses and runs without a syntax error. It runs in the sandbox
(`curation.verify.sandbox`) inside a copy of the repository's files at the base commit, and,
when the gold patch is given, again with that patch applied, so each row also records what it
printed before and after (`outcome_before`, `outcome_after`): the Agentless reproduction
filter (reproduced before, resolved after) is `require_reproduction=True`.

The outcome travels back through a functional test: the sandbox's checker reads the wrapper's
`__outcome__` from the program's namespace as data and asserts on it, and a failed
assertion's message is all the sandbox returns of a run; the test script itself runs once.
"""

from __future__ import annotations

import ast
import base64
import json
import zlib
from collections.abc import Sequence
from pathlib import Path

import polars as pl

from curation.swe.localization import snapshots
from curation.swe.repair import render_files
from curation.swe.repository import RepositoryError, Snapshot, apply_patch, patch_files
from curation.verify.code import extract_code
from curation.verify.sandbox import (
    FunctionalTest,
    ProgramResult,
    Sandbox,
    SandboxLimits,
    default_sandbox,
)
from lake.operators import decide
from lake.steps import StepResult

OUTCOMES = ("Issue reproduced", "Issue resolved", "Other issues")
TESTGEN_TEMPLATE = """Write a test that reproduces the GitHub issue below.

### Issue
{issue}

### Candidate patch
```diff
{patch}
```

### Files
{files}

The test must be one self-contained Python script that imports the code under test, runs \
the scenario of the issue and prints exactly one of "Issue reproduced" (the bug shows), \
"Issue resolved" (it is fixed) or "Other issues" (anything else). Reason inside \
<think>...</think>, then give the script in one ```python block."""

_WRAPPER = """
import base64 as _b64, contextlib as _cl, io as _io, json as _json, os as _os, sys as _sys
import zlib as _zlib
for _path, _text in _json.loads(_zlib.decompress(_b64.b64decode({blob!r}))).items():
    if _os.path.dirname(_path):
        _os.makedirs(_os.path.dirname(_path), exist_ok=True)
    with open(_path, "w", encoding="utf-8") as _handle:
        _handle.write(_text)
_sys.path.insert(0, _os.getcwd())
_sys.dont_write_bytecode = True
_OUTCOMES = {outcomes!r}
_printed = _io.StringIO()
_error = None
try:
    _code = compile({source!r}, "generated_test.py", "exec")
except SyntaxError as _exc:
    _error = "syntax error: line %s: %s" % (_exc.lineno, _exc.msg)
else:
    try:
        with _cl.redirect_stdout(_printed):
            exec(_code, {{"__name__": "__main__"}})
    except SystemExit as _exc:
        if _exc.code not in (None, 0):
            _error = "exit status %s" % _exc.code
    except BaseException as _exc:
        _error = "raised %s: %s" % (type(_exc).__name__, str(_exc)[:120])
_lines = [l.strip() for l in _printed.getvalue().splitlines()]
_said = [l for l in _lines if l in _OUTCOMES] or [o for o in _OUTCOMES if o in _printed.getvalue()]
__outcome__ = _said[-1] if _said else (_error or "printed no outcome")
"""
_PROBE = "assert __outcome__ == 'Issue reproduced', __outcome__\n"
_FAILED = "assertion failed: "


def sandbox_program(files: dict[str, str], source: str) -> str:
    """A program that writes `files` into its work directory, runs `source` there as
    `__main__` with its output captured, and leaves the outcome in `__outcome__`."""
    blob = base64.b64encode(zlib.compress(json.dumps(files).encode(), 6)).decode()
    return _WRAPPER.format(blob=blob, outcomes=OUTCOMES, source=source)


def outcome_of(result: ProgramResult) -> tuple[str | None, str | None]:
    """(what the test printed or raised, why the run itself failed) from a sandbox result."""
    if result.harness_error or result.compile_error or not result.outcomes:
        return None, result.summary()
    test = result.outcomes[0]
    if test.status == "passed":
        return "Issue reproduced", None
    if test.status == "failed" and test.detail.startswith(_FAILED):
        return test.detail[len(_FAILED) :], None
    return None, f"{test.status}: {test.detail}" if test.detail else test.status


def build_testgen_prompts(
    df: pl.DataFrame,
    *,
    repos_dir: str | Path,
    template: str = TESTGEN_TEMPLATE,
    patch_column: str = "patch",
) -> StepResult:
    """Add `prompt` (issue + candidate patch + the files it touches at the base commit).
    Instances without a usable clone are dropped with reason `repo_unavailable`."""
    prompts: list[str | None] = []
    errors: list[str | None] = []
    rows = df.select("problem_statement", patch_column).iter_rows()
    for snap, (issue, patch) in zip(snapshots(df, repos_dir), rows, strict=True):
        if isinstance(snap, str):
            prompts.append(None)
            errors.append(snap)
            continue
        files = render_files(list(snap.read_many(patch_files(patch)).items()))
        prompts.append(template.format(issue=issue, patch=patch.rstrip(), files=files))
        errors.append(None)
    measured = df.with_columns(
        pl.Series("prompt", prompts, dtype=pl.String),
        pl.Series("repo_error", errors, dtype=pl.String),
    )
    return decide(
        measured,
        pl.when(pl.col("repo_error").is_not_null()).then(pl.lit("repo_unavailable")),
        drop_only=("repo_error",),
        counts=("rows_in", "dropped"),
    )


def _repository_files(
    snap: Snapshot, suffixes: Sequence[str], patch: str | None
) -> tuple[dict[str, str], dict[str, str] | None, str | None]:
    """The repository's files (by suffix), the same with `patch` applied, and why the patch
    could not be applied."""
    before = snap.read_many(p for p in snap.paths if p.endswith(tuple(suffixes)))
    if not patch:
        return before, None, None
    touched = snap.read_many(patch_files(patch))
    try:
        changed = apply_patch(touched, patch)
    except RepositoryError as exc:
        return before, None, str(exc)
    after = {p: t for p, t in before.items() if p not in touched}
    after.update(changed)
    return before, after, None


def check_generated_tests(
    df: pl.DataFrame,
    *,
    repos_dir: str | Path,
    response_column: str = "response",
    patch_column: str | None = "patch",
    repo_suffixes: Sequence[str] = (".py",),
    require_reproduction: bool = False,
    sandbox: Sandbox | None = None,
    limits: SandboxLimits | None = None,
) -> StepResult:
    """Keep generated tests that parse and run in the sandbox without a syntax error.

    Every row gets `test_code`, `outcome_before` (what the test printed on the repository at
    the base commit: one of OUTCOMES, "printed no outcome", or what it raised),
    `outcome_after` (the same with the gold patch applied; null without `patch_column`) and
    `run_error` (why the sandbox could not finish a run). Drop reasons: `no_test_code`,
    `test_syntax_error`, `repo_unavailable`, `test_not_completed` (timeout, crash, memory),
    and with `require_reproduction`, `not_reproduced` (not "Issue reproduced" before and
    "Issue resolved" after).
    """
    responses = [r or "" for r in df.get_column(response_column).to_list()]
    patches = df.get_column(patch_column).to_list() if patch_column else [None] * df.height
    codes = [extract_code(r) for r in responses]
    reasons: list[str | None] = [None] * df.height
    details: list[str | None] = [None] * df.height
    jobs: list[tuple[str, list[FunctionalTest]]] = []
    where: list[tuple[int, str]] = []
    cache: dict[
        tuple[int, str | None], tuple[dict[str, str], dict[str, str] | None, str | None]
    ] = {}
    for i, (snap, code, patch) in enumerate(
        zip(snapshots(df, repos_dir), codes, patches, strict=True)
    ):
        if code is None:
            reasons[i], details[i] = "no_test_code", "no ```python block in the answer"
            continue
        try:
            ast.parse(code)
        except SyntaxError as exc:
            reasons[i], details[i] = "test_syntax_error", f"line {exc.lineno}: {exc.msg}"
            continue
        if isinstance(snap, str):
            reasons[i], details[i] = "repo_unavailable", snap
            continue
        key = (id(snap), patch)
        if key not in cache:
            cache[key] = _repository_files(snap, repo_suffixes, patch)
        before, after, patch_error = cache[key]
        jobs.append((sandbox_program(before, code), [FunctionalTest(_PROBE)]))
        where.append((i, "before"))
        if after is not None:
            jobs.append((sandbox_program(after, code), [FunctionalTest(_PROBE)]))
            where.append((i, "after"))
        elif patch_error:
            details[i] = f"gold patch: {patch_error}"
    box = sandbox or default_sandbox()
    outcome: dict[tuple[int, str], str | None] = {}
    for (i, side), result in zip(
        where, box.run_many(jobs, limits=limits, prelude=None), strict=True
    ):
        said, error = outcome_of(result)
        outcome[(i, side)] = said
        if error is not None and reasons[i] is None:
            reasons[i], details[i] = "test_not_completed", f"{side}: {error}"
    before_col = [outcome.get((i, "before")) for i in range(df.height)]
    after_col = [outcome.get((i, "after")) for i in range(df.height)]
    for i in range(df.height):
        if reasons[i] is None and (before_col[i] or "").startswith("syntax error"):
            reasons[i], details[i] = "test_syntax_error", before_col[i]
        elif (
            reasons[i] is None
            and require_reproduction
            and (before_col[i] != "Issue reproduced" or after_col[i] != "Issue resolved")
        ):
            reasons[i] = "not_reproduced"
    measured = df.with_columns(
        pl.Series("test_code", codes, dtype=pl.String),
        pl.Series("outcome_before", before_col, dtype=pl.String),
        pl.Series("outcome_after", after_col, dtype=pl.String),
        pl.Series("run_error", details, dtype=pl.String),
        pl.Series("reason", reasons, dtype=pl.String),
    )
    stats = {
        "sandbox_runs": len(jobs),
        "reproduced_before": sum(o == "Issue reproduced" for o in before_col),
        "resolved_after": sum(o == "Issue resolved" for o in after_col),
    }
    return decide(measured, "reason", stats=stats)
