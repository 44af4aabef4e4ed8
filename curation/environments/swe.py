"""The `swe` environment: a repository, tools to read, search and edit it and to run its tests,
and a reward from executing the instance's FAIL_TO_PASS and PASS_TO_PASS tests (a minimal
OpenHands-style scaffold for agentic SWE).

An episode's repository is a dict of files held by its session (`files`: the base commit's
text files, from the row's `repo_files` or checked out of a local mirror of `repo` at
`base_commit`). Reading, searching and editing are plain string work on that dict; only tests
execute code, in the sandbox: the repository becomes importable modules inside the program
process, and each test function runs in the sandbox's checker process, calling the code under
test by message, so the verdict is the checker's and no repository code can print or fake it.
The instance's test files are put back over the model's edits before tests run: a model that
edits a test to pass it gains nothing.

The reward replays the episode's `edit_file` calls on the base files and runs every
FAIL_TO_PASS and PASS_TO_PASS test: 1 when all pass, else 0.

Limits: tests are plain functions of the test files (`tests/test_x.py::test_name`, no pytest
fixtures), as generated toy repositories have; a real SWE-Gym / SWE-rebench instance needs its
repository's own environment (a container per repository), which this sandbox does not give.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from curation.environments.answer import AnswerScoring, opening_messages
from curation.swe.repository import Snapshot, apply_patch, patch_files, repo_dir
from curation.verify.rewards import Reward, reward_named
from curation.verify.sandbox import Sandbox, default_sandbox
from curation.verify.swe_tests import SWE_COLUMNS, as_json, edited, run_tests, tests_verdict
from schemas.environment import Opening, Scored, ToolError, Transcript
from schemas.tool_calls import ToolCall, function_tool

_S = {"type": "string"}
SWE_TOOLS = (
    function_tool("list_files", "Paths of the repository's files.", {}, []),
    function_tool("view_file", "A file with line numbers.", {"path": _S}, ["path"]),
    function_tool(
        "search", "Lines containing `text`, as path:line: content.", {"text": _S}, ["text"]
    ),
    function_tool(
        "edit_file",
        "Replace the one occurrence of `old` in a file by `new`.",
        {"path": _S, "old": _S, "new": _S},
        ["path", "old", "new"],
    ),
    function_tool(
        "run_tests",
        "Run tests (ids like tests/test_x.py::test_name; all of the issue's when omitted).",
        {"tests": {"type": "array", "items": _S}},
        [],
    ),
)
SYSTEM = (
    "You are fixing an issue in a repository. Read the code, edit it with edit_file, run the "
    "tests with run_tests, and when they pass say that you are done."
)


def checkout(repos_dir: Path, repo: str, commit: str, max_bytes: int = 200_000) -> dict[str, str]:
    """The text files (up to `max_bytes` each) of `repo` at `commit` from its local clone
    under `repos_dir` (`owner__name`, as `curation.swe.repository` finds it)."""
    path = repo_dir(repos_dir, repo)
    if path is None:
        raise ValueError(f"no clone of {repo} under {repos_dir}")
    snapshot = Snapshot(path, commit)
    return {
        p: t for p, t in snapshot.read_many(snapshot.paths).items() if len(t.encode()) <= max_bytes
    }


def instance_tests(row: Mapping[str, Any], base: Mapping[str, str]) -> dict[str, str]:
    """The instance's test files: `test_files` ({path: text}) or, for SWE-Gym / SWE-rebench /
    R2E style rows, the files its `test_patch` adds or changes, applied to the base commit."""
    if row.get("test_files") is not None:
        return dict(as_json(row["test_files"]))
    patch = row.get("test_patch")
    if not patch:
        raise ValueError("row has neither test_files nor test_patch")
    applied = apply_patch(base, patch)
    return {p: applied[p] for p in patch_files(patch) if p in applied}


class SweSession:
    """One episode's repository (a dict of files) and its tools."""

    def __init__(
        self, files: dict[str, str], tests: dict[str, str], issue_tests: list[str], sandbox: Sandbox
    ) -> None:
        self.files, self.tests, self.issue_tests, self.sandbox = files, tests, issue_tests, sandbox

    def call(self, call: ToolCall, timeout_s: float) -> str:
        args = json.loads(call.arguments)
        if call.name == "list_files":
            return "\n".join(sorted(self.files))
        if call.name == "view_file":
            text = self._file(args.get("path"))
            return "\n".join(f"{i:4d} {line}" for i, line in enumerate(text.splitlines(), 1))
        if call.name == "search":
            needle = args.get("text")
            if not isinstance(needle, str) or not needle:
                raise ToolError("search takes a non-empty text")
            hits = [
                f"{p}:{i}: {line}"
                for p, t in sorted(self.files.items())
                for i, line in enumerate(t.splitlines(), 1)
                if needle in line
            ]
            return "\n".join(hits[:50]) or "no match"
        if call.name == "edit_file":
            self.files = edited(self.files, args)
            return f"edited {args['path']}"
        if call.name == "run_tests":
            wanted = args.get("tests") or self.issue_tests
            if not isinstance(wanted, list) or not all(isinstance(t, str) for t in wanted):
                raise ToolError("tests must be a list of test ids")
            results = run_tests(self.sandbox, {**self.files, **self.tests}, wanted, timeout_s)
            return "\n".join(
                f"{t}: {'passed' if ok else 'FAILED ' + why}" for t, ok, why in results
            )
        raise ToolError(f"unknown tool {call.name!r}")

    def _file(self, path: object) -> str:
        if not isinstance(path, str) or path not in self.files:
            raise ToolError(f"no file {path!r}; list_files shows the repository")
        return self.files[path]

    def close(self) -> None:
        pass


class SweEnvironment(AnswerScoring):
    """A repository per episode; reward from its tests (see the module docstring)."""

    name = "swe"

    def __init__(
        self,
        reward: Reward | None = None,
        *,
        sandbox: Sandbox | None = None,
        repos_dir: str | Path | None = None,
        **clients: Any,
    ) -> None:
        super().__init__(reward or reward_named("swe_tests"), **clients)
        self._sandbox = sandbox
        self.repos_dir = Path(repos_dir) if repos_dir is not None else None
        self.columns = (*self.columns, *(c for c in SWE_COLUMNS if c not in self.columns))

    def base_files(self, row: Mapping[str, Any]) -> dict[str, str]:
        if row.get("repo_files") is not None:
            return dict(as_json(row["repo_files"]))
        if self.repos_dir is None:
            raise ValueError("row has no repo_files and the environment no repos_dir to check out")
        return checkout(self.repos_dir, row["repo"], row["base_commit"])

    def open(self, row: Mapping[str, Any]) -> tuple[Opening, SweSession]:
        base = self.base_files(row)
        tests = instance_tests(row, base)
        issue_tests = [*as_json(row["FAIL_TO_PASS"]), *as_json(row["PASS_TO_PASS"])]
        files = {**base, **tests}
        if row.get("messages") is not None or isinstance(row.get("prompt"), str):
            chat = opening_messages(row)  # the issue as the dataset's prompt gives it
        else:
            chat = ({"role": "user", "content": row["problem_statement"]},)
        if chat[0]["role"] != "system":
            chat = ({"role": "system", "content": SYSTEM}, *chat)
        opening = Opening(chat, SWE_TOOLS)
        return opening, SweSession(files, tests, issue_tests, self._sandbox or default_sandbox())

    def score(
        self, rows: Sequence[Mapping[str, Any]], transcripts: Sequence[Transcript]
    ) -> list[Scored]:
        if self.reward.name != "swe_tests":
            return super().score(rows, transcripts)
        out = []
        for row, t in zip(rows, transcripts, strict=True):
            base = self.base_files(row)
            tests = instance_tests(row, base)
            verdict = tests_verdict(
                self._sandbox or default_sandbox(),
                {**base, **tests},
                {**row, "test_files": tests},
                t.completion,
            )
            out.append(Scored(verdict[0], verdict[1]))
        return out
