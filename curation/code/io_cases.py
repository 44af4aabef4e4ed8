"""A code problem's tests as normalized I/O cases: what the problem does, whatever its story.

Every test shape `curation.verify.code.parse_tests` reads becomes a list of case strings:

- stdin/stdout tests: input and expected output, each as its whitespace-separated tokens
  (`"3\\n1 2 3\\n"` and `"3 1 2 3"` are one input), joined by ` -> `;
- functional tests (LeetCode's `check(candidate)`, HumanEval's `check` + entry point): one case
  per `assert`, unparsed from the AST (quotes, spacing and parentheses normalized) with the
  keyword names of `candidate(...)` calls dropped, so `candidate(nums=[1, 2], k=3)` and
  `candidate([1, 2], 3)` are the same call whatever the parameters are named. A test without
  any `assert` is one case: its whole normalized source.

Two statements of one task with different stories share these strings; the same story with
other tests does not.

    >>> io_cases({"functional": "def check(candidate):\\n    assert candidate(n = 3) == [1,2]\\n"})
    ['candidate(3) == [1, 2]']
    >>> io_cases([{"input": "2\\n1  2\\n", "output": "3"}])
    ['2 1 2 -> 3']
"""

from __future__ import annotations

import ast
from typing import Any

import xxhash

from curation.verify.code import parse_tests
from curation.verify.sandbox import FunctionalTest, StdioTest

CASE_SEPARATOR = " -> "


class _PositionalCandidate(ast.NodeTransformer):
    """`candidate(a=1, b=2)` -> `candidate(1, 2)`: argument names are the story's, not the
    behaviour's."""

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.func, ast.Name) and node.func.id == "candidate" and node.keywords:
            node.args = [*node.args, *(k.value for k in node.keywords if k.arg is not None)]
            node.keywords = [k for k in node.keywords if k.arg is None]
        return node


def functional_cases(source: str) -> list[str]:
    """One normalized case per `assert` in a functional test (see the module docstring)."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise ValueError(f"functional test does not parse: line {exc.lineno}: {exc.msg}") from None
    tree = _PositionalCandidate().visit(tree)
    cases = [ast.unparse(node.test) for node in ast.walk(tree) if isinstance(node, ast.Assert)]
    return cases or [ast.unparse(tree)]


def stdio_case(test: StdioTest) -> str:
    """Input and expected output as whitespace-separated tokens, joined by ` -> `."""
    return " ".join(test.input.split()) + CASE_SEPARATOR + " ".join(test.output.split())


def io_cases(tests: Any) -> list[str]:
    """The distinct normalized cases of a test description, in first-seen order.

    `tests` is any shape `parse_tests` reads (a dict, a list, or JSON / Python-literal
    text); None gives no cases. ValueError says what is wrong with an unreadable one.
    """
    if tests is None or (isinstance(tests, str) and not tests.strip()):
        return []
    cases: list[str] = []
    for test in parse_tests(tests):
        if isinstance(test, StdioTest):
            cases.append(stdio_case(test))
        elif isinstance(test, FunctionalTest):
            cases.extend(functional_cases(test.code))
    return list(dict.fromkeys(cases))


def case_hash(case: str) -> int:
    """A stable 63-bit hash of one case (fits Polars' Int64)."""
    return xxhash.xxh3_64_intdigest(case.encode()) >> 1
